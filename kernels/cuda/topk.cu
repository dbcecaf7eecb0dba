// topk: one block per row and one pass over the row per result. Pass j takes the best element
// ranked after result j-1 in the order (value descending, NaN first, index ascending), so no
// set of taken indices is kept and ties come out lowest index first, as on the CPU. O(k * n):
// made for sampling's small k, where a row of a large vocabulary stays in L2 between passes.
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/pdl.hpp"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/topk.hpp"
#include "kernels/cuda/warp.cuh"

namespace livefuse::cuda {
namespace {

constexpr int kTopkThreads = 1024;

__device__ __forceinline__ bool ranks_before(float a, int64_t ia, float b, int64_t ib) {
  const bool na = a != a, nb = b != b;
  if (na != nb) return na;
  if (!na && a != b) return a > b;
  return ia < ib;
}

// Keeps the better of (v, i) and (ov, oi); index -1 is "none".
__device__ __forceinline__ void take_better(float& v, int64_t& i, float ov, int64_t oi) {
  if (oi >= 0 && (i < 0 || ranks_before(ov, oi, v, i))) v = ov, i = oi;
}

__device__ __forceinline__ void warp_best(float& v, int64_t& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, v, o);
    const int64_t oi = __shfl_xor_sync(kFullMask, i, o);
    take_better(v, i, ov, oi);
  }
}

__global__ void __launch_bounds__(kTopkThreads) topk_kernel(const TopkPlan p) {
  __shared__ float warp_v[32];
  __shared__ int64_t warp_i[32];
  __shared__ float prev_v;
  __shared__ int64_t prev_i;
  pdl_wait();
  const int64_t row = blockIdx.x;
  const int64_t base = row * p.n;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int j = 0; j < p.k; ++j) {
    float v = 0.0f;
    int64_t i = -1;
    for (int64_t e = threadIdx.x; e < p.n; e += blockDim.x) {
      const float x = load_as<float>(p.in, base + e, p.dtype);
      if (j > 0 && !ranks_before(prev_v, prev_i, x, e)) continue;  // taken by an earlier pass
      take_better(v, i, x, e);
    }
    warp_best(v, i);
    if (lane == 0) warp_v[warp] = v, warp_i[warp] = i;
    __syncthreads();
    if (warp == 0) {
      v = lane < warps ? warp_v[lane] : 0.0f;
      i = lane < warps ? warp_i[lane] : -1;
      warp_best(v, i);
      if (lane == 0) {
        prev_v = v;
        prev_i = i;
        store_as<float>(p.values, row * p.k + j, p.dtype, v);
        p.indices[row * p.k + j] = i;
      }
    }
    __syncthreads();
  }
}

}  // namespace

void launch_topk(const TopkPlan& p, cudaStream_t s) {
  if (p.rows == 0 || p.k == 0) return;
  LF_ASSERT(p.rows <= 0x7fffffff, "topk over ", p.rows, " rows");
  launch_pdl("topk_kernel", topk_kernel, static_cast<unsigned>(p.rows), kTopkThreads, 0, s, p);
}

}  // namespace livefuse::cuda
