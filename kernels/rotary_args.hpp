#pragma once
// The operands of the rotary template (planner/pass_rotary.cpp): the rotate-half rotary
// embedding as Llama code writes it,
//   out = x * cos + concat(-x[.., h:], x[.., :h]) * sin      (h = d / 2, along the last dim),
// as both kernels (kernels/cpu/rotary.cpp, kernels/cuda/rotary.cu) take it. Plain data only:
// nvcc compiles the CUDA kernel against this header without the runtime's headers.
//
// Every operand is seen as 4-D [n0, n1, n2, d] through element strides, so x may be a view (the
// heads of a projection) and cos / sin broadcast (stride 0: [1, t, 1, d] over batch and heads).
// The result is dense. Rounding is eager's: each product is rounded to the dtype, then the sum
// (x * cos and rotate_half(x) * sin are two eager muls and one add; the negation is exact).
#include <cstdint>

#include "livefuse/dtype.hpp"

namespace livefuse {

struct RotaryArgs {
  const void* x = nullptr;
  const void* cos = nullptr;
  const void* sin = nullptr;
  void* out = nullptr;       // dense [n0, n1, n2, d]
  DType dtype = DType::f32;  // of every operand: f32, f16 or bf16
  int64_t n[3] = {0, 0, 0};  // the leading dims of the result
  int64_t d = 0;             // the last dim: even
  // Element strides along [n0, n1, n2, d] (0 where an operand broadcasts).
  int64_t x_st[4] = {}, cos_st[4] = {}, sin_st[4] = {};

#if defined(__CUDACC__)
  __host__ __device__
#endif
      int64_t rows() const {
    return n[0] * n[1] * n[2];
  }
};

// One launch computes up to this many rotaries (a layer's q and k: one step, one launch).
inline constexpr int kRotaryMaxParts = 4;

namespace cpu {
void run_rotary(const RotaryArgs* parts, int count);
}
namespace cuda {
// Enqueues one kernel for every part on `stream` (a cudaStream_t); never synchronises.
void launch_rotary(const RotaryArgs* parts, int count, void* stream);
}  // namespace cuda

}  // namespace livefuse
