#pragma once
// The decode attention's walk over a split's keys (attention_decode.cu, its note): each thread's
// state -- its query columns, a running softmax per row, its columns of the accumulator -- and
// the steps that load a group's next keys (fetch) and fold them in (consume). Device code for
// that file alone.
#include <climits>
#include <cstdint>

#include "kernels/attention_args.hpp"
#include "kernels/cuda/attention_decode_combine.cuh"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/warp.cuh"

namespace livefuse::cuda::decode {

// Keys per group and step: more bytes in flight with few rows, fewer registers with many. The
// lean build (the default; LIVEFUSE_DECODE_LEAN=0 turns it off) halves it and asks for two
// blocks an SM (115-128 registers a thread instead of 191-223): in the wide build one block
// filled an SM, so a head's cluster of 8 splits held 8 SMs and a long cache streamed at ~250
// GB/s (attention_decode.cu, the note). H200, livefuse-bench-attention-decode, cold us: GPT-2
// f16 128 / 1024 keys 8.9 / 11.0 -> 8.0 / 10.0 (4096: 21.5 either way); Llama GQA with two-row
// blocks in attention_decode.cu.
constexpr int unroll_for(int rows, bool lean) {
  const int u = rows == 1 ? 8 : rows <= 4 ? 4 : 2;
  return lean ? u / 2 : u;
}

// W consecutive elements of a K or V row as stored.
template <class Bits, int W>
struct alignas(sizeof(Bits) * W) Elems {
  Bits v[W];
};

// Row `row`'s columns c0 .. c0 + W (zeros past n). kVec: stride 1, n % W == 0 and the row
// 16-byte aligned, so the W elements are one read-only 16-byte load.
template <class Bits, int W, bool kVec>
__device__ __forceinline__ Elems<Bits, W> load_elems(const Bits* row, int c0, int n, int64_t st) {
  Elems<Bits, W> e{};
  if constexpr (kVec) {
    static_assert(sizeof(e) == 16);
    if (c0 < n) {
      const uint4 u = __ldg(reinterpret_cast<const uint4*>(row + c0));
      __builtin_memcpy(&e, &u, sizeof(e));
    }
  } else {
#pragma unroll
    for (int w = 0; w < W; ++w)
      if (c0 + w < n) e.v[w] = row[(c0 + w) * st];
  }
  return e;
}

// Each x[i] summed over the `lanes` threads of its key group (aligned runs of a power of two
// lanes), in the order o = lanes / 2, .., 1. Level by level over the whole array, each level a
// warp-uniform branch: the kRows x kUnroll sums of a step interleave (as a loop per sum, each was
// one dependent shuffle after another), and levels at or past `lanes` are skipped (two of five
// with eight lanes a key, where a select kept them out before).
template <int N>
__device__ __forceinline__ void group_sums(float (&x)[N], int lanes) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    if (o >= lanes) continue;
#pragma unroll
    for (int i = 0; i < N; ++i) x[i] += __shfl_xor_sync(kFullMask, x[i], o);
  }
}

// The per-thread state of one block's walk over its keys: the group's next keys through cursors
// (a K row, a V row and each row's mask entry, advanced a step at a time), so a key costs a
// pointer add, not a 64-bit multiply of its index by each stride.
template <class S, int kRows, int W, bool kVec, bool kLean>
struct Walker {
  using Bits = typename S::Bits;
  static constexpr int kUnroll = unroll_for(kRows, kLean);

  const AttentionArgs& a;
  int lanes, c0, stride;   // stride: keys between a group's keys in a step (the block's groups)
  bool kcol, vcol;         // this thread's columns hold K / V elements (c0 < d, dv)
  const Bits *kc, *vc;     // the group's next key: its K and V rows (kVec: at column c0)
  const Bits* mc[kRows];   // that key's mask entry in each of this thread's rows (null: none)
  int64_t kst, vst, mst;   // elements between a group's keys in a step (K, V, mask)
  int64_t kcol_st, vcol_st;  // elements between a row's columns (the strided path)
  float q[kRows][W], m[kRows], l[kRows], acc[kRows][W];

  // Rows past the last (a partial row block) repeat it; their results are never stored. The
  // cursors start at key `first`. Reads no memory: q is load_q's, after the PDL wait.
  __device__ Walker(const AttentionArgs& args, int64_t b, int64_t h, int row0, int lanes_, int c0_,
                    int64_t first, int stride_)
      : a(args), lanes(lanes_), c0(c0_), stride(stride_), kcol(c0_ < args.d), vcol(c0_ < args.dv) {
    const int64_t col = kVec ? c0 : 0;
    kc = static_cast<const Bits*>(a.k) + b * a.k_st[0] + h * a.k_st[1] + first * a.k_st[2] + col;
    vc = static_cast<const Bits*>(a.v) + b * a.v_st[0] + h * a.v_st[1] + first * a.v_st[2] + col;
    kst = stride * a.k_st[2], vst = stride * a.v_st[2], mst = stride * a.mask_st[3];
    kcol_st = a.k_st[3], vcol_st = a.v_st[3];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int row = row0 + r < a.sq ? row0 + r : static_cast<int>(a.sq) - 1;
      mc[r] = a.mask ? static_cast<const Bits*>(a.mask) + b * a.mask_st[0] + h * a.mask_st[1] +
                           row_at(row, a.rows_t, a.mask_st[2], a.mask_st_g) + first * a.mask_st[3]
                     : nullptr;
#pragma unroll
      for (int w = 0; w < W; ++w) acc[r][w] = 0.0f;
      m[r] = kNegInf;
      l[r] = 0.0f;
    }
  }

  // This thread's columns of its query rows (the kernel before may write q: after the wait).
  __device__ void load_q(int64_t b, int64_t h, int row0) {
    const auto* qb = static_cast<const Bits*>(a.q) + b * a.q_st[0] + h * a.q_st[1];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int row = row0 + r < a.sq ? row0 + r : static_cast<int>(a.sq) - 1;
      const Bits* qr = qb + row * a.q_st[2];
      if constexpr (kVec) {  // q's row as K's: one 16-byte load where it is contiguous and aligned
        if (a.q_st[3] == 1 && reinterpret_cast<uintptr_t>(qr + c0) % 16 == 0) {
          const Elems<Bits, W> e = load_elems<Bits, W, true>(qr, c0, a.d, 1);
#pragma unroll
          for (int w = 0; w < W; ++w) q[r][w] = S::to(e.v[w]);
        } else {
#pragma unroll
          for (int w = 0; w < W; ++w) q[r][w] = c0 + w < a.d ? S::to(qr[(c0 + w) * a.q_st[3]]) : 0.0f;
        }
      } else {
#pragma unroll
        for (int w = 0; w < W; ++w) q[r][w] = c0 + w < a.d ? S::to(qr[(c0 + w) * a.q_st[3]]) : 0.0f;
      }
    }
  }

  // The cursors to key `key` (>= a.first_new) of the appended rows (AttentionArgs::first_new):
  // K and V from k_new / v_new from there on, the mask where the key is.
  __device__ void seek_new(int64_t b, int64_t h, int row0, int64_t key) {
    const int64_t col = kVec ? c0 : 0, j = key - a.first_new;
    kc = static_cast<const Bits*>(a.k_new) + b * a.k_new_st[0] + h * a.k_new_st[1] + j * a.k_new_st[2] + col;
    vc = static_cast<const Bits*>(a.v_new) + b * a.v_new_st[0] + h * a.v_new_st[1] + j * a.v_new_st[2] + col;
    kst = stride * a.k_new_st[2], vst = stride * a.v_new_st[2];
    if (!kVec) kcol_st = a.k_new_st[3], vcol_st = a.v_new_st[3];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int row = row0 + r < a.sq ? row0 + r : static_cast<int>(a.sq) - 1;
      if (a.mask)
        mc[r] = static_cast<const Bits*>(a.mask) + b * a.mask_st[0] + h * a.mask_st[1] +
                row_at(row, a.rows_t, a.mask_st[2], a.mask_st_g) + key * a.mask_st[3];
    }
  }

  // One step's keys in registers: K and V rows of the group's next kUnroll keys.
  struct Fetched {
    Elems<Bits, W> kr[kUnroll], vr[kUnroll];
    bool valid[kUnroll];
  };

  // The group's next kUnroll keys (those of the `left` keys still before the split's end: key u
  // is valid while u * stride < left) into `f`; the K and V cursors move past them. Reads K and V
  // only (the kernel fetches its first step before the PDL wait where AttentionArgs::early_kv).
  __device__ void fetch(int64_t left, Fetched& f) {
    const int n = left < INT_MAX ? static_cast<int>(left) : INT_MAX;  // 32-bit compares below
    const Bits *kp = kc, *vp = vc;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u, kp += kst, vp += vst) {
      f.valid[u] = u * stride < n;
      if constexpr (kVec) {  // 16 bytes a row, zero where the key or the columns are past the end
        uint4 kb = make_uint4(0, 0, 0, 0), vb = kb;
        if (f.valid[u] && kcol) kb = __ldg(reinterpret_cast<const uint4*>(kp));
        if (f.valid[u] && vcol) vb = __ldg(reinterpret_cast<const uint4*>(vp));
        __builtin_memcpy(&f.kr[u], &kb, sizeof(kb));
        __builtin_memcpy(&f.vr[u], &vb, sizeof(vb));
      } else {
        f.kr[u] = f.valid[u] ? load_elems<Bits, W, false>(kp, c0, a.d, kcol_st) : Elems<Bits, W>{};
        f.vr[u] = f.valid[u] ? load_elems<Bits, W, false>(vp, c0, a.dv, vcol_st) : Elems<Bits, W>{};
      }
    }
    kc = kp, vc = vp;
  }

  // The group's next step into the softmax.
  __device__ void step(int64_t left) {
    Fetched f;
    fetch(left, f);
    consume(f);
  }

  // Fetched keys into the softmax (their mask entries read here, the mask cursors moved).
  __device__ void consume(const Fetched& f) {
    const auto& kr = f.kr;
    const auto& vr = f.vr;
    const auto& valid = f.valid;
    float s[kRows][kUnroll];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const Bits* mp = mc[r];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) s[r][u] = !valid[u] ? kNegInf : mp ? S::to(mp[u * mst]) : 0.0f;
      if (mp) mc[r] = mp + kUnroll * mst;
    }
    // Every lane takes part in the shuffles (no row is skipped before they are done).
    float dot[kRows * kUnroll];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float x = 0.0f;
#pragma unroll
        for (int w = 0; w < W; ++w) x += q[r][w] * S::to(kr[u].v[w]);
        dot[r * kUnroll + u] = x;
      }
    group_sums(dot, lanes);
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        // The scores as eager's GEMM writes them, rounded to the dtype (attention.cu, the note).
        s[r][u] = valid[u] ? S::to(S::from(dot[r * kUnroll + u])) * a.scale + s[r][u] : kNegInf;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float m_new = m[r];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) m_new = lf_max(m_new, s[r][u]);
      // Only -inf so far: nothing to accumulate (a later finite score still gives a finite row).
      if (m_new == kNegInf) continue;
      const float alpha = softmax_weight(m[r], m_new);  // 0 on the first finite step; NaN once m is NaN
      float p[kUnroll], psum = 0.0f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        p[u] = softmax_weight(s[r][u], m_new);
        psum += p[u];
      }
      l[r] = l[r] * alpha + psum;
      m[r] = m_new;
#pragma unroll
      for (int w = 0; w < W; ++w) {
        float x = acc[r][w] * alpha;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) x += p[u] * S::to(vr[u].v[w]);
        acc[r][w] = x;
      }
    }
  }

  // Merges the key groups of the warp (lanes that hold the same columns) by a butterfly.
  __device__ void merge_warp() {
    for (int o = lanes; o < 32; o *= 2)
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float ao[W];
#pragma unroll
        for (int w = 0; w < W; ++w) ao[w] = __shfl_xor_sync(kFullMask, acc[r][w], o);
        const float mo = __shfl_xor_sync(kFullMask, m[r], o);
        const float lo = __shfl_xor_sync(kFullMask, l[r], o);
        merge(m[r], l[r], acc[r], mo, lo, ao);
      }
  }

  // The warp's state into `dst` (by its first group).
  __device__ void store(Partial<kRows>& dst, int lane) const {
    if (lane >= lanes) return;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int w = 0; w < W; ++w)
        if (c0 + w < a.dv) dst.acc[r][c0 + w] = acc[r][w];
      if (lane == 0) dst.m[r] = m[r], dst.l[r] = l[r];
    }
  }
};

}  // namespace livefuse::cuda::decode
