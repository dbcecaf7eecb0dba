// The tensor-core GEMM's launches (gemm_tc.hpp; the kernel: gemm_tc.cuh). BM is 32 when 64-row
// tiles would leave SMs idle (BERT at batch 1: 128 rows), else 64.
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/gemm_tc.cuh"
#include "kernels/cuda/vector_rows.hpp"

namespace livefuse::cuda {
namespace {

template <class S, int BM, int kStages>
void launch_tiles(const GemmTcArgs& a, cudaStream_t s) {
  constexpr int kSmem = tc::kGemmSmem<BM, kStages>;
  static const bool configured = [] {
    LF_CUDA_CALL(cudaFuncSetAttribute(tc::gemm_tc_kernel<S, BM, kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(a.n / tc::kGemmBN), static_cast<unsigned>((a.m + BM - 1) / BM));
  tc::gemm_tc_kernel<S, BM, kStages><<<grid, tc::kGemmThreads, kSmem, s>>>(a);
  LF_CUDA_LAUNCH_CHECK("gemm_tc");
}

template <class S>
void launch_typed(const GemmTcArgs& a, cudaStream_t s) {
  // 64-row tiles where they fill the SMs; else 32-row tiles, twice the blocks.
  const int64_t tiles64 = (a.m + 63) / 64 * (a.n / tc::kGemmBN);
  if (tiles64 >= current_device_info().sm_count) launch_tiles<S, 64, 3>(a, s);
  else launch_tiles<S, 32, 4>(a, s);
}


}  // namespace

bool gemm_tc_supported(const GemmTcArgs& a) {
  if (a.dtype != DType::f16 && a.dtype != DType::bf16) return false;
  if (a.m <= 0 || a.n <= 0 || a.k <= 0 || a.n % kGemmTcTileN != 0 || a.k % kGemmTcStepK != 0) return false;
  if (a.parts < 1 || a.parts > kGemmTcMaxParts || a.width <= 0 || a.width % 2 != 0 || a.parts * a.width != a.n)
    return false;
  if (!aligned16(a.x) || !aligned16(a.w) || a.ldx < a.k || a.ldx % 8 != 0) return false;
  if (a.bias && reinterpret_cast<uintptr_t>(a.bias) % 4 != 0) return false;
  for (int p = 0; p < a.parts; ++p)
    if (!a.out[p] || !aligned16(a.out[p])) return false;
  // Grid rows are blockIdx.y (at most 65535 tiles of 32 rows).
  if ((a.m + 31) / 32 > 65535) return false;
  return current_device_info().cc_major >= 8;
}

void launch_gemm_tc(const GemmTcArgs& a, cudaStream_t s) {
  if (a.dtype == DType::f16) launch_typed<F16>(a, s);
  else launch_typed<BF16>(a, s);
}

}  // namespace livefuse::cuda
