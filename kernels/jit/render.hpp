#pragma once
// The CUDA renderer: KernelSpec -> CUDA C++ source for NVRTC. The source is the embedded
// device helpers (kernels/device/lf_math.cuh, kernels/jit/lf_fused.cuh) followed by the
// generated kernels; the elementwise math is each op's `expr` from LF_OP_TABLE (or a custom
// op's cuda_expr), pasted, never re-typed.
//
// Every spec renders to one module with several entry points (variants), picked per launch:
//   pointwise: vec (16-byte loads/stores, dense operands; a scalar tail when numel is not a
//              multiple of VEC) | vec exact (the same without the tail: NVRTC compiles one copy
//              of the program less) | strided (any strides, broadcast)
//   row:       cache (Full values kept in registers, or shared memory when there are many)
//              | recompute (re-reads inputs)
// each with 32-bit and 64-bit indexing. Sizes, strides and pointers are kernel parameters
// (one struct of 64-bit words, see ArgLayout), so a kernel is independent of concrete shapes.
#include <string>
#include <string_view>
#include <vector>

#include "kernels/jit/kernel_spec.hpp"

namespace livefuse::jit {

extern const std::string_view kLfMathSource;   // kernels/device/lf_math.cuh
extern const std::string_view kLfFusedSource;  // kernels/jit/lf_fused.cuh

// Word offsets into the kernel's parameter block (an array of 64-bit words).
//  pointwise part at `base`: numel, rank, shape[8], block_begin, nvec, then per io
//    (inputs, then outputs) at io[k]: pointer, strides[8]
//  row (one part, base 0): rows, rank, lead_shape[8], cols, -, then per io: pointer,
//    lead_strides[8], col_stride
struct ArgLayout {
  struct Part {
    int base = 0;
    std::vector<int> in, out;
  };
  std::vector<Part> parts;
  int words = 0;
};
ArgLayout arg_layout(const KernelSpec& spec);
inline constexpr int kMaxArgWords = 500;  // 4000 bytes: under the classic 4 KiB parameter limit

enum class Variant : uint8_t {
  VecI32, VecI64, StridedI32, StridedI64,               // pointwise
  CacheI32, CacheI64, RecomputeI32, RecomputeI64,       // row, one column per step
  VecCacheI32, VecCacheI64, VecRecomputeI32, VecRecomputeI64,  // row, 16-byte column packs
  VecExactI32, VecExactI64,                             // pointwise, numel % VEC == 0 in every part
  VecPipeI32, VecPipeI64,  // row, 16-byte packs, row in registers, pipelined: a wave of resident
                           // blocks loops over the rows, the next row's reads in flight
};
inline constexpr unsigned kNumVariants = static_cast<unsigned>(Variant::VecPipeI64) + 1;
inline bool is_pipe_row(Variant v) { return v == Variant::VecPipeI32 || v == Variant::VecPipeI64; }
// The plain register body beside a pipelined one (same index width).
inline Variant plain_row_variant(Variant pipe) {
  return pipe == Variant::VecPipeI64 ? Variant::VecCacheI64 : Variant::VecCacheI32;
}
inline bool is_vec_pointwise(Variant v) {
  return v == Variant::VecI32 || v == Variant::VecI64 || v == Variant::VecExactI32 || v == Variant::VecExactI64;
}
inline bool is_vec_row(Variant v) {
  return v == Variant::VecCacheI32 || v == Variant::VecCacheI64 || v == Variant::VecRecomputeI32 ||
         v == Variant::VecRecomputeI64 || is_pipe_row(v);
}
inline bool is_cache_row(Variant v) {
  return v == Variant::CacheI32 || v == Variant::CacheI64 || v == Variant::VecCacheI32 || v == Variant::VecCacheI64 ||
         is_pipe_row(v);
}
inline bool is_i64(Variant v) {
  return v == Variant::VecI64 || v == Variant::StridedI64 || v == Variant::CacheI64 || v == Variant::RecomputeI64 ||
         v == Variant::VecCacheI64 || v == Variant::VecRecomputeI64 || v == Variant::VecExactI64 ||
         v == Variant::VecPipeI64;
}
std::string_view variant_suffix(Variant v);
constexpr uint32_t variant_bit(Variant v) { return 1u << static_cast<unsigned>(v); }
inline bool wants_variant(const KernelSpec& s, Variant v) { return s.variants == 0 || (s.variants & variant_bit(v)); }

// What the shared part of a program (the embedded helpers) must provide for a kernel.
struct ProgramHead {
  bool fast_exp = false;  // every result f16/bf16: exp as one MUFU instruction (LF_FAST_EXP)
  bool packs = false;     // 16-byte pack helpers
  bool rows = false;      // row helpers (reductions, cp.async)
};

struct RenderedKernel {
  std::string source;   // program_head(head) + body: the kernel alone, as one program
  std::string body;     // the kernel's own code, in namespace `prefix`
  ProgramHead head;
  std::string prefix;   // entry point names are prefix + "_" + variant_suffix
  int vec = 1;          // pointwise: elements per thread of the vec variants
  int ncache = 0;       // row: Full values a shared-memory cache would hold per column (floats)
  int row_regs = 0;     // row: columns per thread the cache variants hold in registers (0: they
                        // cache in shared memory, ncache floats per column)
  int row_vec = 1;      // row: columns per 16-byte pack in the vec variants
  int row_stage_bytes = 0;     // row, VecPipe: shared memory a thread stages the next row in
                               // (dynamic shared memory of the launch: threads x this)
  bool row_late_loads = false; // row, register bodies: global reads after the first loop (a
                               // norm's weights), which the pipelined body does not prefetch
  ArgLayout layout;
  std::vector<Variant> variants;

  std::string entry(Variant v) const { return prefix + "_" + std::string(variant_suffix(v)); }
};

inline constexpr int kPointwiseBlock = 256;
inline constexpr int kRowMaxThreads = 512;  // per block; leaves 128 registers a thread

RenderedKernel render_cuda(const KernelSpec& spec);
std::string program_head(const ProgramHead& h);
// One program of several kernels: one head (the union of theirs) and every body. NVRTC's fixed
// cost per program (about half of a small kernel's compile) is then paid once. Kernels of one
// program must agree on fast_exp (it changes lf_exp in the head).
std::string program_source(const std::vector<const RenderedKernel*>& kernels);
// Elements per 16-byte pack of a pointwise spec's vec variants (its narrowest dtype's).
int pointwise_vec_width(const KernelSpec& spec);
// Columns per 16-byte pack of a row part's vec variants (its narrowest per-element operand's).
int row_vec_width(const KernelPart& part);

// Row kernels: registers a thread may spend on held row values (0: the built-in budget); a
// knob for benchmarks. It changes the rendered source, so kernels rendered under one budget are
// never served for another.
void set_row_reg_budget(int floats);
// Row kernels: only pipelined register variants (1), only unpipelined ones (0), or both, the
// launch choosing (-1, the built-in); a knob for benchmarks, like the budget.
void set_row_pipeline(int on);
// Row kernels: register rows issue their later loops' loads (a norm's weight and bias) at the
// row's start, held across the reductions (render_row.cpp); off: each where its loop needs it.
// LIVEFUSE_ROW_EARLY_LOADS by default (-1); 0 / 1 force it (tests, benchmarks). Changes the
// rendered source, so kernels rendered one way are never served for the other.
void set_row_early_loads(int on);
bool row_early_loads();
// Expensive scalar functions (gelu, erf, tanh, sigmoid, silu) called out of line, one copy per
// kernel instead of one per unrolled element (less NVRTC time, a call per element); a knob for
// benchmarks, off by default. Like the budget, it changes the rendered source.
void set_outline_heavy_ops(bool on);

}  // namespace livefuse::jit
