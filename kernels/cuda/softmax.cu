// softmax(x * scale + mask) over the last dim, numerically stable.
// One read pass computes the row's max and sum together (online softmax: the running sum is
// rescaled when the max grows), a second pass writes exp(z - max) / sum. The second read
// usually hits L2/L1. Rows that are entirely -inf give NaN, as in PyTorch.
// The exponentials run in base 2 (exp2f of a difference times log2(e)): exp2f is one MUFU
// instruction plus fix-ups where expf is a range reduction around it, and with two exponentials
// per element the accurate expf made f16 softmax ALU-bound at ~35% of copy bandwidth. The error
// this adds (rounding the difference times log2e) is ~1e-6 relative, well inside f32's.
// z = x * scale + mask stays in natural units until a max is subtracted: HF's padding mask is the
// dtype's lowest finite value (-3.4e38 in f32), which times log2(e) overflows to -inf -- a padded
// row would turn NaN where eager's (and the CPU's) averages its keys.
#include "kernels/cuda/rowwise.cuh"

namespace livefuse::cuda {
namespace {

constexpr float kNegInf = -__builtin_huge_valf();
constexpr float kLog2e = 1.4426950408889634f;

struct MaxSum {
  float m, s;
};

// exp(d) for d = z - max (<= 0, or NaN), in base 2.
__device__ __forceinline__ float exp_of(float d) { return exp2f(d * kLog2e); }

__device__ __forceinline__ void ms_add(MaxSum& a, float z) {
  if (z > a.m) {
    a.s = a.s * exp_of(a.m - z) + 1.0f;
    a.m = z;
  } else if (!(z == kNegInf && a.m == kNegInf)) {  // NaN falls through and poisons s
    a.s += exp_of(z - a.m);
  }
}

__device__ __forceinline__ MaxSum ms_combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == kNegInf) return {m, a.s + b.s};
  return {m, a.s * exp_of(a.m - m) + b.s * exp_of(b.m - m)};
}

__device__ __forceinline__ MaxSum group_max_sum(MaxSum v, int group, MaxSum* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = ms_combine(v, {__shfl_xor_sync(kFullMask, v.m, o), __shfl_xor_sync(kFullMask, v.s, o)});
  if (group == 32) return v;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < nwarps ? smem[lane] : MaxSum{kNegInf, 0.0f};
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = ms_combine(v, {__shfl_xor_sync(kFullMask, v.m, o), __shfl_xor_sync(kFullMask, v.s, o)});
  __syncthreads();
  return v;
}

template <class S, int V>
__global__ void __launch_bounds__(kRowThreads) softmax_kernel(const RowArgs a) {
  __shared__ MaxSum smem[32];
  const int lane = threadIdx.x % a.group;
  const int per_block = blockDim.x / a.group;
  const int64_t chunks = a.n / V;
  for (int64_t row = int64_t{blockIdx.x} * per_block + threadIdx.x / a.group; row < a.rows;
       row += int64_t{gridDim.x} * per_block) {
    int64_t off[2];
    a.oc.get(row, off);
    const void* x = elem_ptr<S>(a.x, off[0]);
    const void* mask = a.mask ? elem_ptr<S>(a.mask, off[1]) : nullptr;
    MaxSum ms{kNegInf, 0.0f};
    for (int64_t j = lane; j < chunks; j += a.group) {
      float v[V], m[V];
      load_chunk<S, V>(x, a.x_cs, j, v);
      if (mask) load_chunk<S, V>(mask, a.mask_cs, j, m);
#pragma unroll
      for (int t = 0; t < V; ++t) ms_add(ms, fmaf(v[t], a.scale, mask ? m[t] : 0.0f));
    }
    ms = group_max_sum(ms, a.group, smem);
    const float inv = 1.0f / ms.s;
    void* out = static_cast<typename S::Bits*>(a.out) + row * a.n;
    for (int64_t j = lane; j < chunks; j += a.group) {
      float v[V], m[V];
      load_chunk<S, V>(x, a.x_cs, j, v);
      if (mask) load_chunk<S, V>(mask, a.mask_cs, j, m);
#pragma unroll
      for (int t = 0; t < V; ++t)
        v[t] = exp_of(fmaf(v[t], a.scale, mask ? m[t] : 0.0f) - ms.m) * inv;
      store_chunk<S, V>(out, j, v);
    }
  }
}

// Rows that fit in registers (contiguous, aligned, n <= 1024): one read, a warp per row.
// Max first, then the sum of exponentials, from registers. NaN anywhere in a row (also an
// all -inf row: -inf - -inf) makes the whole row NaN, as in PyTorch.
template <class S, int V>
__global__ void __launch_bounds__(kRowThreads) softmax_cached_kernel(const RowArgs a) {
  constexpr int kC = kCachedFloats / V;  // chunks per lane
  const int lane = threadIdx.x % 32;
  const int per_block = blockDim.x / 32;
  const int64_t chunks = a.n / V;
  for (int64_t row = int64_t{blockIdx.x} * per_block + threadIdx.x / 32; row < a.rows;
       row += int64_t{gridDim.x} * per_block) {
    int64_t off[2];
    a.oc.get(row, off);
    const void* x = elem_ptr<S>(a.x, off[0]);
    const void* mask = a.mask ? elem_ptr<S>(a.mask, off[1]) : nullptr;
    float z[kC][V];
    float mx = kNegInf;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int64_t j = lane + 32 * c;
      if (j >= chunks) continue;
      float m[V];
      load_chunk<S, V>(x, 1, j, z[c]);
      if (mask) load_chunk<S, V>(mask, 1, j, m);
#pragma unroll
      for (int t = 0; t < V; ++t) {
        z[c][t] = fmaf(z[c][t], a.scale, mask ? m[t] : 0.0f);
        mx = fmaxf(mx, z[c][t]);
      }
    }
    mx = warp_max(mx);
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      if (lane + 32 * c >= chunks) continue;
#pragma unroll
      for (int t = 0; t < V; ++t) {
        z[c][t] = exp_of(z[c][t] - mx);
        sum += z[c][t];
      }
    }
    const float inv = 1.0f / warp_sum(sum);
    void* out = static_cast<typename S::Bits*>(a.out) + row * a.n;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int64_t j = lane + 32 * c;
      if (j >= chunks) continue;
#pragma unroll
      for (int t = 0; t < V; ++t) z[c][t] *= inv;
      store_chunk<S, V>(out, j, z[c]);
    }
  }
}

template <class S>
void launch(const RowPlan& p, cudaStream_t s) {
  constexpr int kV = Vec16<typename S::Bits>::kN;
  bool vec = false;
  RowArgs a = make_row_args(p, kV, &vec);
  if (vec && row_fits_registers(p.n)) {
    const unsigned grid = warp_row_grid(a);
    softmax_cached_kernel<S, kV><<<grid, kRowThreads, 0, s>>>(a);
  } else if (vec) {
    const unsigned grid = row_grid(a, p.n / kV);
    softmax_kernel<S, kV><<<grid, kRowThreads, 0, s>>>(a);
  } else {
    const unsigned grid = row_grid(a, p.n);
    softmax_kernel<S, 1><<<grid, kRowThreads, 0, s>>>(a);
  }
  LF_CUDA_LAUNCH_CHECK("softmax_kernel");
}

}  // namespace

void launch_softmax(const RowPlan& p, cudaStream_t s) {
  if (p.rows == 0 || p.n == 0) return;
  LF_ASSERT(!p.mask.ptr || p.mask.dtype == p.dtype, "softmax mask dtype differs from x");
  with_float_storage(p.dtype, [&](auto st) { launch<decltype(st)>(p, s); });
}

}  // namespace livefuse::cuda
