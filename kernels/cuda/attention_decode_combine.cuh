#pragma once
// How the decode attention's running softmax states combine (attention_decode.cu, its note):
// a warp's key groups by shuffles (there), the block's warps through shared memory
// (merge_block), a head's splits in a thread-block cluster (write_out over distributed shared
// memory) or in the stream's workspace (write_out_meet, by the split that arrives last). Device
// code for that file alone.
#include <cstdint>

#include "kernels/attention_args.hpp"
#include "kernels/cuda/attention_decode_splits.hpp"
#include "kernels/cuda/dtype_io.cuh"

namespace livefuse::cuda::decode {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxD = static_cast<int>(kAttentionMaxHeadDim);
constexpr float kNegInf = -__builtin_huge_valf();
constexpr float kLog2e = 1.4426950408889634f;

// The running softmax of one row over some keys, as the blocks of a split leave it.
template <int kRows>
struct Partial {
  float m[kRows], l[kRows], acc[kRows][kMaxD];
};

template <int kRows>
struct Shared {
  Partial<kRows> warp[kWarps];  // each warp's merged groups
  Partial<kRows> block;         // the block's (read by the other blocks of the cluster)
};

// exp(m - ref): the weight of a state with max m in one with max ref. A state that has seen only
// -inf keys weighs 0 (its l and acc are 0; exp(-inf - -inf) would be NaN).
__device__ __forceinline__ float weight(float m, float ref) {
  return m == kNegInf ? 0.0f : exp2f((m - ref) * kLog2e);
}

// Folds the state (mo, lo, ao) into (m, l, acc): the softmax over both states' keys.
template <int W>
__device__ __forceinline__ void merge(float& m, float& l, float (&acc)[W], float mo, float lo,
                                      const float (&ao)[W]) {
  const float mn = lf_max(m, mo);
  const float wa = weight(m, mn), wb = weight(mo, mn);
  l = l * wa + lo * wb;
#pragma unroll
  for (int w = 0; w < W; ++w) acc[w] = acc[w] * wa + ao[w] * wb;
  m = mn;
}

// Row r, column c of the merge of n partials (part(i): the i-th, in shared memory or a cluster
// block's): max, sum and accumulator.
template <int kRows, class Part>
__device__ __forceinline__ void fold(int n, Part part, int r, int c, float& m, float& l, float& acc) {
  m = kNegInf;
  for (int i = 0; i < n; ++i) m = lf_max(m, part(i)->m[r]);
  l = 0.0f;
  acc = 0.0f;
  for (int i = 0; i < n; ++i) {
    const Partial<kRows>* p = part(i);
    const float w = weight(p->m[r], m);
    l += p->l[r] * w;
    acc += p->acc[r][c] * w;
  }
}

// Row r of a head's mask or result: group r / rows_t, row r % rows_t (row_offset), in 32-bit
// arithmetic (r < kAttentionDecodeMaxRows; a 64-bit division is a long subroutine on the GPU).
__device__ __forceinline__ int64_t row_at(int r, int64_t rows_t, int64_t st_row, int64_t st_g) {
  return row_offset32(r, rows_t, st_row, st_g);
}

// The block's warps' partials into `dst` (shared memory, or the block's slot in the workspace).
template <int kRows>
__device__ void merge_block(Shared<kRows>& sh, int dv, Partial<kRows>& dst) {
  for (int i = threadIdx.x; i < kRows * dv; i += kThreads) {
    const int r = i / dv, c = i % dv;
    float m, l, acc;
    fold<kRows>(kWarps, [&](int w) { return &sh.warp[w]; }, r, c, m, l, acc);
    dst.acc[r][c] = acc;
    if (c == 0) dst.m[r] = m, dst.l[r] = l;
  }
}

// Outputs from the `splits` partials (part(i): split i's), share `share` of `shares` of them
// (the blocks of a cluster divide the elements; the workspace's last block writes them all).
template <class S, int kRows, class Part>
__device__ void write_out(const AttentionArgs& a, int64_t b, int64_t h, int row0, int share,
                          int shares, int splits, Part part) {
  auto* out = static_cast<typename S::Bits*>(a.out) + b * a.out_st[0] + h * a.out_st[1];
  const int dv = static_cast<int>(a.dv);
  for (int i = share * kThreads + threadIdx.x; i < kRows * dv; i += shares * kThreads) {
    const int r = i / dv, c = i % dv;
    const int row = row0 + r;
    if (row >= a.sq) break;  // rows ascend with i
    float m, l, acc;
    fold<kRows>(splits, part, r, c, m, l, acc);
    // All -inf, or a NaN or +inf score: eager's softmax gives NaN.
    const float y = isfinite(m) ? acc * (1.0f / l) : __int_as_float(0x7fc00000);
    out[row_at(row, a.rows_t, a.out_st[2], a.out_st_g) + c * a.out_st[3]] = S::from(y);
  }
}

// The workspace's outputs, written by the last split of a tile to arrive: every split's (m, l)
// of the tile's rows read at once into shared memory, each row's max and sum and each split's
// weight taken there, then each output adds up the splits' accumulators eight loads at a time.
// (write_out's fold reads each split's m, l and acc in turn: one L2 round trip after another,
// the splits of a long cache being up to kMaxMeetSplits.) Same order of sums, same bits.
template <class S, int kRows>
__device__ void write_out_meet(const AttentionArgs& a, int64_t b, int64_t h, int row0, int splits,
                               const Partial<kRows>* slots) {
  __shared__ float wt[kMaxMeetSplits][kRows], ls[kMaxMeetSplits][kRows];
  __shared__ float row_m[kRows], row_l[kRows];
  for (int i = threadIdx.x; i < splits * kRows; i += kThreads) {
    const int sp = i / kRows, r = i % kRows;
    wt[sp][r] = __ldcg(&slots[sp].m[r]);
    ls[sp][r] = __ldcg(&slots[sp].l[r]);
  }
  __syncthreads();
  if (threadIdx.x < kRows) {
    const int r = threadIdx.x;
    float m = kNegInf, l = 0.0f;
    for (int sp = 0; sp < splits; ++sp) m = lf_max(m, wt[sp][r]);
    for (int sp = 0; sp < splits; ++sp) {
      const float w = weight(wt[sp][r], m);
      wt[sp][r] = w;
      l += ls[sp][r] * w;
    }
    row_m[r] = m, row_l[r] = l;
  }
  __syncthreads();
  auto* out = static_cast<typename S::Bits*>(a.out) + b * a.out_st[0] + h * a.out_st[1];
  const int dv = static_cast<int>(a.dv);
  for (int i = threadIdx.x; i < kRows * dv; i += kThreads) {
    const int r = i / dv, c = i % dv;
    const int row = row0 + r;
    if (row >= a.sq) break;  // rows ascend with i
    float acc = 0.0f;
    constexpr int kBatch = 8;
    for (int sp0 = 0; sp0 < splits; sp0 += kBatch) {
      float x[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) x[u] = sp0 + u < splits ? __ldcg(&slots[sp0 + u].acc[r][c]) : 0.0f;
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        if (sp0 + u < splits) acc += x[u] * wt[sp0 + u][r];
    }
    const float m = row_m[r];
    const float y = isfinite(m) ? acc * (1.0f / row_l[r]) : __int_as_float(0x7fc00000);
    out[row_at(row, a.rows_t, a.out_st[2], a.out_st_g) + c * a.out_st[3]] = S::from(y);
  }
}

}  // namespace livefuse::cuda::decode
