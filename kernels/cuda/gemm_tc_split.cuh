#pragma once
// K split over a tensor-core GEMM launch's blocks (grid z), shared by the f16 / bf16 kernel
// (gemm_tc.cuh) and the f32 one (gemm_tc_f32.cuh). Where K is long (gemm_tc_splits: f16's from
// 32 steps, BERT's FFN2; f32's past ~24), each block walks a contiguous range of the K steps;
// the blocks of a tile write their f32 partial tiles to the stream's split space
// (split_space.hpp) and the last of them to arrive sums the partials in split order -- the same
// bits every launch, whichever block comes last -- then applies the kernel's epilogue. The
// tile's counter is back at zero when the launch ends, for the next launch or graph replay.
#include "kernels/cuda/gemm_tc.hpp"

namespace livefuse::cuda::tc {

// Split z's K steps [begin, end) of `steps`: contiguous, sizes differ by at most one.
struct StepRange {
  int begin, end;
};
__device__ __forceinline__ StepRange split_steps(int steps, int z, int splits) {
  return {steps * z / splits, steps * (z + 1) / splits};
}

// f(row, col, v, j) for each pair v[0..1] of a warp's m16n8 accumulator tiles acc[MT][NT][4]
// whose row is inside the product (< m): element e of tile (i, j) is row r0 + 16 i + g + 8 (e / 2),
// column c0 + 8 j + 2 t + e % 2 (g = lane / 4, t = lane % 4); j lets f use what it read for
// the column beforehand (the bias).
template <int MT, int NT, class F>
__device__ __forceinline__ void for_each_pair(float (&acc)[MT][NT][4], int64_t r0, int64_t c0, int g, int t, int64_t m,
                                              F&& f) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = r0 + i * 16 + g + 8 * h, col = c0 + j * 8 + 2 * t;
        if (row < m) f(row, col, &acc[i][j][2 * h], j);
      }
}

// For a.splits > 1. `each_pair(f)` calls f(row, col, float* v, j) for each pair of this thread's
// accumulators v[0..1] at (row, col) and (row, col + 1) inside the product. Writes them as this
// split's partial; returns true in the tile's last block to arrive, its pairs then holding the
// sum over all splits; false in the others, which are done.
template <class EachPair>
__device__ __forceinline__ bool sum_splits(const GemmTcArgs& a, EachPair&& each_pair) {
  float* const part = a.partial + static_cast<int64_t>(blockIdx.z) * a.m * a.n;
  each_pair([&](int64_t row, int64_t col, float* v, int) {
    *reinterpret_cast<float2*>(part + row * a.n + col) = make_float2(v[0], v[1]);
  });
  __threadfence();
  __syncthreads();
  __shared__ unsigned arrived;
  unsigned* const counter = a.counters + blockIdx.y * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0) arrived = atomicAdd(counter, 1u);
  __syncthreads();
  if (arrived != static_cast<unsigned>(a.splits - 1)) return false;
  __threadfence();
  if (threadIdx.x == 0) *counter = 0;  // every block of this tile has arrived: ready for the next launch
  each_pair([&](int64_t row, int64_t col, float* v, int) {
    v[0] = v[1] = 0.0f;
    for (int p = 0; p < a.splits; ++p) {
      const float2 q = __ldcg(reinterpret_cast<const float2*>(a.partial + (static_cast<int64_t>(p) * a.m + row) * a.n + col));
      v[0] += q.x, v[1] += q.y;
    }
  });
  return true;
}

}  // namespace livefuse::cuda::tc
