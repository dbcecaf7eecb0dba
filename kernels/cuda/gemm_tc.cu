// The tensor-core GEMM's launches (gemm_tc.hpp; the kernels: gemm_tc.cuh, f32 gemm_tc_f32.cuh).
// Both split K over blocks where gemm_tc_splits says so, their partials in the stream's split
// space (split_space.hpp); f16 / bf16 launch with PDL (pdl.hpp), f32 without.
#include <algorithm>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/gemm_tc_f32.cuh"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/pdl.hpp"
#include "kernels/cuda/split_space.hpp"
#include "kernels/cuda/vector_rows.hpp"

namespace livefuse::cuda {
namespace {

// a.splits as gemm_tc_splits gives it for `tiles` tiles of `steps` steps, with the split space
// of s; 1 where a capture finds the stream without one yet (no allocation is allowed then).
void choose_splits(GemmTcArgs& a, int64_t tiles, int64_t steps, cudaStream_t s) {
  const int64_t space_splits = static_cast<int64_t>(kSplitSpaceBytes / (static_cast<size_t>(a.m * a.n) * sizeof(float)));
  a.splits = gemm_tc_splits(a.dtype, tiles, steps, space_splits, kSplitSpaceCounters);
  a.partial = nullptr;
  a.counters = nullptr;
  if (a.splits == 1) return;
  const SplitSpace space = split_space(s);
  if (!space.part) {
    a.splits = 1;
    return;
  }
  a.partial = static_cast<float*>(space.part);
  a.counters = space.count;
}

template <class S, int BM, int kStages>
void launch_tiles(GemmTcArgs a, cudaStream_t s) {
  constexpr int kSmem = tc::kGemmSmem<BM, kStages>;
  static const bool configured = [] {
    LF_CUDA_CALL(cudaFuncSetAttribute(tc::gemm_tc_kernel<S, BM, kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  const int64_t tiles = (a.m + BM - 1) / BM * (a.n / tc::kGemmBN);
  choose_splits(a, tiles, a.k / tc::kGemmBK, s);
  const dim3 grid(static_cast<unsigned>(a.n / tc::kGemmBN), static_cast<unsigned>((a.m + BM - 1) / BM),
                  static_cast<unsigned>(a.splits));
  launch_pdl("gemm_tc", tc::gemm_tc_kernel<S, BM, kStages>, grid, tc::kGemmThreads, kSmem, s, a);
}

template <class S>
void launch_typed(const GemmTcArgs& a, cudaStream_t s) {
  // 64-row tiles where they fill the SMs; else 32-row tiles, twice the blocks.
  const int64_t tiles64 = (a.m + 63) / 64 * (a.n / tc::kGemmBN);
  if (tiles64 >= current_device_info().sm_count) launch_tiles<S, 64, 3>(a, s);
  else launch_tiles<S, 32, 4>(a, s);
}

// f32 (3xTF32). Tiles and K splits as tools/gpu/lab/f32_emulation.sh measured them over BERT's
// f32 linears (H100, bench/RESULTS.md session 52): 64 x 64 tiles where they fill the SMs (1024
// rows), else 32 x 32; K split so that each split sums about kGemmTcF32SplitSteps steps (FFN2 at
// 128 rows: 4 splits, 27.3 us against 41.2 unsplit).
template <int BM, int BN, int kStages>
void launch_f32_tiles(GemmTcArgs a, cudaStream_t s) {
  constexpr int kSmem = tc::kGemmF32Smem<BM, BN, kStages, true>;
  static const bool configured = [] {
    LF_CUDA_CALL(cudaFuncSetAttribute(tc::gemm_tc_f32_kernel<BM, BN, kStages, true>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  choose_splits(a, (a.m + BM - 1) / BM * (a.n / BN), a.k / tc::kF32BK, s);
  const dim3 grid(static_cast<unsigned>(a.n / BN), static_cast<unsigned>((a.m + BM - 1) / BM),
                  static_cast<unsigned>(a.splits));
  // Without PDL: f32 BERT-base b1 with LIVEFUSE_GEMM_F32X3=1 took 1.84-1.85 ms a forward with
  // it against 1.36-1.39 without (H100, bench/RESULTS.md session 53), where f16's kernel gains.
  tc::gemm_tc_f32_kernel<BM, BN, kStages, true><<<grid, tc::kGemmThreads, kSmem, s>>>(a);
  LF_CUDA_LAUNCH_CHECK("gemm_tc_f32");
}

void launch_f32(const GemmTcArgs& a, cudaStream_t s) {
  const int64_t tiles64 = (a.m + 63) / 64 * (a.n / 64);
  if (tiles64 >= current_device_info().sm_count) launch_f32_tiles<64, 64, 3>(a, s);
  else launch_f32_tiles<32, 32, 4>(a, s);
}

}  // namespace

bool gemm_tc_supported(const GemmTcArgs& a) {
  if (a.dtype != DType::f16 && a.dtype != DType::bf16 && a.dtype != DType::f32) return false;
  const int64_t step_k = a.dtype == DType::f32 ? kGemmTcStepKF32 : kGemmTcStepK;
  if (a.m <= 0 || a.n <= 0 || a.k <= 0 || a.n % kGemmTcTileN != 0 || a.k % step_k != 0) return false;
  if (a.parts < 1 || a.parts > kGemmTcMaxParts || a.width <= 0 || a.width % 2 != 0 || a.parts * a.width != a.n)
    return false;
  // 16-byte rows: 8 f16 / bf16 or 4 f32 elements.
  if (!aligned16(a.x) || !aligned16(a.w) || a.ldx < a.k || a.ldx % (a.dtype == DType::f32 ? 4 : 8) != 0) return false;
  if (a.bias && reinterpret_cast<uintptr_t>(a.bias) % 4 != 0) return false;
  for (int p = 0; p < a.parts; ++p)
    if (!a.out[p] || !aligned16(a.out[p])) return false;
  // Grid rows are blockIdx.y (at most 65535 tiles of 32 rows).
  if ((a.m + 31) / 32 > 65535) return false;
  return current_device_info().cc_major >= 8;
}

void launch_gemm_tc(const GemmTcArgs& args, cudaStream_t s) {
  GemmTcArgs a = args;
  a.early_weights = a.dtype != DType::f32 && (a.early_weights || early_weights_scope()) && pdl_enabled();
  if (a.dtype == DType::f32) launch_f32(a, s);
  else if (a.dtype == DType::f16) launch_typed<F16>(a, s);
  else launch_typed<BF16>(a, s);
}

}  // namespace livefuse::cuda
