#pragma once
// Products with few rows -- a decode step's linears, out[m, n] = x[m, :] . w[n, :] for m < 8 --
// as one bandwidth-bound kernel instead of a cuBLASLt GEMM: each row of the weight is read once,
// 16 bytes a load, by one to four warps, with the bias, activation and residual applied as the
// result is written. cuBLASLt's kernels for M = 1 took 5.5-9 us (with a split-K reduction) for
// GPT-2's 1-5 MB weights (ncu, H200), where the bytes alone take ~1 us.
//
// Rounding follows eager op by op: (product + bias) is rounded to the dtype first, then the
// activation or the residual add is applied to that rounded value and rounded again -- what a
// linear then a gelu_tanh / add kernel write. So a fused epilogue here gives the bits eager
// gives, in f16 and bf16 too (cuBLASLt's epilogue rounds once, which is why a half-precision
// residual is only fused where this kernel runs).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "livefuse/dtype.hpp"

namespace livefuse::cuda {

inline constexpr int kGemvMaxRows = 8;

// The activation applied after the bias (values as LtAct's: none, relu, gelu_tanh).
enum class GemvAct : uint8_t { none, relu, gelu_tanh };

struct GemvArgs {
  DType dtype = DType::f32;  // of x, w, bias, residual and out alike (f32, f16, bf16)
  int rows = 0;              // 1..kGemvMaxRows
  int64_t n = 0, k = 0;
  const void* x = nullptr;  // [rows, k], row stride ldx, unit stride along k
  int64_t ldx = 0;
  const void* w = nullptr;  // [n, k], row stride ldw, unit stride along k (a linear's weight)
  int64_t ldw = 0;
  const void* bias = nullptr;      // [n] dense, or null
  const void* residual = nullptr;  // [rows, n] laid out as out, or null (never with act)
  void* out = nullptr;             // [rows, n], row stride ldo
  int64_t ldo = 0;
  GemvAct act = GemvAct::none;
};

// Whether launch_gemv takes `a`: dtype, rows, k a whole number of 16-byte loads, x and w
// 16-byte aligned (pointers and row strides), no activation together with a residual.
bool gemv_supported(const GemvArgs& a);
// Enqueues the product on `s`; `a` must be gemv_supported. Nothing is allocated.
void launch_gemv(const GemvArgs& a, cudaStream_t s);

}  // namespace livefuse::cuda
