// Prefill attention in f32 on FMA units: out = softmax(q kᵀ * scale + mask) v, flash style, for
// d = dv in {64, 128} with K and V rows readable 16 bytes at a time (attention_f32_fits).
//
// [ Note -- why f32 has a kernel of its own ]
// The tensor-core kernel (attention_mma.cu) takes f16/bf16; f32 went to the general kernel
// (attention.cu), which scores one row at a time with two shared loads an FMA and converts
// every element through a dtype switch -- slower than the two GEMMs and the softmax it would
// replace, so f32 BERT left its attention unfused (four launches and the scores in memory).
// Here a warp scores all R of its rows against two keys a lane at once: a float4 of each key
// (one shared load each, the K tile's rows padded so 8 lanes' float4s hit 32 distinct banks)
// and a broadcast float4 of each row feed 8 R FMAs; P V takes a float4 of four keys'
// probabilities a row and each lane's D / 32 columns of V. Tiles of 64 keys come in by
// cp.async, the next one in flight while the warp works on this one.
//
// Numerics are eager's f32 (no tensor cores, no TF32): the score is the dot product times the
// scale, rounded, then the mask added (no contraction into one FMA), and expf. Sums run in
// another order than the GEMMs', within f32's rounding. A row that is all -inf, or holds a NaN
// or +inf score, is NaN (kernels/cpu/attention.cpp is the reference).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/attention_args.hpp"
#include "kernels/cuda/attention_kernels.hpp"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/launch_util.hpp"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/pdl.hpp"
#include "kernels/cuda/preload.hpp"
#include "kernels/cuda/vector_rows.hpp"
#include "kernels/cuda/warp.cuh"

namespace livefuse::cuda {
namespace {

constexpr int kKeys = 64;  // a tile: keys lane and lane + 32 of every lane
constexpr float kNegInf = -__builtin_huge_valf();

// Dynamic shared memory, in floats: two stages of K (rows padded by 4: lane j's float4 at column
// c falls in banks 4j + c .. of its quarter warp) and of V, the block's query rows, each warp's
// probabilities [R][kKeys]. W warps of R rows each.
template <int D, int R, int W>
struct F32Layout {
  static constexpr int kRows = W * R;
  static constexpr int kKPitch = D + 4;
  static constexpr int kK = 0;
  static constexpr int kV = kK + 2 * kKeys * kKPitch;
  static constexpr int kQ = kV + 2 * kKeys * D;
  static constexpr int kP = kQ + kRows * D;
  static constexpr int kBytes = (kP + W * R * kKeys) * 4;
};

// Tile `t`'s K and V rows into stage `st`, keys past sk zero-filled (their probabilities are 0).
template <int D, int R, int W>
__device__ __forceinline__ void load_tile(const AttentionArgs& a, int64_t b, int64_t h, int64_t t,
                                          int st, float* sm) {
  using L = F32Layout<D, R, W>;
  constexpr int kChunks = kKeys * D / 4;  // 16-byte chunks of K (and of V)
  const float* k = static_cast<const float*>(a.k) + b * a.k_st[0] + h * a.k_st[1];
  const float* v = static_cast<const float*>(a.v) + b * a.v_st[0] + h * a.v_st[1];
  for (int i = threadIdx.x; i < kChunks; i += W * 32) {
    const int j = i / (D / 4), c = (i % (D / 4)) * 4;
    const int64_t key = t * kKeys + j;
    const bool valid = key < a.sk;
    const int64_t kr = valid ? key : 0;
    tc::cp_async16(tc::smem_address(sm + L::kK + (st * kKeys + j) * L::kKPitch + c), k + kr * a.k_st[2] + c, valid);
    tc::cp_async16(tc::smem_address(sm + L::kV + (st * kKeys + j) * D + c), v + kr * a.v_st[2] + c, valid);
  }
}

template <int D, int R, int W>
__global__ void __launch_bounds__(W * 32)
    attention_f32_kernel(AttentionArgs a, int64_t row_tiles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using L = F32Layout<D, R, W>;
  constexpr int kC = D / 32;  // output columns a lane: lane * kC ..
  extern __shared__ float4 smem4[];
  float* const sm = reinterpret_cast<float*>(smem4);
  const int64_t tile = blockIdx.x % row_tiles, bh = blockIdx.x / row_tiles;
  const int64_t b = bh / a.heads, h = bh % a.heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = tile * L::kRows;
  const int64_t tiles = (a.sk + kKeys - 1) / kKeys;
  pdl_wait();  // q, k, v and the mask come from the kernels before

  load_tile<D, R, W>(a, b, h, 0, 0, sm);
  tc::cp_async_commit();
  const float* q = static_cast<const float*>(a.q) + b * a.q_st[0] + h * a.q_st[1];
  for (int i = threadIdx.x; i < L::kRows * D; i += W * 32) {
    const int r = i / D, c = i % D;
    const int64_t row = row0 + r;
    sm[L::kQ + i] = row < a.sq ? q[row * a.q_st[2] + c * a.q_st[3]] : 0.0f;
  }

  // This warp's rows: valid ones first (rows past sq sit at the block's end).
  const int64_t my0 = row0 + warp * R;
  float m[R], l[R], acc[R][kC];
  int64_t mask_row[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = kNegInf, l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < kC; ++i) acc[r][i] = 0.0f;
    mask_row[r] = b * a.mask_st[0] + h * a.mask_st[1] + row_offset(my0 + r, a.rows_t, a.mask_st[2], a.mask_st_g);
  }
  const float* mask = static_cast<const float*>(a.mask);
  float* const p_s = sm + L::kP + warp * R * kKeys;

  for (int64_t t = 0; t < tiles; ++t) {
    const int st = static_cast<int>(t & 1);
    if (t + 1 < tiles) load_tile<D, R, W>(a, b, h, t + 1, st ^ 1, sm);
    tc::cp_async_commit();  // (possibly empty: one group a tile either way)
    tc::cp_async_wait<1>();
    __syncthreads();  // tile t (and the query rows) visible to every warp

    const int64_t key0 = t * kKeys + lane, key1 = key0 + 32;
    // The mask's values first: their loads overlap the dot products.
    float mk[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const bool row_ok = my0 + r < a.sq;
      mk[r][0] = mask && row_ok && key0 < a.sk ? mask[mask_row[r] + key0 * a.mask_st[3]] : 0.0f;
      mk[r][1] = mask && row_ok && key1 < a.sk ? mask[mask_row[r] + key1 * a.mask_st[3]] : 0.0f;
    }
    const float* kt = sm + L::kK + st * kKeys * L::kKPitch;
    float dot[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r) dot[r][0] = dot[r][1] = 0.0f;
#pragma unroll 4
    for (int c = 0; c < D; c += 4) {
      const float4 k0 = *reinterpret_cast<const float4*>(kt + lane * L::kKPitch + c);
      const float4 k1 = *reinterpret_cast<const float4*>(kt + (lane + 32) * L::kKPitch + c);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float4 qv = *reinterpret_cast<const float4*>(sm + L::kQ + (warp * R + r) * D + c);
        dot[r][0] = fmaf(qv.w, k0.w, fmaf(qv.z, k0.z, fmaf(qv.y, k0.y, fmaf(qv.x, k0.x, dot[r][0]))));
        dot[r][1] = fmaf(qv.w, k1.w, fmaf(qv.z, k1.z, fmaf(qv.y, k1.y, fmaf(qv.x, k1.x, dot[r][1]))));
      }
    }
    // Online softmax, a row at a time; alpha rescales what the row summed before.
    float alpha[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const bool row_ok = my0 + r < a.sq;
      // Scale, rounded, then the mask: eager's two ops (no FMA contraction).
      const float s0 = row_ok && key0 < a.sk ? __fadd_rn(__fmul_rn(dot[r][0], a.scale), mk[r][0]) : kNegInf;
      const float s1 = row_ok && key1 < a.sk ? __fadd_rn(__fmul_rn(dot[r][1], a.scale), mk[r][1]) : kNegInf;
      const float m_new = lf_max(m[r], warp_max_nan(lf_max(s0, s1)));
      float p0 = 0.0f, p1 = 0.0f;
      alpha[r] = 1.0f;
      // Only -inf so far: nothing to add (exp(-inf - -inf) would be NaN, and a later finite
      // score must still give eager's finite row).
      if (m_new != kNegInf) {
        alpha[r] = expf(m[r] - m_new);  // 0 on the first finite tile; NaN once m is NaN
        p0 = expf(s0 - m_new), p1 = expf(s1 - m_new);
        l[r] = l[r] * alpha[r] + warp_sum(p0 + p1);
        m[r] = m_new;
      }
      p_s[r * kKeys + lane] = p0;
      p_s[r * kKeys + lane + 32] = p1;
    }
    __syncwarp();
    // P V: lane's columns lane * kC .. over the tile's keys (V zero past sk, P zero there).
    const float* vt = sm + L::kV + st * kKeys * D + lane * kC;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int i = 0; i < kC; ++i) acc[r][i] *= alpha[r];
#pragma unroll 4
    for (int j = 0; j < kKeys; j += 4) {
      float4 p4[R];
#pragma unroll
      for (int r = 0; r < R; ++r) p4[r] = *reinterpret_cast<const float4*>(p_s + r * kKeys + j);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        float v[kC];
        if constexpr (kC == 2) {
          const float2 x = *reinterpret_cast<const float2*>(vt + (j + u) * D);
          v[0] = x.x, v[1] = x.y;
        } else {
          const float4 x = *reinterpret_cast<const float4*>(vt + (j + u) * D);
          v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float p = u == 0 ? p4[r].x : u == 1 ? p4[r].y : u == 2 ? p4[r].z : p4[r].w;
#pragma unroll
          for (int i = 0; i < kC; ++i) acc[r][i] = fmaf(p, v[i], acc[r][i]);
        }
      }
    }
    __syncthreads();  // every warp is done with stage st before tile t + 2 lands there
  }

#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = my0 + r;
    if (row >= a.sq) break;
    const bool finite = isfinite(m[r]);
    const float inv = 1.0f / l[r];
    float* out = static_cast<float*>(a.out) + b * a.out_st[0] + h * a.out_st[1] +
                 row_offset(row, a.rows_t, a.out_st[2], a.out_st_g);
#pragma unroll
    for (int i = 0; i < kC; ++i)
      out[(lane * kC + i) * a.out_st[3]] = finite ? acc[r][i] * inv : __int_as_float(0x7fc00000);
  }
#else
  __trap();
#endif
}

template <int D, int R, int W>
void launch_dr(const AttentionArgs& a, cudaStream_t stream) {
  using L = F32Layout<D, R, W>;
  constexpr auto kernel = attention_f32_kernel<D, R, W>;
  static const bool configured = [] {
    LF_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes));
    return true;
  }();
  (void)configured;
  const int64_t row_tiles = (a.sq + L::kRows - 1) / L::kRows;
  const int64_t blocks = a.batch * a.heads * row_tiles;
  LF_CHECK(blocks < (int64_t{1} << 31), "attention", "too many blocks: ", blocks);
  launch_pdl("attention_f32_kernel", kernel, dim3(static_cast<unsigned>(blocks)), dim3(W * 32),
             static_cast<size_t>(L::kBytes), stream, a, row_tiles);
}

std::atomic<int> g_rows{0};  // set_attention_f32_rows

// Four rows a warp where 16-row blocks fill the SMs once; else two (twice the blocks: BERT-base
// at batch 1 has 96 16-row blocks for 132 SMs). H100, session 50, us in a graph of 20, rows a
// warp 1 (in 8-warp blocks) / 2 / 4: BERT-base f32 b1 s128 9.55 / 8.36 / 9.29, b8 42.5 /
// 36.7 / 27.6, 16 heads of d 128 at s 256 64.4 / 68.3 / 40.7; one row a warp lost
// wherever it was tried, so the blocks are 4 warps.
template <int D>
void launch_d(const AttentionArgs& a, cudaStream_t stream) {
  const int64_t sms = current_device_info().sm_count;
  int rows = g_rows.load(std::memory_order_relaxed);
  if (rows != 2 && rows != 4) rows = a.batch * a.heads * ((a.sq + 15) / 16) >= sms ? 4 : 2;
  if (rows == 4) return launch_dr<D, 4, 4>(a, stream);
  launch_dr<D, 2, 4>(a, stream);
}

}  // namespace

bool attention_f32_fits(const AttentionArgs& a) {
  if (a.dtype != DType::f32 || a.d != a.dv || (a.d != 64 && a.d != 128) || a.sk < 1 || a.sq < 1 ||
      a.first_new >= 0 || a.batch < 1 || a.heads < 1)
    return false;
  // (cp.async needs sm_80: for older targets the kernel is a trap no launch may reach.)
  return vector_rows(a.k, a.k_st, a.batch, a.heads, a.sk, a.d, 4) &&
         vector_rows(a.v, a.v_st, a.batch, a.heads, a.sk, a.dv, 4) && current_device_info().cc_major >= 8;
}

void set_attention_f32_rows(int rows) { g_rows.store(rows, std::memory_order_relaxed); }

void launch_attention_f32(const AttentionArgs& a, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.d == 64) return launch_d<64>(a, s);
  launch_d<128>(a, s);
}

void preload_attention_f32_kernels(DType dt) {
  if (dt != DType::f32) return;
  load_kernel(attention_f32_kernel<64, 2, 4>), load_kernel(attention_f32_kernel<64, 4, 4>);
  load_kernel(attention_f32_kernel<128, 2, 4>), load_kernel(attention_f32_kernel<128, 4, 4>);
}

}  // namespace livefuse::cuda
