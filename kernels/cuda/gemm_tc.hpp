#pragma once
// A tensor-core GEMM of our own for linears whose epilogue cuBLASLt cannot do in one launch:
//   * bias + erf-GELU or SiLU (cuBLASLt's GELU epilogue is the tanh form): BERT's FFN1 + gelu
//     is one launch where it took the GEMM and an activation kernel;
//   * sibling linears over one input (Q / K / V) written as their own dense outputs from one
//     product over the concatenated weights, where cuBLASLt takes a strided-batched call.
// out = act(round(x w^T + bias)) rounded, each step rounded as eager's linear then activation
// kernel write it (the activation reads the linear's rounded value). The sum runs in f32 on
// m16n8k16 tensor-core tiles in another order than cuBLASLt's, so results may differ from
// eager's in the last bits of the dtype (eager's tolerance: the planner's tests say so).
// f16 and bf16; the shape rules are gemm_tc_supported's. Launched with PDL, its first weight
// tiles loaded before the wait inside a plan; K split over blocks only where K is long (FFN2).
// Plans use it with LIVEFUSE_GEMM_TC=1 only: on an H100 it took 1.6-2x cuBLASLt's time on BERT's
// linears (bench/RESULTS.md, sessions 43 and 53; a wgmma form in the lab, gemm_wgmma.cuh,
// reached 0.6-1.0x).
// f32 (LIVEFUSE_GEMM_F32X3=1 only) runs as three TF32 products a step (gemm_tc_f32.cuh: near
// f32's accuracy, unrounded), with K split over blocks where K is long: 1.2-2.5x cuBLASLt's
// SIMT time on BERT's f32 linears at 128 rows (bench/RESULTS.md, session 52).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "livefuse/dtype.hpp"

namespace livefuse::cuda {

// Applied after the bias (the op table's numerics: kernels/device/lf_math.cuh).
enum class TcAct : uint8_t { none, relu, gelu, gelu_tanh, silu };
inline constexpr int kGemmTcMaxParts = 8;
// K is consumed in steps of this many elements (f32: kGemmTcStepKF32); N in tiles of
// kGemmTcTileN columns.
inline constexpr int64_t kGemmTcStepK = 64, kGemmTcStepKF32 = 32, kGemmTcTileN = 64;

struct GemmTcArgs {
  DType dtype = DType::f16;  // of x, w, bias and the outputs (f16, bf16, f32)
  int64_t m = 0, n = 0, k = 0;
  const void* x = nullptr;  // [m, k], row stride ldx, unit stride along k
  int64_t ldx = 0;
  const void* w = nullptr;     // [n, k] dense (a linear's weight)
  const void* bias = nullptr;  // [n] dense, or null
  TcAct act = TcAct::none;
  // Column c of the product goes to out[c / width] at [row, c % width], each part dense
  // [m, width]; parts * width == n. One part: the plain product.
  int parts = 1;
  int64_t width = 0;
  void* out[kGemmTcMaxParts] = {};
  // Set by launch_gemm_tc (gemm_tc_splits): K split `splits` ways; the splits' partial products
  // go to `partial` (splits * m * n floats) and a tile's last split sums them (`counters`: one
  // zeroed unsigned a tile, (m / BM) x (n / BN), left zeroed again; gemm_tc_split.cuh).
  int splits = 1;
  float* partial = nullptr;
  unsigned* counters = nullptr;
  // f16 / bf16: the first weight tiles are loaded before the kernel's PDL wait (gemm_tc.cuh): w
  // must be memory no kernel that may still be running writes. launch_gemm_tc sets it inside an
  // EarlyWeightsScope (gemv.hpp) when PDL is on.
  bool early_weights = false;
};

// How many ways a launch of `tiles` output tiles of `steps` K steps each splits K (1: not at
// all), with room for `space_splits` partial products of the whole output and `counters` tiles
// -- by K's length alone, however many SMs the tiles leave idle (the partials' round trip costs
// more than a short K saves). f16 / bf16 (steps of kGemmTcStepK): from kGemmTcSplitFrom steps,
// about kGemmTcSplitSteps steps a split; f32 (3xTF32, steps of kGemmTcStepKF32): about
// kGemmTcF32SplitSteps steps a split.
inline constexpr int64_t kGemmTcSplitFrom = 32, kGemmTcSplitSteps = 12, kGemmTcF32SplitSteps = 24;
int gemm_tc_splits(DType dt, int64_t tiles, int64_t steps, int64_t space_splits, int64_t counters);

// Whether the kernel takes `a` (false: the caller runs cuBLASLt): a device of compute
// capability 8.0 or later; f16 / bf16; n a multiple of kGemmTcTileN and k of kGemmTcStepK;
// widths even; x, w and every output 16-byte aligned, ldx a multiple of 8; m, n, k > 0.
bool gemm_tc_supported(const GemmTcArgs& a);
void launch_gemm_tc(const GemmTcArgs& a, cudaStream_t s);

}  // namespace livefuse::cuda
