#pragma once
// How the decode attention's running softmax states combine (attention_decode.cu, its note):
// a warp's key groups by shuffles (there), the block's warps through shared memory
// (merge_block), a head's splits in a thread-block cluster (write_out over distributed shared
// memory) or in the stream's workspace (write_out again, by the split that arrives last) -- both
// through attention_fold.cuh's fold, which the streaming kernel shares. Device code for that
// file alone.
#include <cstdint>

#include "kernels/attention_args.hpp"
#include "kernels/cuda/attention_fold.cuh"
#include "kernels/cuda/dtype_io.cuh"

namespace livefuse::cuda::decode {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxD = static_cast<int>(kAttentionMaxHeadDim);
// Splits the workspace's fold asks for at once (up to attention_decode_splits.hpp's
// kMaxMeetSplits: four round trips at most).
constexpr int kMeetBatch = 16;
constexpr float kNegInf = -__builtin_huge_valf();

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

// Folds the state (mo, lo, ao) into (m, l, acc): the softmax over both states' keys.
template <int W>
__device__ __forceinline__ void merge(float& m, float& l, float (&acc)[W], float mo, float lo,
                                      const float (&ao)[W]) {
  const float mn = lf_max(m, mo);
  const float wa = softmax_weight(m, mn), wb = softmax_weight(mo, mn);
  l = l * wa + lo * wb;
#pragma unroll
  for (int w = 0; w < W; ++w) acc[w] = acc[w] * wa + ao[w] * wb;
  m = mn;
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
    fold_states<kWarps>(
        kWarps,
        [&](int w, float& mw, float& lw, float& xw) {
          mw = sh.warp[w].m[r], lw = sh.warp[w].l[r], xw = sh.warp[w].acc[r][c];
        },
        m, l, acc);
    dst.acc[r][c] = acc;
    if (c == 0) dst.m[r] = m, dst.l[r] = l;
  }
}

// Outputs from the `splits` partials (part(i): split i's, in a cluster block's shared memory or
// the workspace, read as `load` reads a float), share `share` of `shares` of them (the blocks of
// a cluster divide the elements; the workspace's last block writes them all). kBatch splits'
// states are asked for at once (attention_fold.cuh).
template <class S, int kRows, int kBatch, class Part, class Load>
__device__ void write_out(const AttentionArgs& a, int64_t b, int64_t h, int row0, int share,
                          int shares, int splits, Part part, Load load) {
  auto* out = static_cast<typename S::Bits*>(a.out) + b * a.out_st[0] + h * a.out_st[1];
  const int dv = static_cast<int>(a.dv);
  for (int i = share * kThreads + threadIdx.x; i < kRows * dv; i += shares * kThreads) {
    const int r = i / dv, c = i % dv;
    const int row = row0 + r;
    if (row >= a.sq) break;  // rows ascend with i
    float m, l, acc;
    fold_states<kBatch>(
        splits,
        [&](int sp, float& ms, float& ls, float& xs) {
          const Partial<kRows>* p = part(sp);
          ms = load(&p->m[r]), ls = load(&p->l[r]), xs = load(&p->acc[r][c]);
        },
        m, l, acc);
    out[row_at(row, a.rows_t, a.out_st[2], a.out_st_g) + c * a.out_st[3]] = S::from(folded_value(m, l, acc));
  }
}

}  // namespace livefuse::cuda::decode
