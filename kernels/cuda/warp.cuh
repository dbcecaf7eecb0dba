#pragma once
// Warp / block reduction building blocks shared by the reduction and row kernels.
#include <cstdint>

#include "kernels/device/lf_math.cuh"

namespace livefuse::cuda {

inline constexpr unsigned kFullMask = 0xffffffffu;

template <class F>
__device__ __forceinline__ float warp_all_reduce(float v, F f) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  return warp_all_reduce(v, [](float a, float b) { return a + b; });
}

// The max with a NaN winning (lf_max): attention scores, where a NaN row must stay NaN.
__device__ __forceinline__ float warp_max_nan(float v) {
  return warp_all_reduce(v, [](float a, float b) { return lf_max(a, b); });
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets
// the result. `smem` holds 32 floats. Ends with a barrier so smem can be reused at once.
__device__ __forceinline__ float block_sum(float v, float* smem) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  if (nwarps == 1) return v;
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < nwarps ? smem[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();
  return v;
}

}  // namespace livefuse::cuda
