// layer_norm and rms_norm over the last dim, f32 accumulation.
// layer_norm takes two reduction passes (mean, then the sum of squared deviations: no
// cancellation, unlike E[x^2] - E[x]^2) and a write pass; rms_norm one and one. Rows of up to
// 1024 elements are held in registers between the passes; longer rows are re-read (L1/L2).
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/pdl.hpp"
#include "kernels/cuda/rowwise.cuh"

namespace livefuse::cuda {
namespace {

template <class S, int V>
__device__ __forceinline__ void apply_affine(const RowArgs& a, int64_t j, float (&y)[V]) {
  if (a.w) {
    float w[V];
    load_chunk_rt<S, V>(a.w, a.w_dt, a.w_cs, j, w);
#pragma unroll
    for (int t = 0; t < V; ++t) y[t] *= w[t];
  }
  if (a.b) {
    float b[V];
    load_chunk_rt<S, V>(a.b, a.b_dt, a.b_cs, j, b);
#pragma unroll
    for (int t = 0; t < V; ++t) y[t] += b[t];
  }
}

template <class S, int V, bool kRms>
__global__ void __launch_bounds__(kRowThreads) norm_kernel(const RowArgs a) {
  __shared__ float smem[32];
  pdl_wait();
  const int lane = threadIdx.x % a.group;
  const int per_block = blockDim.x / a.group;
  const int64_t chunks = a.n / V;
  const float inv_n = 1.0f / static_cast<float>(a.n);
  for (int64_t row = int64_t{blockIdx.x} * per_block + threadIdx.x / a.group; row < a.rows;
       row += int64_t{gridDim.x} * per_block) {
    int64_t off[2];
    a.oc.get(row, off);
    const void* x = elem_ptr<S>(a.x, off[0]);
    float mean = 0.0f;
    if constexpr (!kRms) {
      float sum = 0.0f;
      for (int64_t j = lane; j < chunks; j += a.group) {
        float v[V];
        load_chunk<S, V>(x, a.x_cs, j, v);
#pragma unroll
        for (int t = 0; t < V; ++t) sum += v[t];
      }
      mean = group_sum(sum, a.group, smem) * inv_n;
    }
    float sq = 0.0f;
    for (int64_t j = lane; j < chunks; j += a.group) {
      float v[V];
      load_chunk<S, V>(x, a.x_cs, j, v);
#pragma unroll
      for (int t = 0; t < V; ++t) sq += (v[t] - mean) * (v[t] - mean);
    }
    const float rstd = lf_rsqrt(group_sum(sq, a.group, smem) * inv_n + a.eps);
    void* out = static_cast<typename S::Bits*>(a.out) + row * a.n;
    for (int64_t j = lane; j < chunks; j += a.group) {
      float v[V];
      load_chunk<S, V>(x, a.x_cs, j, v);
#pragma unroll
      for (int t = 0; t < V; ++t) v[t] = (v[t] - mean) * rstd;
      apply_affine<S, V>(a, j, v);
      store_chunk<S, V>(out, j, v);
    }
  }
}

// Rows that fit in registers (contiguous, aligned, n <= 1024): one read, a warp per row;
// mean and variance (still two passes, exact) from registers.
template <class S, int V, bool kRms>
__global__ void __launch_bounds__(kRowThreads) norm_cached_kernel(const RowArgs a) {
  constexpr int kC = kCachedFloats / V;  // chunks per lane
  pdl_wait();
  const int lane = threadIdx.x % 32;
  const int per_block = blockDim.x / 32;
  const int64_t chunks = a.n / V;
  const float inv_n = 1.0f / static_cast<float>(a.n);
  for (int64_t row = int64_t{blockIdx.x} * per_block + threadIdx.x / 32; row < a.rows;
       row += int64_t{gridDim.x} * per_block) {
    int64_t off[2];
    a.oc.get(row, off);
    const void* x = elem_ptr<S>(a.x, off[0]);
    float v[kC][V];
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int64_t j = lane + 32 * c;
      if (j >= chunks) continue;
      load_chunk<S, V>(x, 1, j, v[c]);
#pragma unroll
      for (int t = 0; t < V; ++t) sum += v[c][t];
    }
    const float mean = kRms ? 0.0f : warp_sum(sum) * inv_n;
    float sq = 0.0f;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      if (lane + 32 * c >= chunks) continue;
#pragma unroll
      for (int t = 0; t < V; ++t) sq += (v[c][t] - mean) * (v[c][t] - mean);
    }
    const float rstd = lf_rsqrt(warp_sum(sq) * inv_n + a.eps);
    void* out = static_cast<typename S::Bits*>(a.out) + row * a.n;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int64_t j = lane + 32 * c;
      if (j >= chunks) continue;
#pragma unroll
      for (int t = 0; t < V; ++t) v[c][t] = (v[c][t] - mean) * rstd;
      apply_affine<S, V>(a, j, v[c]);
      store_chunk<S, V>(out, j, v[c]);
    }
  }
}

template <class S, bool kRms>
void launch(const RowPlan& p, cudaStream_t s) {
  constexpr int kV = Vec16<typename S::Bits>::kN;
  bool vec = false;
  RowArgs a = make_row_args(p, kV, &vec);
  if (vec && row_fits_registers(p.n)) {
    const unsigned grid = warp_row_grid(a);
    launch_pdl("norm_cached_kernel", norm_cached_kernel<S, kV, kRms>, grid, kRowThreads, 0, s, a);
  } else if (vec) {
    const unsigned grid = row_grid(a, p.n / kV);
    launch_pdl("norm_kernel", norm_kernel<S, kV, kRms>, grid, kRowThreads, 0, s, a);
  } else {
    const unsigned grid = row_grid(a, p.n);
    launch_pdl("norm_kernel", norm_kernel<S, 1, kRms>, grid, kRowThreads, 0, s, a);
  }
}

}  // namespace

void launch_layer_norm(const RowPlan& p, cudaStream_t s) {
  if (p.rows == 0 || p.n == 0) return;
  with_float_storage(p.dtype, [&](auto st) { launch<decltype(st), false>(p, s); });
}

void launch_rms_norm(const RowPlan& p, cudaStream_t s) {
  if (p.rows == 0 || p.n == 0) return;
  with_float_storage(p.dtype, [&](auto st) { launch<decltype(st), true>(p, s); });
}

}  // namespace livefuse::cuda
