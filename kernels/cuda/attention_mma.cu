// Fused attention on tensor cores for f16/bf16, flash-attention-2 style: out = softmax(q kᵀ *
// scale + mask) v, the scores and probabilities living only in registers.
//
// Work split: a block of RW x KW warps takes one (batch, head, tile of 16 RW query rows). Each
// warp owns 16 query rows -- the M of one mma.m16n8k16 -- so the softmax of a row never leaves
// its warp: a row's scores sit in the 4 lanes of one quad (the mma accumulator layout), and its
// max and sum take two shuffles. The keys come in tiles of kBc = 64; the KW key groups of a
// block walk every KW-th tile each (group g: tiles g, g + KW, ...), each with its own K and V
// buffers, and at the end groups 1.. hand their running max, sum and accumulator to group 0
// through shared memory, which merges them as flash-decoding merges its splits.
//   RW = 4, KW = 1 (one group: 64 rows a block) where the blocks take more than one round of
//   the SMs' block slots; within one round (BERT at batch 1: 12 heads x 2 row tiles = 24 blocks
//   on 132 SMs) each warp walking every key is the critical path, so rows are cut to 16 or 32 a
//   block and the keys split over 2 groups: up to 4x the blocks, half the tiles a warp
//   (attention_mma_config).
//
// Shared memory (static; at d = 128 48 KiB, the most without an opt-in): the Q tile, one K tile
// and one V tile, all [rows][d] in the operand dtype, filled by cp.async. A 16-byte chunk c of row
// r is stored at chunk c ^ (r % 8): ldmatrix reads 8 rows of one chunk column at once, and the XOR
// spreads them over all 32 banks (rows are 128 or 256 bytes, so unswizzled they would share banks).
// K and V are single-buffered but loaded apart: V_j lands while S = Q K_jᵀ and its softmax run,
// K_{j+1} while P V_j runs (FlashAttention-2's schedule).
//
// Registers per thread: the tile's scores (kBc / 2 floats), the output accumulator (d / 2
// floats), and the running max and sum of its 2 rows. Q is read from smem again for every key
// tile (d / 16 ldmatrix against the K tile's d / 2): held in registers it would cost d / 4
// more, and at d = 128 that is past the 255 a thread can have.
//
// Numerics: scores accumulate in f32 (mma .f32), scale then mask as eager does, the online
// softmax runs in f32 in base 2 (ex2 of (z - m) log2 e), and P is rounded to the operand dtype
// for the P V mma (as FlashAttention does; within the dtype's tolerance). Semantics are those
// of the CPU kernel (kernels/cpu/attention.cpp), whose key tiles are also 64 wide:
//   * a row whose scores are all -inf so far accumulates nothing: its probabilities come out
//     exp2(-inf) = 0 (the max subtracted is taken as 0, not -inf, which would give NaN), and
//     what that tile added (0 * a NaN in V is NaN) is dropped when a finite max first appears,
//     as the CPU kernel skips such a tile;
//   * a row that ends all -inf, or whose max is NaN (max.NaN keeps a NaN) or +inf, is NaN;
//   * no key is skipped because its probability is 0.
// Keys past sk (the last tile's padding) are zero-filled in smem and scored -inf.
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
#include "livefuse/config.hpp"

namespace livefuse::cuda {
namespace {

// Warps of a block: RW row warps (16 query rows each) in each of KW key groups.
template <int RW, int KW>
constexpr int kThreads = 32 * RW * KW;
std::atomic<int> g_forced_key_groups{0};  // force_attention_key_groups (tests, benchmark)
std::atomic<int> g_forced_row_warps{0};   // force_attention_row_warps (benchmark)

using namespace tc;  // the tile pieces (attention_mma.cuh)

// Blocks per SM the registers are capped for: at d = 64 the compiler would otherwise take ~245
// registers (hoisting mask loads and addresses), leaving 2 blocks per SM where 3 fit without
// spills (ptxas -v: 167). At d = 128 2 blocks is what 48 KiB of smem and ~240 registers allow.
// Smaller blocks keep the same registers a thread.
template <int D, int RW, int KW>
constexpr int kMinBlocksPerSm = (D == 64 ? 3 : 2) * 4 / (RW * KW);

template <class S, int D, int RW, int KW>
__global__ void __launch_bounds__(kThreads<RW, KW>, kMinBlocksPerSm<D, RW, KW>)
    attention_mma_kernel(AttentionArgs a, int64_t row_tiles, MaskKind mask_kind) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  constexpr int kRows = 16 * RW;
  static_assert(KW == 1 || RW * kPartFloats<D> * 4 <= 2 * kBc * D * 2, "partials fit the group's K, V");
  __shared__ alignas(128) lf_u16 q_s[kRows * D];
  __shared__ alignas(128) lf_u16 kv_s[KW][2][kBc * D];  // per key group: K tile, V tile
  // In 32 bits: the launch keeps blocks (so row tiles and heads) below 2^31.
  const uint32_t tiles_u = static_cast<uint32_t>(row_tiles),
                 heads_u = static_cast<uint32_t>(a.heads);
  const uint32_t bh = blockIdx.x / tiles_u;
  const int64_t tile = blockIdx.x % tiles_u, b = bh / heads_u, h = bh % heads_u,
                row0 = tile * kRows;
  const int warp = threadIdx.x / 32, rw = warp % RW, kw = warp / RW;
  const int gt = rw * 32 + static_cast<int>(threadIdx.x % 32);  // thread of its key group
  lf_u16* const k_s = kv_s[kw][0];
  lf_u16* const v_s = kv_s[kw][1];
  const Lane ln{static_cast<int>(threadIdx.x % 32), static_cast<int>(threadIdx.x % 32) / 4,
                static_cast<int>(threadIdx.x % 4)};
  const auto* q = static_cast<const lf_u16*>(a.q) + b * a.q_st[0] + h * a.q_st[1];
  const auto* k = static_cast<const lf_u16*>(a.k) + b * a.k_st[0] + h * a.k_st[1];
  const auto* v = static_cast<const lf_u16*>(a.v) + b * a.v_st[0] + h * a.v_st[1];
  const auto* mask = static_cast<const lf_u16*>(a.mask) + b * a.mask_st[0] + h * a.mask_st[1];
  // The mask's rows for this lane's two rows (rows past sq read row sq - 1: never stored).
  const lf_u16* mask_rows[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t row = min(row0 + rw * 16 + ln.g + 8 * i, a.sq - 1);
    mask_rows[i] = mask + row_offset32(row, a.rows_t, a.mask_st[2], a.mask_st_g);
  }
  const int64_t tiles = (a.sk + kBc - 1) / kBc;
  constexpr int kGroupThreads = 32 * RW;

  pdl_wait();  // nothing above touches memory (pdl.cuh: launched with PDL after a GEMM)
  load_tile<D, kRows, kThreads<RW, KW>>(q_s, q, a.q_st[2], row0, a.sq, static_cast<int>(threadIdx.x));
  if (kw < tiles) load_tile<D, kBc, kGroupThreads>(k_s, k, a.k_st[2], kw * kBc, a.sk, gt);
  cp_async_commit();
  if (kw < tiles) load_tile<D, kBc, kGroupThreads>(v_s, v, a.v_st[2], kw * kBc, a.sk, gt);
  cp_async_commit();
  cp_async_wait<1>();  // Q and the group's first K
  __syncthreads();

  RowStats st;
  float acc[D / 8][4] = {};
  walk_key_tiles<S, D, kGroupThreads>(a, mask_kind, mask_rows, q_s, k_s, v_s, k, v, kw, tiles, KW, rw,
                                      gt, ln, [&] { group_sync<RW, KW>(kw); }, st, acc);
  if constexpr (KW > 1) {
    // The group's K and V buffers are free (its last group_sync): they take its partials.
    constexpr int kStride = 2 * kBc * D / 2;  // floats from one group's buffers to the next's
    float* const part0 = reinterpret_cast<float*>(&kv_s[0][0][0]) + rw * kPartFloats<D>;
    if (kw > 0) put_partial<D>(part0 + kw * kStride, st, acc, ln);
    __syncthreads();
    if (kw > 0) return;
    merge_partials<D, KW>(st, acc, part0, kStride, ln);
  }
  lf_u16* out = static_cast<lf_u16*>(a.out) + b * a.out_st[0] + h * a.out_st[1];
  store_rows<S, D>(a, st, acc, out, row0 + rw * 16, ln);
#else
  __trap();
#endif
}

// Unit column stride and 16-byte aligned rows (cp.async); strides of size-1 dims are unused.
bool rows_aligned(const void* p, const int64_t (&st)[4], const int64_t (&n)[3], int64_t elems) {
  bool ok = reinterpret_cast<uintptr_t>(p) % (2 * elems) == 0 && st[3] == 1;
  for (int i = 0; i < 3; ++i) ok = ok && (n[i] == 1 || st[i] % elems == 0);
  return ok;
}

template <class S, int D, int RW, int KW>
void launch_for(const AttentionArgs& a, cudaStream_t stream) {
  const int64_t row_tiles = (a.sq + 16 * RW - 1) / (16 * RW);
  const int64_t blocks = a.batch * a.heads * row_tiles;
  LF_CHECK(blocks < (int64_t{1} << 31), "attention", "too many blocks: ", blocks);
  const bool mask_by_key = a.mask_st[2] == 0 && a.mask_st_g == 0;
  const MaskKind kind = !a.mask ? MaskKind::none : mask_by_key ? MaskKind::keys : MaskKind::rows;
  launch_pdl("attention_mma_kernel", attention_mma_kernel<S, D, RW, KW>, dim3(static_cast<unsigned>(blocks)),
             dim3(kThreads<RW, KW>), 0, stream, a, row_tiles, kind);
}

template <class S, int D>
void launch_config(const AttentionArgs& a, AttentionMmaConfig c, cudaStream_t stream) {
  if constexpr (D == 64) {  // two key groups' K and V tiles at d = 128 pass 48 KiB of static smem
    if (c.key_groups == 2)
      return c.row_warps == 2 ? launch_for<S, D, 2, 2>(a, stream) : launch_for<S, D, 1, 2>(a, stream);
  }
  launch_for<S, D, 4, 1>(a, stream);
}

}  // namespace

void preload_attention_mma_kernels(DType dt) {
  const auto d = [](auto tag, auto dim) {
    using S = decltype(tag);
    constexpr int D = decltype(dim)::value;
    load_kernel(attention_mma_kernel<S, D, 4, 1>);
    if constexpr (D == 64) {
      load_kernel(attention_mma_kernel<S, D, 2, 2>);
      load_kernel(attention_mma_kernel<S, D, 1, 2>);
    }
  };
  if (dt == DType::f16) d(F16{}, std::integral_constant<int, 64>{}), d(F16{}, std::integral_constant<int, 128>{});
  if (dt == DType::bf16) d(BF16{}, std::integral_constant<int, 64>{}), d(BF16{}, std::integral_constant<int, 128>{});
}

bool attention_mma_fits(const AttentionArgs& a) {
  if (a.dtype != DType::f16 && a.dtype != DType::bf16) return false;
  if (a.d != a.dv || (a.d != 64 && a.d != 128) || a.sk == 0) return false;
  const int64_t q_n[3] = {a.batch, a.heads, a.sq}, kv_n[3] = {a.batch, a.heads, a.sk};
  const int64_t out_n[3] = {a.batch, a.heads, a.rows_t};
  const bool groups_even = a.rows_t >= a.sq || a.out_st_g % 2 == 0;
  constexpr int64_t k32 = int64_t{1} << 31;  // rows in 32-bit arithmetic (row_offset32)
  return a.sq < k32 && a.rows_t < k32 && rows_aligned(a.q, a.q_st, q_n, 8) &&
         rows_aligned(a.k, a.k_st, kv_n, 8) && rows_aligned(a.v, a.v_st, kv_n, 8) &&
         rows_aligned(a.out, a.out_st, out_n, 2) && groups_even &&
         current_device_info().cc_major >= 8;
}

void launch_attention_mma(const AttentionArgs& a, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const bool wide = a.d == 128;
  const AttentionMmaConfig c = attention_mma_config(a);
  if (a.dtype == DType::f16)
    wide ? launch_config<F16, 128>(a, c, s) : launch_config<F16, 64>(a, c, s);
  else
    wide ? launch_config<BF16, 128>(a, c, s) : launch_config<BF16, 64>(a, c, s);
}

AttentionMmaConfig attention_mma_config(const AttentionArgs& a) {
  const int forced = g_forced_key_groups.load(std::memory_order_relaxed);
  const int64_t tiles = (a.sk + 63) / 64, heads = a.batch * a.heads;
  if (a.d != 64 || tiles < 2 || forced == 1 || (forced == 0 && !config().attention_split)) return {4, 1};
  const int64_t sms = current_device_info().sm_count;
  // One key group while 64-row blocks take more than one round of the SMs' block slots: then
  // more blocks only queue, and splitting adds a merge. Within one round each block's walk over
  // every key is the kernel's time, and halving it pays (H200, f16: BERT b1 s128 12.9 us against
  // 14.1, b8 s128 -- 192 blocks in 396 slots -- 14.1 against 16.1, b8 s384 -- 576 -- 50.3
  // against 49.1).
  if (forced == 0 && heads * ((a.sq + 63) / 64) > sms * kMinBlocksPerSm<64, 4, 1>) return {4, 1};
  // Keys split in two: 32 rows a block where that still gives every SM two blocks (fewer blocks
  // re-read K and V fewer times), else 16. Inside a CUDA graph (H100, livefuse-bench-attention
  // graph_us, session 45): BERT b8 s128 -- 384 blocks of 32 rows -- 6.7 us against 7.0 with 16
  // rows; b1 s384 -- 144 -- 11.5 against 10.7; b1 s128 -- 48 -- 5.05 against 4.97.
  const int rw = g_forced_row_warps.load(std::memory_order_relaxed);
  if (rw == 1 || rw == 2) return {rw, 2};
  return {heads * ((a.sq + 31) / 32) >= 2 * sms ? 2 : 1, 2};
}

void force_attention_row_warps(int row_warps) {
  g_forced_row_warps.store(row_warps, std::memory_order_relaxed);
}

void force_attention_key_groups(int groups) {
  g_forced_key_groups.store(groups, std::memory_order_relaxed);
}

}  // namespace livefuse::cuda
