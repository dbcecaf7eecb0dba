#pragma once
// Kernels linked from the op library (lto_render.hpp): libNVVM turns a kernel's NVVM IR into
// LTO IR, nvJitLink links it with the library's LTO IR (inlining every call) and runs ptxas.
// libNVVM and nvJitLink are loaded at first use (dlopen: libnvvm lives outside the toolkit's
// lib64 on many installs); without them, lto_available() is false and kernels take NVRTC.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/jit/nvrtc_compiler.hpp"

namespace livefuse::jit {

bool lto_available();
std::string lto_unavailable_reason();  // empty when available

// Links kernels (NVVM IR from render_pointwise_ir, one exp flavour) against the library for
// `opts` and that flavour, into one cubin -- or its PTX, with opts.output == Output::ptx. The
// library is compiled once per (arch, options, flavour) and process; its NVRTC time is not part
// of compile_ms. The library is read, and ptxas set up, once for all the kernels. On failure,
// `error` and `log` say why.
struct LinkInput {
  const std::string* ir;
  std::string name;
  std::vector<uint32_t> custom_ops;  // custom_ops_of(spec): their modules join the link
};
NvrtcOutput lto_compile(const std::vector<LinkInput>& kernels, const CompileOptions& opts, bool fast_exp);
// The op library's NVRTC time for these options and flavour (compiling it if not yet done):
// paid once per process, outside every kernel's compile_ms. < 0 when it does not compile.
double lto_library_ms(const CompileOptions& opts, bool fast_exp);
// The PTX the same link makes (tests compare it with NVRTC's for the C++ kernel); empty on failure.
std::string lto_ptx(const std::string& ir, const CompileOptions& opts, bool fast_exp,
                    const std::vector<uint32_t>& custom_ops = {});

}  // namespace livefuse::jit
