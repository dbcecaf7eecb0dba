#pragma once
// [ Note -- kernels linked from an op library (LIVEFUSE_JIT=lto) ]
// NVRTC spends most of a small kernel's compile on work that is the same for every kernel: its
// C++ front end (its own builtin header, our device helpers), libdevice, ptxas's setup. So the
// ops are compiled once, as an op library: the device helpers (lf_math.cuh, lf_fused.cuh) and
// one extern "C" wrapper per (op, compute type), per conversion and per storage access, whose
// bodies are the very C expressions of the op table -- compiled by NVRTC to LTO IR (-dlto), per
// architecture, options and exp flavour, once per process and kept in the kernel cache's
// directory for the next (lto_library.cpp, lto_compiler.cpp). A kernel is then
// NVVM IR that only indexes, loads, calls wrappers and stores (render_pointwise_ir,
// lto_render.cpp; the names both sides use: lto_detail.hpp); libNVVM turns it into LTO IR
// and nvJitLink links it with the library, inlining every call, and runs ptxas
// (lto_compiler.hpp). Entry names and the by-value LfArgs are the NVRTC kernel's, so launches do
// not change. tools/nvvm_probe has the measurements that chose this route; the H200 ones that
// made it the default (5-9 ms a pointwise kernel against NVRTC's 38-69, the same speed, NVRTC's
// values bit for bit) are in bench/RESULTS.md, session 7. LIVEFUSE_JIT=nvrtc turns it off.
//
// Covered: pointwise kernels of built-in and registered custom ops, every variant (packed VecExact and Vec with their
// tail of single elements, strided through each operand's strides; 32- and 64-bit indexing).
// Row kernels and out-of-line ops compile with NVRTC.
#include <string>
#include <vector>

#include "kernels/jit/kernel_spec.hpp"
#include "kernels/jit/render.hpp"

namespace livefuse::jit {

// The library's C++ source for one exp flavour (ProgramHead::fast_exp).
std::string op_library_source(bool fast_exp);
// A registered custom elementwise op's wrapper (its CUDA expression over float a, b, c), a
// module of its own linked beside the library: the library does not change when ops register.
std::string custom_op_source(uint32_t custom_id, bool fast_exp);
// The custom ops a kernel calls (their modules join its link).
std::vector<uint32_t> custom_ops_of(const KernelSpec& spec);

// Whether render_pointwise_ir covers this kernel (else: NVRTC).
bool ir_covers(const KernelSpec& spec);

// The kernel as NVVM IR (LLVM 7 text, NVVM IR 2.0) over the library's functions. `rk` is the
// NVRTC rendering of the same spec: entry names, argument layout and pack width come from it.
std::string render_pointwise_ir(const KernelSpec& spec, const RenderedKernel& rk);

}  // namespace livefuse::jit
