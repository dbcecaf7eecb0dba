// Fused attention on CUDA: out = softmax(q kᵀ * scale + mask) v with the scores never written.
// launch_attention picks the kernel: f16/bf16 operands with d = dv in {64, 128} and unit-stride,
// aligned rows go to the tensor-core kernel (attention_mma.cu), f32 ones to the f32 FMA kernel
// (attention_f32.cu); everything else (odd head dims, element-strided views) to the general
// kernel below.
//
// The general kernel, flash-attention style: a block of 4 warps takes one (batch, head, tile of 16
// query rows) -- many blocks even at batch 1 -- and walks the keys in tiles of 32 through shared
// memory (K and V converted to f32 once per tile, for all 16 rows). Each warp owns 4 query rows:
// lane j scores key j of the tile, the warp's max and sum update an online softmax in f32, and lane
// c accumulates output columns c, c + 32, .. (head dims up to 128).
//
// Semantics are eager's (see kernels/cpu/attention.cpp): scale then mask; a row that is all
// -inf, or holds a NaN or +inf score, is NaN. The scores are rounded to the operands' dtype
// before the scale, as eager's GEMM writes them: in bf16 a score near 20 moves by up to 1/16
// there, which changes its probability by 6% -- eager's own error, but the one the program
// gets, so every kernel (and the CPU's) makes it too. Plain FMA math in f32, no tensor
// cores: f32 stays as exact as eager's f32 GEMM.
#include <atomic>

#include "kernels/attention_args.hpp"
#include "kernels/cuda/attention_kernels.hpp"
#include "kernels/cuda/attention_decode.hpp"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/launch_record.hpp"
#include "kernels/cuda/pdl.hpp"
#include "kernels/cuda/warp.cuh"

namespace livefuse::cuda {
namespace {

constexpr int kRows = 16;  // query rows per block
constexpr int kWarps = 4;  // each warp: kRows / kWarps rows
constexpr int kKeys = 32;  // keys per tile (one per lane)
constexpr int kCols = 4;   // output columns per lane: 4 * 32 = kAttentionMaxHeadDim
constexpr int kMaxD = 128;
constexpr int kKPitch = kMaxD + 1;  // lane j reads row j of the K tile: the pad spreads banks
constexpr float kNegInf = -__builtin_huge_valf();

static_assert(kCols * 32 == kAttentionMaxHeadDim && kMaxD == kAttentionMaxHeadDim);

__global__ void __launch_bounds__(kWarps * 32)
    attention_general_kernel(AttentionArgs a, int64_t row_tiles) {
  __shared__ float q_s[kRows][kMaxD];
  __shared__ float k_s[kKeys][kKPitch];
  __shared__ float v_s[kKeys][kMaxD];
  __shared__ float p_s[kWarps][kKeys];
  const int64_t tile = blockIdx.x % row_tiles, bh = blockIdx.x / row_tiles;
  const int64_t b = bh / a.heads, h = bh % a.heads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t row0 = tile * kRows;
  const DType dt = a.dtype;

  for (int i = tid; i < kRows * a.d; i += blockDim.x) {
    const int r = i / static_cast<int>(a.d), c = i % static_cast<int>(a.d);
    const int64_t row = row0 + r;
    q_s[r][c] = row < a.sq
                    ? load_as<float>(
                          a.q, b * a.q_st[0] + h * a.q_st[1] + row * a.q_st[2] + c * a.q_st[3], dt)
                    : 0.0f;
  }
  constexpr int kMine = kRows / kWarps;
  float m[kMine], l[kMine], acc[kMine][kCols];
#pragma unroll
  for (int r = 0; r < kMine; ++r) {
    m[r] = kNegInf;
    l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < kCols; ++i) acc[r][i] = 0.0f;
  }

  for (int64_t j0 = 0; j0 < a.sk; j0 += kKeys) {
    const int nj = static_cast<int>(a.sk - j0 < kKeys ? a.sk - j0 : kKeys);
    __syncthreads();  // the previous tile is read; q_s is written (first tile)
    for (int i = tid; i < nj * a.d; i += blockDim.x) {
      const int j = i / static_cast<int>(a.d), c = i % static_cast<int>(a.d);
      k_s[j][c] = load_as<float>(
          a.k, b * a.k_st[0] + h * a.k_st[1] + (j0 + j) * a.k_st[2] + c * a.k_st[3], dt);
    }
    for (int i = tid; i < nj * a.dv; i += blockDim.x) {
      const int j = i / static_cast<int>(a.dv), c = i % static_cast<int>(a.dv);
      v_s[j][c] = load_as<float>(
          a.v, b * a.v_st[0] + h * a.v_st[1] + (j0 + j) * a.v_st[2] + c * a.v_st[3], dt);
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kMine; ++r) {
      const int rl = warp * kMine + r;
      const int64_t row = row0 + rl;
      if (row >= a.sq) break;  // warp-uniform
      float s = kNegInf;
      const int64_t mask_row = row_offset(row, a.rows_t, a.mask_st[2], a.mask_st_g);
      if (lane < nj) {
        float dot = 0.0f;
        for (int c = 0; c < a.d; ++c) dot += q_s[rl][c] * k_s[lane][c];
        s = round_as(dot, dt) * a.scale;  // the scores as eager's GEMM writes them (the note)
        if (a.mask)
          s += load_as<float>(
              a.mask, b * a.mask_st[0] + h * a.mask_st[1] + mask_row + (j0 + lane) * a.mask_st[3],
              dt);
      }
      const float m_new = lf_max(m[r], warp_max_nan(s));
      // Only -inf so far: nothing to accumulate (exp(-inf - -inf) would be NaN, and a later
      // finite score must still give eager's finite row).
      if (m_new == kNegInf) continue;
      const float alpha = expf(m[r] - m_new);  // 0 on the first finite tile; NaN once m is NaN
      const float p = lane < nj ? expf(s - m_new) : 0.0f;
      l[r] = l[r] * alpha + warp_sum(p);
      m[r] = m_new;
      p_s[warp][lane] = p;
      __syncwarp();
#pragma unroll
      for (int i = 0; i < kCols; ++i) {
        const int c = lane + 32 * i;
        if (c >= a.dv) break;
        float x = acc[r][i] * alpha;
        for (int j = 0; j < nj; ++j) x += p_s[warp][j] * v_s[j][c];
        acc[r][i] = x;
      }
      __syncwarp();
    }
  }
#pragma unroll
  for (int r = 0; r < kMine; ++r) {
    const int64_t row = row0 + warp * kMine + r;
    if (row >= a.sq) break;
    // sk == 0: an empty softmax times an empty V is the GEMM's zeros.
    const bool finite = a.sk == 0 || isfinite(m[r]);
    const int64_t out_row =
        b * a.out_st[0] + h * a.out_st[1] + row_offset(row, a.rows_t, a.out_st[2], a.out_st_g);
    const float inv = a.sk == 0 ? 0.0f : 1.0f / l[r];
#pragma unroll
    for (int i = 0; i < kCols; ++i) {
      const int c = lane + 32 * i;
      if (c >= a.dv) break;
      const float y = finite ? acc[r][i] * inv : __int_as_float(0x7fc00000);
      store_as(a.out, out_row + c * a.out_st[3], dt, y);
    }
  }
}

// Launches through launch_attention by the kernel that took them (attention_launch_counts).
// decode_tc, decode_fma, mma, general, decode_stream; then of decode_fma and decode_stream,
// early_kv's; then prefill_f32.
std::atomic<uint64_t> g_launches[7];
void counted(int kernel) { g_launches[kernel].fetch_add(1, std::memory_order_relaxed); }
void counted_decode(int kernel, const AttentionArgs& a) {
  if (a.early_kv) counted(5);
  counted(kernel);
}

}  // namespace

AttentionLaunchCounts attention_launch_counts() {
  const auto n = [](int k) { return g_launches[k].load(std::memory_order_relaxed); };
  return {n(0), n(1), n(2), n(3), n(4), n(5), n(6)};
}

void launch_attention(const AttentionArgs& args, void* stream) {
  // Few rows per head: the split-KV decode kernel, from where it is faster than one block per
  // head. One token's rows (at most 4: a GQA group) take it at any length since its index
  // arithmetic was trimmed (H200, session 32, cold us, decode against the tensor-core kernel:
  // GPT-2 f16 one row, 32 keys 5.7 / 5.7, 128 keys 5.9 / 7.4, 256 keys 6.9 / 9.8; Llama GQA bf16
  // four rows, 32 keys 6.1 / 5.9, 128 keys 6.9 / 7.4), so a decode step keeps one kernel from
  // its first token on; more rows from 512 keys (16 rows at 512: 15.3 / 14.6); f32 always (the
  // general kernel's f32 path is plain FMA: 128 keys 6.3 / 69.9).
  // f16/bf16 at head dims 64 and 128 (the decoders'), up to 16 rows, with LIVEFUSE_DECODE_TC=1:
  // the tensor-core split-KV kernel (attention_mma_decode.cu), meant to stream the cache where
  // the FMA one is bound by its instructions (not yet measured: off by default).
  // A KV cache's append (AttentionArgs::first_new): the decode kernel writes the new rows as it
  // reads them; for any other kernel one launch of copies lands them first. (The tensor-core
  // decode kernel, LIVEFUSE_DECODE_TC, does not append: an appending step stays on the FMA one.)
  // From LIVEFUSE_DECODE_STREAM_KEYS keys read on (f16/bf16, d 64 / 128, up to 8 rows, the cache
  // grown in place), the streaming kernel (attention_decode_stream.cu) before the FMA one: at
  // long caches the FMA kernel is bound by its instructions, not the bytes.
  // Early keys count only under PDL: without it the kernel before has ended, and the decode
  // kernels' early loads are plain loads (harmless, and not what the counter counts).
  AttentionArgs a = args;
  a.early_kv = args.early_kv && pdl_enabled();
  const int64_t min_keys = a.dtype == DType::f32 || a.sq <= 4 ? 1 : 512;
  if (a.first_new >= 0) {
    if (launch_attention_decode_stream(a, stream)) return counted_decode(4, a);
    if (a.sk >= min_keys && launch_attention_decode(a, stream)) return counted_decode(1, a);
    launch_append_copies(a, stream);
    return launch_attention(after_append(a), stream);
  }
  if (launch_attention_decode_tc(a, stream)) return counted(0);
  if (launch_attention_decode_stream(a, stream)) return counted_decode(4, a);
  if (a.sk >= min_keys && launch_attention_decode(a, stream)) return counted_decode(1, a);
  if (a.batch * a.heads * a.sq * a.dv == 0) return;
  if (attention_mma_fits(a)) {
    launch_attention_mma(a, stream);
    return counted(2);
  }
  if (attention_f32_fits(a)) {
    launch_attention_f32(a, stream);
    return counted(6);
  }
  launch_attention_general(a, stream);
  counted(3);
}

void launch_attention_general(const AttentionArgs& a, void* stream) {
  if (a.batch * a.heads * a.sq * a.dv == 0) return;
  LF_CHECK(a.d <= kMaxD && a.dv <= kMaxD, "attention", "head dims up to ", kMaxD,
           " are supported, got d=", a.d, " dv=", a.dv);
  const int64_t row_tiles = (a.sq + kRows - 1) / kRows;
  const int64_t blocks = a.batch * a.heads * row_tiles;
  LF_CHECK(blocks < (int64_t{1} << 31), "attention", "too many blocks: ", blocks);
  if (record_launch(attention_general_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kWarps * 32), 0, 1, a,
                    row_tiles))
    return;
  attention_general_kernel<<<static_cast<unsigned>(blocks), kWarps * 32, 0,
                             static_cast<cudaStream_t>(stream)>>>(a, row_tiles);
  LF_CUDA_LAUNCH_CHECK("attention_general_kernel");
}

}  // namespace livefuse::cuda
