// Decode attention that streams the KV cache: the few query rows of one (batch, K/V head) -- a
// token of each query head of a grouped-query group, stacked as rows, at most 8 -- against a
// long cache, the keys split over blocks of 128 or 256 keys, every key of a block in flight at
// once.
//
// [ Note -- why a third decode kernel ]
// The FMA split-KV kernel (attention_decode.cu) reads a key with a group of 8 lanes that then
// repeat its shuffles, max and exp: ~150 instructions a key a lane, so at 4096 keys it is bound
// by instructions, not bytes (H200: 17.7 us cold for Llama-1B's 8.4 MB, 17.1 hot from L2, where
// the bytes take 2 us at the copy bandwidth; bench/RESULTS.md). A decode token's time then grows
// with the context ~4x faster than the cache's bytes. Here a block of 4 or 8 warps asks for its
// whole split -- 128 or 256 keys of K and of V, up to 32 KiB each at d = 64 -- with cp.async before
// it computes anything, so one DRAM round trip brings all of it. Each warp asks for its own 32 keys
// and works on them as soon as they land, with no block barrier before its last step: each lane
// scores ONE key alone (the query rows broadcast from shared memory: no shuffles a key, ~50
// instructions a key a row), the warp's softmax takes two warp reductions, and P V gives each lane
// 16 bytes of V's columns for 8 or 16 of the warp's keys. The warps' states merge through shared
// memory.
//
// Splits. A head takes ceil(sk / 128) blocks of 4 warps, or ceil(sk / 256) of 8 (launch_warps), at
// most kMaxSplits (else the step declines and the FMA kernel takes it). With more than one, each
// block's partial (each row's max, sum and accumulator) meets the others' in one of two ways:
//  * in a thread-block cluster of the head's splits (sm_90, 2-8 splits, more than one query row:
//    meet_in_cluster says where it won): each block keeps its partial in shared memory and,
//    after a cluster barrier, folds a share of the outputs from every block's through
//    distributed shared memory -- no workspace and no block waiting on the others' arrival;
//  * else in the stream's workspace (split_space.hpp): each block writes its partial to its slot
//    and the last to arrive (an atomic count, set back to zero by that block) folds them.
// One launch either way, graph-safe. The fold asks for every split's max, sum and columns at once
// (fold_splits), so it is one round trip to them for up to 20 splits.
//
// Appends (AttentionArgs::first_new): keys from first_new on are read from k_new / v_new, and the
// block that holds them writes them into k_dst / v_dst from shared memory. A cache moved to a new
// block (copy_old_k / _v) is declined: the FMA kernel copies the old rows too.
//
// Semantics are the general kernel's (kernels/cpu/attention.cpp is the reference): scale, then
// the mask, scores in f32; a row whose scores are all -inf, or hold a NaN or +inf, is NaN.
#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/attention_fold.cuh"
#include "kernels/cuda/attention_kernels.hpp"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/cluster.hpp"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/launch_util.hpp"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/pdl.hpp"
#include "kernels/cuda/preload.hpp"
#include "kernels/cuda/split_space.hpp"
#include "kernels/cuda/vector_rows.hpp"
#include "kernels/cuda/warp.cuh"
#include "livefuse/config.hpp"

namespace livefuse::cuda {
namespace {

// A block is W warps, one key a lane: a split is 32 W keys (W = 4, 8, 12 or 16, launch_warps says which).
// At most 64 splits a head: the fold takes them twenty at a time (four round trips at most).
constexpr int kMaxSplits = 64;
constexpr float kNegInf = -__builtin_huge_valf();
constexpr float kLog2e = 1.4426950408889634f;

std::atomic<int> g_forced{-1};  // force_attention_decode_stream

// A split's partial in the workspace: each row's max, its sum, then its accumulator.
template <int R, int D>
constexpr int kSlotFloats = (2 + D) * R;

// Dynamic shared memory: K and V of the split (swizzled 16-byte chunks, tc::swizzled; warp w's
// keys are rows 32w .. 32w + 31), the query rows in f32, each row's probabilities, each warp's
// softmax state (max, sum, P V accumulator), the weights of the warps' merge, and the block's
// partial where the splits meet in a cluster.
template <int R, int D, int W>
struct Layout {
  static constexpr int kWarps = W, kKeys = 32 * W;
  static constexpr int kTile = kKeys * D;  // elements of K or V
  static constexpr int kK = 0;             // bytes
  static constexpr int kV = kK + kTile * 2;
  static constexpr int kQ = kV + kTile * 2;                // float [R][D]
  static constexpr int kP = kQ + R * D * 4;                // float [R][kKeys]
  static constexpr int kSums = kP + R * kKeys * 4;         // float [kWarps][R][D]
  static constexpr int kRed = kSums + kWarps * R * D * 4;  // float [2][kWarps][R]
  static constexpr int kFold = kRed + 2 * kWarps * R * 4;  // float [kWarps][R] weights, [2][R]
  static constexpr int kPart = kFold + (kWarps + 2) * R * 4;  // the block's partial (a slot)
  static constexpr int kBytes = kPart + kSlotFloats<R, D> * 4;
};

// Row r of the output: acc / l, or NaN where the row's max is not finite (every score -inf, or
// a NaN or +inf among them: eager's NaN row).
template <class S>
__device__ __forceinline__ void store_out(const AttentionArgs& a, int64_t b, int64_t h, int r,
                                          int c, float acc, float m, float l) {
  auto* out = static_cast<typename S::Bits*>(a.out) + b * a.out_st[0] + h * a.out_st[1] +
              row_offset(r, a.rows_t, a.out_st[2], a.out_st_g) + c * a.out_st[3];
  *out = S::from(folded_value(m, l, acc));
}

// The outputs of rows x D elements from a head's `splits` partials, slot(sp) pointing at split
// sp's (each row's max, each row's sum, the accumulators: kSlotFloats) -- in the workspace
// (kGlobal: read through L2, where the other blocks wrote them) or in a cluster block's shared
// memory. Elements first, first + step, ...: the last block to arrive takes them all, a cluster's
// blocks a share each. kBatch splits' states are asked for at once (attention_fold.cuh), so a
// head of up to 20 splits (5120 keys in 256-key splits) costs one round trip to them.
template <class S, int R, int D, bool kGlobal, class Slot>
__device__ __forceinline__ void fold_splits(const AttentionArgs& a, int64_t b, int64_t h, int rows,
                                            int splits, int first, int step, Slot slot) {
  constexpr int kBatch = 20;
  const auto load = [](const float* p) { return kGlobal ? __ldcg(p) : *p; };
  for (int i = first; i < rows * D; i += step) {
    const int r = i / D, col = i % D;
    float m, l, v;
    fold_states<kBatch>(
        splits,
        [&](int sp, float& ms, float& ls, float& xs) {
          const float* p = slot(sp);
          ms = load(p + r), ls = load(p + R + r), xs = load(p + 2 * R + r * D + col);
        },
        m, l, v);
    store_out<S>(a, b, h, r, col, v, m, l);
  }
}

// Grid: x = (batch * head) * splits, each split 32 W keys (the last may have fewer); with a null
// `part` and more than one split, a cluster of `splits` blocks a head (their ranks the splits).
template <class S, int R, int D, int W>
__global__ void __launch_bounds__(32 * W)
    decode_stream_kernel(AttentionArgs a, int splits, float* part, unsigned* count) {
  using L = Layout<R, D, W>;
  constexpr int kThreads = 32 * W, kWarps = W, kKeys = 32 * W;
  constexpr int kChunks = D / 8;  // 16-byte chunks a key row
  extern __shared__ __align__(128) unsigned char smem[];
  lf_u16* const k_s = reinterpret_cast<lf_u16*>(smem + L::kK);
  lf_u16* const v_s = reinterpret_cast<lf_u16*>(smem + L::kV);
  float* const q_s = reinterpret_cast<float*>(smem + L::kQ);
  float* const p_s = reinterpret_cast<float*>(smem + L::kP);
  float* const red = reinterpret_cast<float*>(smem + L::kRed);

  const int t = static_cast<int>(threadIdx.x), warp = t / 32, lane = t % 32;
  const int split = static_cast<int>(blockIdx.x % splits);
  const int64_t bh = blockIdx.x / splits;
  const int64_t b = bh / a.heads, h = bh % a.heads;
  const int64_t key0 = int64_t{split} * kKeys, key_end = min(a.sk, key0 + kKeys);
  const int rows = static_cast<int>(a.sq);
  const int64_t first_new = a.first_new < 0 ? a.sk : a.first_new;
  const auto* kc = static_cast<const lf_u16*>(a.k) + b * a.k_st[0] + h * a.k_st[1];
  const auto* vc = static_cast<const lf_u16*>(a.v) + b * a.v_st[0] + h * a.v_st[1];
  const auto* kn = static_cast<const lf_u16*>(a.k_new) + b * a.k_new_st[0] + h * a.k_new_st[1];
  const auto* vn = static_cast<const lf_u16*>(a.v_new) + b * a.v_new_st[0] + h * a.v_new_st[1];
  // Each warp asks for its own 32 keys of K (one cp.async group) and of V (the next), so it can
  // start on them as soon as they land, whatever the other warps' keys do. `which`: every key,
  // only the cached ones (before first_new), or the others (the step's, and zeros past the end).
  enum Which { kAll, kCached, kRest };
  const int64_t wkey0 = key0 + 32 * warp;
  const auto issue = [&](Which which, lf_u16* tile, const lf_u16* cache, int64_t cache_st,
                         const lf_u16* added, int64_t added_st) {
#pragma unroll
    for (int it = 0; it < kChunks; ++it) {
      const int i = it * 32 + lane;
      const int r = i / kChunks, c = i % kChunks;
      const int64_t key = wkey0 + r;
      const bool valid = key < key_end;
      if (which != kAll && (which == kCached) != (valid && key < first_new)) continue;
      const lf_u16* src = !valid            ? cache
                          : key < first_new ? cache + key * cache_st + c * 8
                                            : added + (key - first_new) * added_st + c * 8;
      tc::cp_async16(tc::smem_address(tile + tc::swizzled<D>(32 * warp + r, c)), src, valid);
    }
    tc::cp_async_commit();
  };
  // The cached keys on their way before the wait where no kernel that may still run writes them
  // (AttentionArgs::early_kv): their round trip overlaps the kernel before. The groups are then
  // K, V (cached), K, V (the rest): waiting for all but the last still means "K has landed".
  if (a.early_kv) {
    issue(kCached, k_s, kc, a.k_st[2], kn, a.k_new_st[2]);
    issue(kCached, v_s, vc, a.v_st[2], vn, a.v_new_st[2]);
  }
  pdl_wait();  // nothing above reads q, the mask, memory a kernel still running may write, or writes
  issue(a.early_kv ? kRest : kAll, k_s, kc, a.k_st[2], kn, a.k_new_st[2]);
  issue(a.early_kv ? kRest : kAll, v_s, vc, a.v_st[2], vn, a.v_new_st[2]);

  // The query rows in f32, and this lane's key's mask values, while the keys arrive.
  const auto* q = static_cast<const typename S::Bits*>(a.q) + b * a.q_st[0] + h * a.q_st[1];
  for (int i = t; i < R * D; i += kThreads) {
    const int r = i / D, c = i % D;
    q_s[i] = r < rows ? S::to(q[r * a.q_st[2] + c * a.q_st[3]]) : 0.0f;
  }
  const int64_t key = wkey0 + lane;
  const bool mine = key < key_end;
  float add[R];
#pragma unroll
  for (int r = 0; r < R; ++r) add[r] = 0.0f;
  if (a.mask && mine) {
    const auto* mask = static_cast<const typename S::Bits*>(a.mask) + b * a.mask_st[0] +
                       h * a.mask_st[1] + key * a.mask_st[3];
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (r < rows) add[r] = S::to(mask[row_offset(r, a.rows_t, a.mask_st[2], a.mask_st_g)]);
  }
  __syncthreads();         // q_s (the keys are still in flight)
  tc::cp_async_wait<1>();  // this lane's K copies
  __syncwarp();            // the warp's

  // Scores: this lane's key against every row.
  const int row = 32 * warp + lane;  // the key's row in the tiles
  float s[R];
#pragma unroll
  for (int r = 0; r < R; ++r) s[r] = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    float x[8];
    widen<S>(*reinterpret_cast<const uint4*>(k_s + tc::swizzled<D>(row, c)), x);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float4 q0 = *reinterpret_cast<const float4*>(q_s + r * D + 8 * c);
      const float4 q1 = *reinterpret_cast<const float4*>(q_s + r * D + 8 * c + 4);
      s[r] = fmaf(q0.x, x[0], s[r]), s[r] = fmaf(q0.y, x[1], s[r]), s[r] = fmaf(q0.z, x[2], s[r]);
      s[r] = fmaf(q0.w, x[3], s[r]), s[r] = fmaf(q1.x, x[4], s[r]), s[r] = fmaf(q1.y, x[5], s[r]);
      s[r] = fmaf(q1.z, x[6], s[r]), s[r] = fmaf(q1.w, x[7], s[r]);
    }
  }
  // The warp's softmax over its keys: each row's max, the probabilities, their sum.
  float* const red_m = red;
  float* const red_l = red + kWarps * R;
  float m[R], l[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    s[r] = mine ? s[r] * a.scale + add[r] : kNegInf;
    // +inf (or NaN) anywhere makes the row NaN: carried as a NaN max (lf_max lets NaN win).
    if (s[r] == -kNegInf) s[r] = __int_as_float(0x7fc00000);
    m[r] = warp_max_nan(s[r]);
    // A key at -inf weighs 0 (also where every key is: m = -inf).
    const float p = s[r] == kNegInf ? 0.0f : tc::exp2_approx((s[r] - m[r]) * kLog2e);
    p_s[r * kKeys + row] = p;
    l[r] = warp_sum(p);
  }
  tc::cp_async_wait<0>();  // this lane's V copies
  __syncwarp();            // the warp's, and its probabilities

  // The step's new rows into the destination caches, from shared memory.
  if (mine && key >= first_new) {
    auto* kd =
        static_cast<lf_u16*>(a.k_dst) + b * a.k_dst_st[0] + h * a.k_dst_st[1] + key * a.k_dst_st[2];
    auto* vd =
        static_cast<lf_u16*>(a.v_dst) + b * a.v_dst_st[0] + h * a.v_dst_st[1] + key * a.v_dst_st[2];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      *reinterpret_cast<uint4*>(kd + 8 * c) =
          *reinterpret_cast<const uint4*>(k_s + tc::swizzled<D>(row, c));
      *reinterpret_cast<uint4*>(vd + 8 * c) =
          *reinterpret_cast<const uint4*>(v_s + tc::swizzled<D>(row, c));
    }
  }

  // P V over the warp's keys: lane (group g, chunk c) sums chunk c of V over keys g, g + G, ...
  constexpr int kGroups = 32 / kChunks;
  const int c = lane % kChunks, g = lane / kChunks;
  float acc[R][8];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r][e] = 0.0f;
#pragma unroll
  for (int j = g; j < 32; j += kGroups) {
    float x[8];
    widen<S>(*reinterpret_cast<const uint4*>(v_s + tc::swizzled<D>(32 * warp + j, c)), x);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float p = p_s[r * kKeys + 32 * warp + j];
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][e] = fmaf(p, x[e], acc[r][e]);
    }
  }
#pragma unroll
  for (int o = kChunks; o < 32; o <<= 1)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][e] += __shfl_xor_sync(0xffffffffu, acc[r][e], o);
  float* const sums = reinterpret_cast<float*>(smem + L::kSums);  // [kWarps][R][D]
  if (lane < kChunks) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int e = 0; e < 8; ++e) sums[(warp * R + r) * D + 8 * c + e] = acc[r][e];
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) red_m[warp * R + r] = m[r], red_l[warp * R + r] = l[r];
  }
  __syncthreads();

  // The warps' states merged: each row's max over the warps, each warp's weight in it.
  float* const ww = reinterpret_cast<float*>(smem + L::kFold);  // [kWarps][R] weights, [2][R]
  if (t < rows) {
    const int r = t;
    float mx = kNegInf, sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = lf_max(mx, red_m[w * R + r]);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = red_m[w * R + r];
      const float wt = mw == kNegInf ? 0.0f : tc::exp2_approx((mw - mx) * kLog2e);
      ww[w * R + r] = wt;
      sum += red_l[w * R + r] * wt;
    }
    ww[kWarps * R + r] = mx, ww[kWarps * R + R + r] = sum;
  }
  __syncthreads();

  // The block's rows: written, or its partial -- to its slot in the workspace, or to its own
  // shared memory where the cluster's blocks read it.
  const bool in_cluster = part == nullptr;  // with more than one split
  float* const slots = in_cluster ? nullptr : part + bh * splits * kSlotFloats<R, D>;
  float* const slot = in_cluster ? reinterpret_cast<float*>(smem + L::kPart)
                                 : slots + split * kSlotFloats<R, D>;
  for (int i = t; i < rows * D; i += kThreads) {
    const int r = i / D, col = i % D;
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wt = ww[w * R + r];
      if (wt != 0.0f)
        v = fmaf(sums[(w * R + r) * D + col], wt, v);  // (a warp of -inf keys adds nothing)
    }
    const float mr = ww[kWarps * R + r], lr = ww[kWarps * R + R + r];
    if (splits == 1) {
      store_out<S>(a, b, h, r, col, v, mr, lr);
    } else {
      slot[2 * R + r * D + col] = v;
      if (col == 0) slot[r] = mr, slot[R + r] = lr;
    }
  }
  if (splits == 1) return;

  if (in_cluster) {  // only launched so on sm_90+ code (meet_in_cluster)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // Each block folds a share of the outputs from every block's partial, read through
    // distributed shared memory: no workspace, no arrival count, no block waiting on the rest.
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every block's partial is written
    // Elements dealt out over the blocks (t * splits + split), so every block takes a share.
    fold_splits<S, R, D, false>(a, b, h, rows, splits, t * splits + split, splits * kThreads,
                                [&](int sp) { return cluster.map_shared_rank(slot, sp); });
    cluster.sync();  // and read: a block's shared memory lives only as long as the block
#endif
    return;
  }
  // The last split of the head to arrive folds every slot (attention_fold.cuh's notes).
  if (!last_to_arrive(&count[bh], static_cast<unsigned>(splits))) return;
  fold_splits<S, R, D, true>(a, b, h, rows, splits, t, kThreads,
                             [&](int sp) { return slots + sp * kSlotFloats<R, D>; });
}

std::atomic<int> g_warps{0};     // set_attention_decode_stream_warps
std::atomic<int> g_cluster{-1};  // set_attention_decode_stream_cluster: the largest cluster

// Whether a head's `splits` blocks meet in a cluster of them (livefuse-bench-attention-decode,
// H100, session 48, us in a graph of 20): only with 2-8 splits (the portable size; 16-block
// clusters lost to the workspace -- Llama-1B at 2048 / 4096 keys 9.00 / 11.09 against 8.72 /
// 8.56 --, their blocks placed two an SM), only with more than one query row (one row's fold is
// short: GPT-2 at 160-1024 keys tied or lost 0.15-0.3; Llama's four rows gained 0.9-1.0 at 300
// and 1024 keys, a d-128 head 1.7 at 300), and only where the device runs every head's cluster at
// once (asked once per kernel). set_attention_decode_stream_cluster(0) turns it off.
template <auto Kernel, int kThreads, int kSmem>
bool meet_in_cluster(int splits, int64_t heads, int rows) {
  static const int active = active_clusters(Kernel, 8, kThreads, kSmem);
  const int cap = g_cluster.load(std::memory_order_relaxed);
  const int most = cap < 0 ? 8 : std::min(8, cap);
  return splits >= 2 && splits <= most && rows >= 2 && heads <= active;
}

template <class S, int R, int D, int W>
bool launch_rows(const AttentionArgs& a, cudaStream_t stream) {
  using L = Layout<R, D, W>;
  constexpr auto kernel = decode_stream_kernel<S, R, D, W>;
  static const bool configured = [] {
    LF_CUDA_CALL(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes));
    return true;
  }();
  (void)configured;
  const int64_t bh = a.batch * a.heads;
  const int splits = static_cast<int>((a.sk + L::kKeys - 1) / L::kKeys);
  if (splits > kMaxSplits) return false;
  const bool cluster = meet_in_cluster<kernel, 32 * W, L::kBytes>(splits, bh, static_cast<int>(a.sq));
  SplitSpace space;  // none where the splits meet in a cluster
  if (splits > 1 && !cluster) {
    const int64_t slot_bytes = int64_t{kSlotFloats<R, D>} * sizeof(float);
    if (bh > kSplitSpaceCounters ||
        bh * splits * slot_bytes > static_cast<int64_t>(kSplitSpaceBytes))
      return false;
    space = split_space(stream);
    if (!space.part) return false;  // a stream captured before it had a workspace
  }
  launch_pdl_clusters("decode_stream_kernel", cluster ? static_cast<unsigned>(splits) : 1u, kernel,
                      dim3(static_cast<unsigned>(bh * splits)), dim3(32 * W), static_cast<size_t>(L::kBytes),
                      stream, a, splits, static_cast<float*>(space.part), space.count);
  return true;
}

// Four-warp blocks (128-key splits: twice the blocks, more SMs streaming) up to 2048 keys while
// their blocks fit two an SM; else eight-warp blocks, whose fold has half the splits (H100,
// Llama-1B at 1024 keys: 10.5 against 10.8 us; at 4096: 14.5 against 12.9). Past 4096 keys a head's
// 17 eight-warp splits make 136 blocks for 132 SMs, yet four-warp blocks (264, two an SM) lost
// there too (H200, session 48, in a graph: 4160 keys 11.69 against 10.55). Sixteen-warp blocks
// (512-key splits, one an SM; d = 64 and up to kWideRows rows: more would spill under 512
// threads' 128 registers) once eight-warp blocks would fill more than 1.5 waves of the SMs, or
// need more than kMaxSplits splits (past 16384 keys): H100, session 49, Llama-1B in a graph, 8192
// keys 13.58 against 15.39 us (256 eight-warp blocks, two waves), 4160 even (11.17 / 11.14), 4096
// 11.41 against 9.33 (64 blocks leave half the SMs idle). Twelve-warp blocks (384-key splits,
// d = 64) only when asked for: between one wave of eight-warp blocks and 1.5 they took a Llama-1B
// head alone faster (H100, session 50, in a graph: 4160 / 5120 / 6100 keys 9.89 / 10.17 / 10.82
// us against 10.81 / 11.68 / 13.51 on eight warps), but Llama-1B decode processes at prompt 4096
// (4097-4160 keys: 11 twelve-warp splits a head) ran 1.345 / 1.376 ms a token against 1.323 /
// 1.322 with them off -- not understood (the twelve-warp block's 116 KiB of shared memory
// beside the kernels that overlap it under PDL is a suspect), so not taken by default.
constexpr int kWideRows = 4;

template <class S, int R, int D>
bool launch_warps(const AttentionArgs& a, cudaStream_t stream) {
  const int forced = g_warps.load(std::memory_order_relaxed);
  const int64_t sms = current_device_info().sm_count, bh = a.batch * a.heads;
  if constexpr (D == 64 && R <= kWideRows) {
    const int64_t splits8 = (a.sk + 255) / 256;
    if (forced == 16 || (forced == 0 && (2 * bh * splits8 > 3 * sms || splits8 > kMaxSplits)))
      return launch_rows<S, R, D, 16>(a, stream);
  }
  if constexpr (D == 64) {  // (d = 128's 384-key tiles would not fit shared memory at 8 rows)
    if (forced == 12) return launch_rows<S, R, D, 12>(a, stream);
  }
  const int64_t small = bh * ((a.sk + 127) / 128);
  const bool four = forced == 4 || (forced != 8 && a.sk <= 2048 && small <= 2 * sms);
  return four ? launch_rows<S, R, D, 4>(a, stream) : launch_rows<S, R, D, 8>(a, stream);
}

template <class S, int D>
bool launch_d(const AttentionArgs& a, cudaStream_t stream) {
  if (a.sq == 1) return launch_warps<S, 1, D>(a, stream);
  if (a.sq == 2) return launch_warps<S, 2, D>(a, stream);
  if (a.sq <= 4) return launch_warps<S, 4, D>(a, stream);
  return launch_warps<S, 8, D>(a, stream);
}

template <class S>
void preload_all() {
  const auto rows = [](auto d, auto w) {
    constexpr int D = decltype(d)::value, W = decltype(w)::value;
    load_kernel(decode_stream_kernel<S, 1, D, W>), load_kernel(decode_stream_kernel<S, 2, D, W>);
    load_kernel(decode_stream_kernel<S, 4, D, W>), load_kernel(decode_stream_kernel<S, 8, D, W>);
  };
  rows(std::integral_constant<int, 64>{}, std::integral_constant<int, 4>{});
  rows(std::integral_constant<int, 64>{}, std::integral_constant<int, 8>{});
  rows(std::integral_constant<int, 128>{}, std::integral_constant<int, 4>{});
  rows(std::integral_constant<int, 128>{}, std::integral_constant<int, 8>{});
  load_kernel(decode_stream_kernel<S, 1, 64, 16>), load_kernel(decode_stream_kernel<S, 2, 64, 16>);
  load_kernel(decode_stream_kernel<S, 4, 64, 16>);
}

}  // namespace

void preload_attention_decode_stream_kernels(DType dt) {
  if (dt == DType::f16) preload_all<F16>();
  if (dt == DType::bf16) preload_all<BF16>();
}

void force_attention_decode_stream(int on) { g_forced.store(on, std::memory_order_relaxed); }
void set_attention_decode_stream_warps(int warps) {
  g_warps.store(warps, std::memory_order_relaxed);
}
void set_attention_decode_stream_cluster(int most) { g_cluster.store(most, std::memory_order_relaxed); }

bool launch_attention_decode_stream(const AttentionArgs& args, void* stream) {
  AttentionArgs a = args;
  const int forced = g_forced.load(std::memory_order_relaxed);
  if (forced == 0) return false;
  // The keys the step reads over all its (batch, K/V head) pairs: few, and the FMA kernel's
  // shorter fixed cost wins (H100, bench/RESULTS.md session 44: GPT-2 f16 at 256 keys 7.6 against
  // 8.8 us; at 4096 16.1 against 13.9; four sequences of 1024 keys 19.3 against 13.1).
  const int from = config().decode_stream_keys;
  if (forced < 0 && (from <= 0 || a.batch * a.heads * a.sk < from)) return false;
  if (a.dtype != DType::f16 && a.dtype != DType::bf16) return false;
  if (a.sq < 1 || a.sq > 8 || a.sk < 1 || a.batch < 1 || a.heads < 1 || a.d != a.dv ||
      (a.d != 64 && a.d != 128))
    return false;
  if (a.batch * a.heads * kMaxSplits >= (int64_t{1} << 31)) return false;  // grid.x
  const int64_t old = a.first_new < 0 ? a.sk : a.first_new, added = a.sk - old;
  // 16-byte rows of a [batch, K/V head, key, d] operand with `keys` keys (8 16-bit elements).
  const auto rows16 = [&](const void* base, const int64_t(&st)[4], int64_t keys) {
    return vector_rows(base, st, a.batch, a.heads, keys, a.d, 8);
  };
  if (!rows16(a.k, a.k_st, old) || !rows16(a.v, a.v_st, old)) return false;
  if (a.first_new >= 0) {
    if (a.copy_old_k || a.copy_old_v || added < 1) return false;  // the FMA kernel copies old rows
    if (!rows16(a.k_new, a.k_new_st, added) || !rows16(a.v_new, a.v_new_st, added) ||
        !rows16(a.k_dst, a.k_dst_st, a.sk) || !rows16(a.v_dst, a.v_dst_st, a.sk))
      return false;
  }
  const auto s = static_cast<cudaStream_t>(stream);
  const bool wide = a.d == 128;
  if (a.dtype == DType::f16) return wide ? launch_d<F16, 128>(a, s) : launch_d<F16, 64>(a, s);
  return wide ? launch_d<BF16, 128>(a, s) : launch_d<BF16, 64>(a, s);
}

}  // namespace livefuse::cuda
