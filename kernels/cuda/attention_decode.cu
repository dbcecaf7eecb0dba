// Decode attention (flash-decoding): out = softmax(q kᵀ * scale + mask) v for a few query rows
// per (batch, K/V head) -- one token of each query head, the G heads of a grouped-query K/V head
// stacked as rows -- against a long KV cache. The general kernel (attention.cu) gives such a
// head one block that walks every key; here the keys are split over several blocks so that even
// batch 1 with 8 K/V heads keeps most SMs streaming the cache.
//
// Layout. A block of 8 warps takes one (batch, K/V head, up to kRows rows) and one split: a
// contiguous range of keys. Each key is read by a group of `lanes` threads, W columns each (one
// 16-byte load when the last-dim stride is 1 and the rows are aligned; W scalar strided loads
// otherwise), so a warp reads 32 / lanes whole key rows per load. Each thread keeps its rows'
// q (its W columns, in f32) and a running softmax per row: max m, sum l, and its W columns of
// the accumulator, all f32. A group scores kUnroll keys per step (all their K and V loads issued
// before the first use, for bytes in flight), reduces the dot products over its lanes with
// shuffles, and rescales once per step.
//
// Combining. The groups of a warp merge by shuffles, the warps of a block through shared memory,
// and the splits of a head in one of two ways:
//  * in a thread-block cluster (sm_90): after a cluster barrier each block reads every block's
//    partial (m, l, acc) through distributed shared memory and writes its share of the outputs.
//    No workspace, one launch, but at most 8 splits (the portable cluster size). Measured on the
//    H200 (Llama-1B bf16, 4096 keys, 8 K/V heads): 16 splits (sm_90's non-portable cluster size)
//    took 45 us a layer where 8 took 39-40 -- and 27.5 cold in the benchmark once the group sums
//    were unrolled (37.2 before); the 8.4 MB of K and V take 2 us at the copy bandwidth. ncu
//    there: 250 GB/s, 64 blocks on 132 SMs, 222 registers (2 warps a scheduler), ~150
//    instructions a key per lane -- bound by instructions and latency, not memory (bench/
//    RESULTS.md, session 23). The lean build (unroll_for, attention_decode_walk.cuh) fits two
//    blocks an SM: 4096 keys 27.4 -> 23.1.
//  * in the stream's workspace (split_space.hpp), when a wave of the device wants more splits
//    than a cluster holds (long caches, few heads): each block writes its partial to its slot,
//    and the last split of a tile to arrive (an atomic count, set back to zero by that block)
//    folds them and writes the rows (attention_fold.cuh: every split's max, sum and accumulator
//    asked for at once, 16 splits at a time). Still one launch; the count makes it graph-safe. Devices
//    without clusters take this path too. A stream being captured before it ever had a
//    workspace uses clusters.
//
// Semantics are the general kernel's (kernels/cpu/attention.cpp is the reference): scale, then
// the mask; a row whose scores are all -inf, or hold a NaN or +inf, is NaN; a step of keys that
// are all -inf so far is skipped.
#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "kernels/cuda/attention_decode.hpp"
#include "kernels/cuda/attention_decode_combine.cuh"
#include "kernels/cuda/attention_decode_walk.cuh"
#include "kernels/cuda/attention_decode_splits.hpp"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/cluster.hpp"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/launch_record.hpp"
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

using namespace decode;  // the combining (attention_decode_combine.cuh) and its constants

constexpr int kScalarW = 4;  // columns per thread on the strided path: 32 * 4 = kMaxD

// Keys [begin, end) of (b, h) of a K or V cache into L2 (pdl.cuh), when a key's columns are
// contiguous: the keys before this step's are the cache the step reads, already in memory.
template <class S>
__device__ void prefetch_rows(const void* base, const int64_t (&st)[4], int64_t b, int64_t h,
                              int64_t begin, int64_t end, int64_t cols) {
  if (st[3] != 1 || st[2] < cols) return;
  constexpr int64_t es = sizeof(typename S::Bits);
  const char* p = static_cast<const char*>(base) + (b * st[0] + h * st[1] + begin * st[2]) * es;
  prefetch_l2(p, ((end - 1 - begin) * st[2] + cols) * es);
}

// Rows [from, to) of (b, h) of a [batch, heads, rows, cols] operand into dst's same rows, src's
// row 0 being row `src_row0`: a KV cache's append (AttentionArgs::first_new), the block's threads
// striding over the elements (32-bit index arithmetic: a split's rows times <= kMaxD columns).
template <class Bits>
__device__ void copy_key_rows(const void* src, const int64_t (&sst)[4], int64_t src_row0, void* dst,
                              const int64_t (&dst_st)[4], int64_t b, int64_t h, int64_t from, int64_t to,
                              int64_t cols) {
  const Bits* s = static_cast<const Bits*>(src) + b * sst[0] + h * sst[1] + (from - src_row0) * sst[2];
  Bits* d = static_cast<Bits*>(dst) + b * dst_st[0] + h * dst_st[1] + from * dst_st[2];
  const uint32_t n = static_cast<uint32_t>((to - from) * cols), w = static_cast<uint32_t>(cols);
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
    const uint32_t r = i / w, c = i - r * w;
    d[r * dst_st[2] + c * dst_st[3]] = s[r * sst[2] + c * sst[3]];
  }
}

// The append's share of a block (one per split; the other row blocks of the tile read the same
// keys and write nothing): the new rows among its keys, and the old ones when the cache was not
// grown in place. Nothing in the launch reads k_dst / v_dst: the walk reads the old keys from k / v
// and the new ones from k_new / v_new. Done after the walk, whose loads it then finds in cache: put
// first, its load-then-store stood before the walk's first loads (H100, cold: +1.5 us a launch).
// Keys [begin, mid) are old ones, [mid, end) the step's (the kernel's split of its keys).
template <class S>
__device__ void land_append(const AttentionArgs& a, int64_t b, int64_t h, int64_t begin, int64_t mid,
                            int64_t end) {
  using Bits = typename S::Bits;
  if (a.copy_old_k && begin < mid) copy_key_rows<Bits>(a.k, a.k_st, 0, a.k_dst, a.k_dst_st, b, h, begin, mid, a.d);
  if (a.copy_old_v && begin < mid) copy_key_rows<Bits>(a.v, a.v_st, 0, a.v_dst, a.v_dst_st, b, h, begin, mid, a.dv);
  if (mid < end) {
    copy_key_rows<Bits>(a.k_new, a.k_new_st, a.first_new, a.k_dst, a.k_dst_st, b, h, mid, end, a.d);
    copy_key_rows<Bits>(a.v_new, a.v_new_st, a.first_new, a.v_dst, a.v_dst_st, b, h, mid, end, a.dv);
  }
}

// Where the splits of a head meet when they are more than a cluster holds (split_space.hpp):
// part holds [tile][split] partials (a tile: one batch, head and row block), count[tile] the
// splits that have arrived. Null part: the splits are one cluster.
struct SplitMeet {
  Partial<1>* part = nullptr;  // cast to Partial<kRows> by the kernel
  unsigned* count = nullptr;
};

// Grid: x = (batch * head) * splits (a cluster of `splits` blocks per head unless `meet` has a
// workspace), y = row blocks.
template <class S, int kRows, int W, bool kVec, bool kLean>
__global__ void __launch_bounds__(kThreads, kLean ? 2 : 1)
    decode_kernel(AttentionArgs a, int lanes, int splits, SplitMeet meet) {
  __shared__ Shared<kRows> sh;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // 32-bit index arithmetic: grid.x = batch * heads * splits < 2^31 (launch_attention_decode).
  const int split = static_cast<int>(blockIdx.x % splits);
  const int bh = static_cast<int>(blockIdx.x / splits), heads = static_cast<int>(a.heads);
  const int64_t b = bh / heads, h = bh % heads;
  const int row0 = static_cast<int>(blockIdx.y) * kRows;
  const int group = threadIdx.x / lanes, groups = kThreads / lanes;

  const int64_t per_split = (a.sk + splits - 1) / splits;
  const int64_t begin = split * per_split;
  const int64_t end = begin + per_split < a.sk ? begin + per_split : a.sk;
  // Keys [begin, mid) come from k / v, [mid, end) from the appended rows (AttentionArgs::first_new).
  const bool appends = a.first_new >= 0;
  const int64_t mid = !appends || end <= a.first_new ? end : begin > a.first_new ? begin : a.first_new;
  using Walk = Walker<S, kRows, W, kVec, kLean>;
  Walk st(a, b, h, row0, lanes, (lane % lanes) * W, begin + group, groups);
  const int64_t per_step = int64_t{groups} * Walk::kUnroll;  // keys a step of the block
  if (threadIdx.x == 0 && blockIdx.y == 0 && begin < mid) {  // this split's keys and values
    prefetch_rows<S>(a.k, a.k_st, b, h, begin, mid, a.d);
    prefetch_rows<S>(a.v, a.v_st, b, h, begin, mid, a.dv);
  }
  // The first step's old keys into registers before the wait where no kernel that may still run
  // writes them (AttentionArgs::early_kv): their memory round trip overlaps the kernel before.
  typename Walk::Fetched first;
  const bool early = a.early_kv && begin < mid;
  if (early) st.fetch(mid - (begin + group), first);
  pdl_wait();  // nothing above reads q, the mask, memory a kernel still running may write, or writes
  st.load_q(b, h, row0);

  int64_t j0 = begin;
  if (early) {
    st.consume(first);
    j0 += per_step;
  }
  for (; j0 < mid; j0 += per_step) st.step(mid - (j0 + group));
  if (mid < end) {
    st.seek_new(b, h, row0, mid + group);
    for (int64_t k0 = mid; k0 < end; k0 += per_step) st.step(end - (k0 + group));
  }
  if (appends && blockIdx.y == 0) land_append<S>(a, b, h, begin, mid, end);
  st.merge_warp();
  st.store(sh.warp[warp], lane);
  __syncthreads();
  const int dv = static_cast<int>(a.dv);
  if (meet.part) {
    // Through the workspace: the block's partial into its slot, then the last split of the
    // tile to arrive folds them all and writes the rows (attention_fold.cuh, its notes).
    const int64_t tile = bh * gridDim.y + blockIdx.y;
    auto* slots = reinterpret_cast<Partial<kRows>*>(meet.part) + tile * splits;
    merge_block(sh, dv, slots[split]);
    if (!last_to_arrive(&meet.count[tile], static_cast<unsigned>(splits))) return;
    write_out<S, kRows, kMeetBatch>(a, b, h, row0, 0, 1, splits, [&](int i) { return &slots[i]; },
                                    [](const float* p) { return __ldcg(p); });
    return;
  }
  merge_block(sh, dv, sh.block);
  const auto in_shared = [](const float* p) { return *p; };
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (splits > 1) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every block's partial is written
    write_out<S, kRows, kMaxSplits>(a, b, h, row0, split, splits, splits,
                                    [&](int i) { return cluster.map_shared_rank(&sh.block, i); }, in_shared);
    cluster.sync();  // and read: a block's shared memory lives only as long as the block
    return;
  }
#endif
  __syncthreads();
  write_out<S, kRows, 1>(a, b, h, row0, 0, 1, 1, [&](int) { return &sh.block; }, in_shared);
}

std::atomic<bool> g_enabled{true};
std::atomic<int> g_max_splits{0};
std::atomic<int> g_max_rows{0};
std::atomic<bool> g_lean{true};

// The lean build for blocks of one or two rows (LIVEFUSE_DECODE_LEAN, and the benchmark's
// switch). Never for 4 or 8 rows: a block of 8 rows (9-16 query rows, e.g. a GQA group of 4
// over 4 tokens) spilled under the cap and took 27.6 us where the wide build took 18.4 (H200,
// 512 keys); `if constexpr` on kRows keeps those lean kernels from being instantiated at all.
template <int kRows>
bool lean_rows() {
  if constexpr (kRows <= 2) return g_lean.load(std::memory_order_relaxed) && config().decode_lean;
  return false;
}

int64_t next_pow2(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

// Whether K and V rows (cols wide) can be read W elements (16 bytes) at a time.
bool vector_kv_rows(const void* base, const int64_t (&st)[4], int64_t cols, const AttentionArgs& a,
                    int W) {
  return vector_rows(base, st, a.batch, a.heads, a.sk, cols, W);
}

// The most blocks per cluster this kernel can run with on an sm_90+ device: kMaxSplits where the
// code that runs has clusters (not sm_80 code on sm_90) and the scheduler can place one that
// size, else 1. Asked once per kernel (a template argument, as resident_per_sm: every
// instantiation has the same signature), the first such device's answer standing for all.
template <auto Kernel>
int max_splits() {
  static const int n = clusters_fit(Kernel, kMaxSplits, kThreads) ? kMaxSplits : 1;
  return n;
}

template <class S, int kRows, int W, bool kVec, bool kLean>
void launch(const AttentionArgs& a, cudaStream_t stream) {
  constexpr auto kernel = decode_kernel<S, kRows, W, kVec, kLean>;
  const int lanes = static_cast<int>(next_pow2((std::max(a.d, a.dv) + W - 1) / W));
  const int64_t row_blocks = (a.sq + kRows - 1) / kRows;
  const DeviceInfo& dev = current_device_info();
  int most = dev.cc_major >= 9 ? max_splits<kernel>() : 1;  // clusters: sm_90+
  const int cap = g_max_splits.load(std::memory_order_relaxed);
  if (cap > 0) most = std::min(most, cap);
  int splits = choose_splits(a, row_blocks, dev.sm_count, most);
  // More splits than a cluster holds meet in the stream's workspace (the note at the top).
  SplitMeet meet;
  int wide = workspace_splits(a, row_blocks, resident_per_sm<kernel>(kThreads) * dev.sm_count,
                              sizeof(Partial<kRows>));
  if (cap > 0) wide = std::min(wide, cap);
  if (wide > splits) {
    const SplitSpace space = split_space(stream);
    if (space.part) {
      meet = SplitMeet{static_cast<Partial<1>*>(space.part), space.count};
      splits = wide;
    }
  }
  const bool cluster = splits > 1 && !meet.part;
  launch_pdl_clusters("decode_kernel", cluster ? static_cast<unsigned>(splits) : 1u, kernel,
                      dim3(static_cast<unsigned>(a.batch * a.heads * splits), static_cast<unsigned>(row_blocks)),
                      dim3(kThreads), 0, stream, a, lanes, splits, meet);
}

template <class S, int kRows>
void launch_rows(const AttentionArgs& a, cudaStream_t stream) {
  constexpr int kVecW = 16 / sizeof(typename S::Bits);
  const bool vec =
      vector_kv_rows(a.k, a.k_st, a.d, a, kVecW) && vector_kv_rows(a.v, a.v_st, a.dv, a, kVecW) &&
      (a.first_new < 0 ||
       (vector_kv_rows(a.k_new, a.k_new_st, a.d, a, kVecW) && vector_kv_rows(a.v_new, a.v_new_st, a.dv, a, kVecW)));
  if constexpr (kRows <= 2) {
    if (lean_rows<kRows>())
      return vec ? launch<S, kRows, kVecW, true, true>(a, stream)
                 : launch<S, kRows, kScalarW, false, true>(a, stream);
  }
  vec ? launch<S, kRows, kVecW, true, false>(a, stream)
      : launch<S, kRows, kScalarW, false, false>(a, stream);
}

}  // namespace

void preload_attention_decode_kernels(DType dt) {
  with_float_storage(dt, [](auto tag) {
    using S = decltype(tag);
    constexpr int kVecW = 16 / sizeof(typename S::Bits);
    const auto rows = [](auto r) {
      constexpr int kRows = decltype(r)::value;
      if constexpr (kRows <= 2) {
        if (lean_rows<kRows>()) {
          load_kernel(decode_kernel<S, kRows, kVecW, true, true>);
          load_kernel(decode_kernel<S, kRows, kScalarW, false, true>);
          return;
        }
      }
      load_kernel(decode_kernel<S, kRows, kVecW, true, false>);
      load_kernel(decode_kernel<S, kRows, kScalarW, false, false>);
    };
    rows(std::integral_constant<int, 1>{});
    rows(std::integral_constant<int, 2>{});
    rows(std::integral_constant<int, 4>{});
    rows(std::integral_constant<int, 8>{});
  });
}

void set_attention_decode_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
void set_attention_decode_max_splits(int most) { g_max_splits.store(most, std::memory_order_relaxed); }
void set_attention_decode_max_rows(int most) { g_max_rows.store(most, std::memory_order_relaxed); }
void set_attention_decode_lean(bool on) { g_lean.store(on, std::memory_order_relaxed); }

bool launch_attention_decode(const AttentionArgs& args, void* stream) {
  if (!g_enabled.load(std::memory_order_relaxed)) return false;
  AttentionArgs a = args;
  const bool floats = a.dtype == DType::f32 || a.dtype == DType::f16 || a.dtype == DType::bf16;
  if (!floats || a.sq < 1 || a.sq > kAttentionDecodeMaxRows || a.sk < 1 || a.d < 1 || a.d > kMaxD ||
      a.dv < 1 || a.dv > kMaxD || a.batch < 1 || a.heads < 1)
    return false;
  if (a.batch * a.heads * std::max(kMaxSplits, kMaxMeetSplits) >= (int64_t{1} << 31)) return false;  // grid.x
  // An append's copies index a split's elements in 32 bits (copy_key_rows).
  if (a.first_new >= 0 && a.sk * std::max(a.d, a.dv) >= (int64_t{1} << 31)) return false;
  const auto s = static_cast<cudaStream_t>(stream);
  with_float_storage(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    // A GQA group of 2-4 rows as two row blocks of 2. The wide build (one block an SM) did so
    // only while those blocks took at most 3/4 of the SMs (their clusters must all be resident
    // at once): H200, Llama-1B batch 1 (8 K/V heads), us a layer: 128 keys 11.6 -> 9.2, 777 keys
    // 17.7 -> 13.5; but at 1024 and 4096 keys, 8 splits a head, 13.7 -> 18.5 and 27.6 -> 37.5
    // (128 blocks in clusters of 8 on 132 SMs). The lean build fits two blocks an SM, and two-row
    // blocks win at every length (livefuse-bench-attention-decode, cold, us: 1024 keys 13.5 ->
    // 11.6, 4096 keys 27.4 -> 23.1 against the wide build's choice; four-row lean blocks 14.8
    // and 32.0).
    const int cap = g_max_rows.load(std::memory_order_relaxed);
    const bool lean = lean_rows<2>();
    const int64_t splits = std::clamp<int64_t>(a.sk / kMinSplitKeys, 1, kMaxSplits);
    const int64_t halves = a.batch * a.heads * splits * 2;
    const bool fit = 4 * halves <= 3 * int64_t{current_device_info().sm_count};
    const bool two = a.sq > 1 && a.sq <= 4 && (cap == 2 || (cap == 0 && (lean || fit)));
    if (a.sq == 1 || cap == 1)
      launch_rows<S, 1>(a, s);
    else if (two)
      launch_rows<S, 2>(a, s);
    else if (a.sq <= 4)
      launch_rows<S, 4>(a, s);
    else
      launch_rows<S, 8>(a, s);  // 9..16 rows: two row blocks
  });
  return true;
}

}  // namespace livefuse::cuda
