// Decode attention on tensor cores: the few query rows of one (batch, K/V head) -- a token of
// each query head of a grouped-query group, stacked as rows, at most 16 -- against a long KV
// cache, flash-decoding style: the keys split over blocks, each block's warps walking their own
// 64-key tiles with the prefill kernel's pieces (attention_mma.cuh), the splits meeting in the
// stream's workspace (split_space.hpp).
//
// Why a second decode kernel. attention_decode.cu scores each key with a group of 8 lanes (d 64,
// 16 bytes a lane): every lane of the group repeats the key's shuffles, max and exp, ~150
// instructions a key a lane, so it is bound by instructions, not by the cache's bytes (H200,
// Llama-1B bf16 at 4096 keys: 14.4 us for 8.4 MB that take 2 us at the copy bandwidth;
// bench/RESULTS.md, session 29). Here the rows are the M of an mma.m16n8k16 (16 rows, of which a
// decode step fills 1-4): a 64-key tile is 32 mma for the scores and 32 for P V a warp, the
// softmax 2 x 8 exps a lane, so the walk costs a few instructions a key and the cache streams.
//
// Layout. A block of KW warps (2 at d = 64, 1 at d = 128: their K and V tiles in 48 KiB of static
// shared memory) takes one (batch, head) and one split, a run of whole 64-key tiles; warp w walks
// tiles w, w + KW, ... of it with its own K and V buffers (the prefill kernel's schedule: V_j
// lands while the scores and softmax of tile j run, K_{j+KW} while P V_j runs). The warps merge
// through shared memory (merge_partials). One split: the rows are written (store_rows). More: the
// block's partial (max, sum and accumulator of each row) goes to its slot, and the last split of
// the head to arrive (an atomic count, set back to zero by that block) folds them all: every
// split's max and sum at once, then each thread adds up the splits' accumulators of four columns,
// sixteen loads in flight. One launch, graph-safe (the count returns to zero).
//
// Numerics are the prefill kernel's (attention_mma.cu): scores in f32, rounded to the dtype, then
// scaled and masked; P rounded to the dtype for P V; a row all -inf, or with a NaN or +inf
// score, is NaN. A split whose keys are all -inf for a row adds nothing to it.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/attention_kernels.hpp"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/launch_util.hpp"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/pdl.hpp"
#include "kernels/cuda/preload.hpp"
#include "kernels/cuda/split_space.hpp"
#include "livefuse/config.hpp"

namespace livefuse::cuda {
namespace {

using namespace tc;  // the tile pieces (attention_mma.cuh)

// Key groups (warps) a block: two K and V tiles of 64 keys fit 48 KiB of static shared memory at
// d = 64, one at d = 128.
template <int D>
constexpr int kGroups = D == 64 ? 2 : 1;
// The most splits a head takes: the fold's loads stay within two round trips of sixteen.
constexpr int kMaxTcSplits = 32;
// A split's partial in the workspace: each row's max, its sum, then its accumulator.
template <int D>
constexpr int kSlotFloats = 2 * 16 + 16 * D;
// Blocks an SM the registers are capped for: six of two warps at d = 64 (the shared memory
// allows six), four of one warp at d = 128 (its accumulator alone is 64 floats a lane).
template <int D>
constexpr int kMinBlocks = D == 64 ? 6 : 4;

std::atomic<int> g_tc_forced{-1};  // force_attention_decode_tc

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
// The block's merged rows (warp 0's state) into its slot: rows below sq only.
template <int D>
__device__ __forceinline__ void put_slot(float* slot, const RowStats& st,
                                         const float (&acc)[D / 8][4], int64_t sq, Lane ln) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float l = quad_sum(st.l[i]);  // every lane: the shuffles need the whole warp
    const int row = ln.g + 8 * i;
    if (row >= sq) continue;
    if (ln.t == 0) slot[row] = st.m[i], slot[16 + row] = l;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<float2*>(slot + 32 + row * D + 8 * n + 2 * ln.t) =
          make_float2(acc[n][2 * i], acc[n][2 * i + 1]);
  }
}

// The rows from the head's `splits` slots, by the block's `threads` threads; `scratch` (shared,
// 2 * kMaxTcSplits * 16 + 32 floats) takes each split's weight and each row's max and sum.
template <class S, int D>
__device__ void fold_slots(const AttentionArgs& a, int64_t b, int64_t h, const float* slots,
                           int splits, float* scratch, int threads) {
  constexpr float kLog2e = 1.4426950408889634f;
  const int rows = static_cast<int>(a.sq);
  float* wt = scratch;                              // [split][16]: m, then the split's weight
  float* ls = scratch + kMaxTcSplits * 16;          // [split][16]: l
  float* row_ml = scratch + 2 * kMaxTcSplits * 16;  // [16] max, [16] sum
  for (int i = threadIdx.x; i < splits * rows; i += threads) {
    const int sp = i / rows, r = i % rows;
    wt[sp * 16 + r] = __ldcg(slots + sp * kSlotFloats<D> + r);
    ls[sp * 16 + r] = __ldcg(slots + sp * kSlotFloats<D> + 16 + r);
  }
  __syncthreads();
  if (threadIdx.x < rows) {
    const int r = threadIdx.x;
    float m = kNegInf, l = 0.0f;
    for (int sp = 0; sp < splits; ++sp) m = lf_max(m, wt[sp * 16 + r]);  // NaN wins
    for (int sp = 0; sp < splits; ++sp) {
      const float ms = wt[sp * 16 + r];
      // A split whose keys were all -inf for the row adds nothing.
      const float w = ms == kNegInf ? 0.0f : exp2_approx((ms - m) * kLog2e);
      wt[sp * 16 + r] = w;
      l += ls[sp * 16 + r] * w;
    }
    row_ml[r] = m, row_ml[16 + r] = l;
  }
  __syncthreads();
  auto* out = static_cast<typename S::Bits*>(a.out) + b * a.out_st[0] + h * a.out_st[1];
  constexpr int kQuads = D / 4;
  for (int i = threadIdx.x; i < rows * kQuads; i += threads) {
    const int r = i / kQuads, c = (i % kQuads) * 4;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    constexpr int kBatch = 16;
    for (int sp0 = 0; sp0 < splits; sp0 += kBatch) {
      float4 x[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        x[u] = sp0 + u < splits ? __ldcg(reinterpret_cast<const float4*>(
                                      slots + (sp0 + u) * kSlotFloats<D> + 32 + r * D + c))
                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (sp0 + u >= splits) break;
        // Weight 0: a split whose keys were all -inf for the row (or negligible) is skipped, as
        // the CPU kernel skips such tiles (its accumulator may hold 0 * a NaN of V).
        const float w = wt[(sp0 + u) * 16 + r];
        if (w == 0.0f) continue;
        acc[0] += x[u].x * w, acc[1] += x[u].y * w, acc[2] += x[u].z * w, acc[3] += x[u].w * w;
      }
    }
    const float m = row_ml[r];
    const float inv = 1.0f / row_ml[16 + r], nan = __int_as_float(0x7fc00000);
    const bool finite = isfinite(m);  // all -inf, or a NaN or +inf score: eager's NaN row
    auto* o = out + row_offset32(r, a.rows_t, a.out_st[2], a.out_st_g) + c;
#pragma unroll
    for (int e = 0; e < 4; ++e) o[e] = S::from(finite ? acc[e] * inv : nan);
  }
}
#endif  // sm_80+

// Grid: x = (batch * head) * splits. `tiles_per_split` 64-key tiles a split (the last split may
// have fewer); `part` / `count`: the workspace, used only when splits > 1.
template <class S, int D, int KW>
__global__ void __launch_bounds__(32 * KW, kMinBlocks<D>)
    decode_tc_kernel(AttentionArgs a, MaskKind mask_kind, int splits, int tiles_per_split,
                     float* part, unsigned* count) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  __shared__ alignas(128) lf_u16 q_s[16 * D];
  __shared__ alignas(128) lf_u16 kv_s[KW][2][kBc * D];  // per warp: K tile, V tile
  __shared__ bool last;
  const int split = static_cast<int>(blockIdx.x % splits);
  const int64_t bh = blockIdx.x / splits;
  const int64_t b = bh / a.heads, h = bh % a.heads;
  const int kw = static_cast<int>(threadIdx.x / 32);
  lf_u16* const k_s = kv_s[kw][0];
  lf_u16* const v_s = kv_s[kw][1];
  const int lane = static_cast<int>(threadIdx.x % 32);
  const Lane ln{lane, lane / 4, lane % 4};
  const auto* q = static_cast<const lf_u16*>(a.q) + b * a.q_st[0] + h * a.q_st[1];
  const auto* k = static_cast<const lf_u16*>(a.k) + b * a.k_st[0] + h * a.k_st[1];
  const auto* v = static_cast<const lf_u16*>(a.v) + b * a.v_st[0] + h * a.v_st[1];
  const auto* mask = static_cast<const lf_u16*>(a.mask) + b * a.mask_st[0] + h * a.mask_st[1];
  const lf_u16* mask_rows[2];  // rows past sq read row sq - 1: never stored
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t row = min(int64_t{ln.g + 8 * i}, a.sq - 1);
    mask_rows[i] = mask + row_offset32(row, a.rows_t, a.mask_st[2], a.mask_st_g);
  }
  const int64_t tiles = (a.sk + kBc - 1) / kBc;
  const int64_t t_end = min(tiles, int64_t{split + 1} * tiles_per_split);
  const int64_t first = int64_t{split} * tiles_per_split + kw;
  pdl_wait();  // nothing above reads q, K, V or the mask, or writes anything

  load_tile<D, 16, 32 * KW>(q_s, q, a.q_st[2], 0, a.sq, static_cast<int>(threadIdx.x));
  if (first < t_end) load_tile<D, kBc, 32>(k_s, k, a.k_st[2], first * kBc, a.sk, lane);
  cp_async_commit();
  if (first < t_end) load_tile<D, kBc, 32>(v_s, v, a.v_st[2], first * kBc, a.sk, lane);
  cp_async_commit();
  cp_async_wait<1>();  // q and the warp's first K
  __syncthreads();

  RowStats st;
  float acc[D / 8][4] = {};
  walk_key_tiles<S, D, 32>(
      a, mask_kind, mask_rows, q_s, k_s, v_s, k, v, first, t_end, KW, 0, lane, ln,
      [] { __syncwarp(); }, st, acc);
  float* const scratch = reinterpret_cast<float*>(&kv_s[0][0][0]);
  if constexpr (KW > 1) {
    // Every warp's copies have landed (its last waits), so the K and V buffers take the partials.
    constexpr int kStride = 2 * kBc * D / 2;  // floats from one warp's buffers to the next's
    if (kw > 0) put_partial<D>(scratch + kw * kStride, st, acc, ln);
    __syncthreads();
    if (kw == 0) merge_partials<D, KW>(st, acc, scratch, kStride, ln);
  }
  if (splits == 1) {
    if (kw == 0)
      store_rows<S, D>(a, st, acc, static_cast<lf_u16*>(a.out) + b * a.out_st[0] + h * a.out_st[1],
                       0, ln);
    return;
  }
  // The block's partial into its slot, then the last split of the head to arrive folds them
  // (each thread's stores fenced before the arrival, the arrival read before the loads: the
  // threadFenceReduction pattern).
  float* const slots = part + bh * splits * kSlotFloats<D>;
  if (kw == 0) put_slot<D>(slots + split * kSlotFloats<D>, st, acc, a.sq, ln);
  __threadfence();
  __syncthreads();  // every warp is past merge_partials: the scratch is free for the fold
  if (threadIdx.x == 0) last = atomicAdd(&count[bh], 1u) == static_cast<unsigned>(splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  fold_slots<S, D>(a, b, h, slots, splits, scratch, 32 * KW);
  if (threadIdx.x == 0) count[bh] = 0;  // as the next launch on the stream expects it
#else
  __trap();
#endif
}

// Splits a head: one wave of blocks at most (`resident` fit the device at once), no warp without
// a tile, at most kMaxTcSplits, and as many slots as the workspace holds.
int choose_tc_splits(int64_t bh, int64_t tiles, int groups, int64_t resident, int64_t slot_bytes) {
  if (bh > kSplitSpaceCounters) return 1;
  const int64_t by_tiles = (tiles + groups - 1) / groups;
  const int64_t by_sms = resident / bh;
  const int64_t by_space = static_cast<int64_t>(kSplitSpaceBytes) / slot_bytes / bh;
  return static_cast<int>(
      std::clamp<int64_t>(std::min({by_tiles, by_sms, by_space}), 1, kMaxTcSplits));
}

template <class S, int D>
bool launch_tc(const AttentionArgs& a, cudaStream_t stream) {
  constexpr int KW = kGroups<D>;
  constexpr auto kernel = decode_tc_kernel<S, D, KW>;
  const int64_t bh = a.batch * a.heads, tiles = (a.sk + kBc - 1) / kBc;
  const int64_t resident = resident_per_sm<kernel>(32 * KW) * current_device_info().sm_count;
  int splits = choose_tc_splits(bh, tiles, KW, resident, kSlotFloats<D> * int64_t{sizeof(float)});
  const int64_t per_split = (tiles + splits - 1) / splits;
  splits = static_cast<int>((tiles + per_split - 1) / per_split);  // none empty
  SplitSpace space;
  if (splits > 1) {
    space = split_space(stream);
    // A stream captured before it ever had a workspace: the cluster kernel takes the step.
    if (!space.part) return false;
  }
  const bool mask_by_key = a.mask_st[2] == 0 && a.mask_st_g == 0;
  const MaskKind kind = !a.mask ? MaskKind::none : mask_by_key ? MaskKind::keys : MaskKind::rows;
  launch_pdl("decode_tc_kernel", kernel, dim3(static_cast<unsigned>(bh * splits)), dim3(32 * KW), 0,
             stream, a, kind, splits, static_cast<int>(per_split), static_cast<float*>(space.part),
             space.count);
  return true;
}

}  // namespace

void preload_attention_decode_tc_kernels(DType dt) {
  if (dt == DType::f16)
    load_kernel(decode_tc_kernel<F16, 64, 2>), load_kernel(decode_tc_kernel<F16, 128, 1>);
  if (dt == DType::bf16)
    load_kernel(decode_tc_kernel<BF16, 64, 2>), load_kernel(decode_tc_kernel<BF16, 128, 1>);
}

void force_attention_decode_tc(int on) { g_tc_forced.store(on, std::memory_order_relaxed); }

bool launch_attention_decode_tc(const AttentionArgs& a, void* stream) {
  const int forced = g_tc_forced.load(std::memory_order_relaxed);
  if (forced == 0 || (forced < 0 && !config().decode_tc)) return false;
  if (a.sq < 1 || a.sq > 16 || a.sk < 1 || a.batch < 1 || a.heads < 1 || !attention_mma_fits(a))
    return false;
  if (a.batch * a.heads * kMaxTcSplits >= (int64_t{1} << 31)) return false;  // grid.x
  const auto s = static_cast<cudaStream_t>(stream);
  const bool wide = a.d == 128;
  if (a.dtype == DType::f16) return wide ? launch_tc<F16, 128>(a, s) : launch_tc<F16, 64>(a, s);
  return wide ? launch_tc<BF16, 128>(a, s) : launch_tc<BF16, 64>(a, s);
}

}  // namespace livefuse::cuda
