#pragma once
// f32 linears on tensor cores near f32's accuracy ("3xTF32"): every operand value v is split
// into big = tf32(v) and small = tf32(v - big) (10 + 1 mantissa bits each, so big + small
// carries ~22 of f32's 24), and each m16n8k8 product is summed as a_big b_big plus the
// corrections a_small b_big + a_big b_small (f32 accumulators, the corrections in their own) --
// the a_small b_small term (~2^-22 relative) is the only one dropped. On BERT's linears its
// error is 0.6-2.3e-6 of the largest value against 3-4e-7 for cuBLASLt's SIMT f32 (the tensor
// cores' f32 sums are less exact than FMA's), and it is slower than that SIMT kernel at 128
// rows (bench/RESULTS.md, session 52): LIVEFUSE_GEMM_F32X3=1 only.
//
// A block of 4 warps (2 x 2) computes a BM x BN tile of out = act(x w^T + bias); K runs in
// steps of kF32BK through a kStages-deep cp.async ring of padded shared tiles (row stride
// kF32BK + 4 floats: the fragment loads below hit 32 distinct banks). With `splits` > 1 the
// grid's z index takes a contiguous range of K steps, summed in split order by the tile's last
// block (gemm_tc_split.cuh), so one call gives the same bits every time. Device code for
// gemm_tc.cu and the lab (tools/gpu/lab/f32_emulation.cu).
#include "kernels/cuda/gemm_tc.cuh"
#include "kernels/cuda/gemm_tc_split.cuh"

namespace livefuse::cuda::tc {

inline constexpr int kF32BK = static_cast<int>(kGemmTcStepKF32);
// kVecK: a lane reads its fragments 16 bytes at a time -- within each 16 columns of K, lane t's
// values for both k8 steps sit at columns 4t .. 4t + 3 (the same order for x and w, so every
// product is still summed once) -- from rows padded to 48 floats (two rows a quarter-warp, 32
// distinct banks). Else a lane reads single floats of rows padded to 36 (conflict-free too).
// gemm_tc.cu launches kVecK: 5-15% faster than the scalar form on BERT's f32 linears at the
// same error (H100, tools/gpu/lab/f32_emulation.sh: FFN2 at 128 rows in 4 splits 25.9 against
// 27.6 us, Q/K/V 22.8 against 24.9; bench/RESULTS.md, session 53).
template <bool kVecK>
inline constexpr int kF32RowStride = kF32BK + (kVecK ? 16 : 4);

template <int BM, int BN, int kStages, bool kVecK = false>
inline constexpr int kGemmF32Smem = kStages * (BM + BN) * kF32RowStride<kVecK> * 4;

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
__device__ __forceinline__ void split_tf32(float v, uint32_t& big, uint32_t& small) {
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(big) : "f"(v));
  const float rest = v - __uint_as_float(big);
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(small) : "f"(rest));
}

// c += a b for one m16n8k8 TF32 tile.
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Rows [0, Rows) of a [.., kF32BK] slice (row stride `ld` floats) into a padded tile; rows at
// or past `valid` are zero-filled (they add 0 to rows that are never stored).
template <int Rows, int RS>
__device__ __forceinline__ void load_f32_tile(float* tile, const float* src, int64_t ld, int64_t valid, int t) {
  constexpr int kChunks = kF32BK / 4, kStep = kGemmThreads / kChunks;
  static_assert(Rows % kStep == 0);
  const int c = t % kChunks, r0 = t / kChunks;
  const uint32_t base = smem_address(tile);
#pragma unroll
  for (int it = 0; it < Rows / kStep; ++it) {
    const int r = r0 + it * kStep;
    const bool ok = r < valid;
    cp_async16(base + 4 * (r * RS + c * 4), ok ? src + r * ld + c * 4 : src, ok);
  }
}

template <int BM, int BN, int kStages, bool kVecK = false>
__global__ void __launch_bounds__(kGemmThreads) gemm_tc_f32_kernel(GemmTcArgs a) {
  constexpr int WM = BM / 2, WN = BN / 2, MT = WM / 16, NT = WN / 8, kF32RowStride = tc::kF32RowStride<kVecK>;
  static_assert(MT >= 1 && NT >= 1 && WM % 16 == 0 && WN % 8 == 0);
  extern __shared__ __align__(128) float fsmem[];
  float* const sa = fsmem;                                  // [kStages][BM][kF32RowStride]
  float* const sb = fsmem + kStages * BM * kF32RowStride;   // [kStages][BN][kF32RowStride]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp / 2, wn = warp % 2, g = lane / 4, t = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * BM, col0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t rows_left = a.m - row0;
  const StepRange range = split_steps(static_cast<int>(a.k / kF32BK), static_cast<int>(blockIdx.z), a.splits);
  const int s_begin = range.begin, steps = range.end - range.begin;
  const float* const x = static_cast<const float*>(a.x) + row0 * a.ldx + static_cast<int64_t>(s_begin) * kF32BK;
  const float* const w = static_cast<const float*>(a.w) + col0 * a.k + static_cast<int64_t>(s_begin) * kF32BK;
  auto load = [&](int s, int slot) {
    const int64_t k0 = static_cast<int64_t>(s) * kF32BK;
    load_f32_tile<BM, kF32RowStride>(sa + slot * BM * kF32RowStride, x + k0, a.ldx, rows_left, tid);
    load_f32_tile<BN, kF32RowStride>(sb + slot * BN * kF32RowStride, w + k0, a.k, BN, tid);
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load(s, s);
    cp_async_commit();
  }
  // The big x big products and the two correction products sum into accumulators of their own:
  // three products into one accumulator made each step wait on the one before it (an mma's
  // latency), where two chains a tile keep twice as many in flight.
  float acc[MT][NT][4] = {}, fix[MT][NT][4] = {};
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (s + kStages - 1 < steps) load(s + kStages - 1, (s + kStages - 1) % kStages);
    cp_async_commit();
    // Each warp splits the values it reads (a block splitting each stage's tiles once into big
    // and small tiles, behind one more barrier a step, measured slower: session 52).
    const float* ta = sa + (s % kStages) * BM * kF32RowStride;
    const float* tb = sb + (s % kStages) * BN * kF32RowStride;
    if constexpr (kVecK) {
#pragma unroll
      for (int c16 = 0; c16 < kF32BK / 16; ++c16) {
        uint32_t ab[2][MT][4], as[2][MT][4], bb[2][NT][2], bs[2][NT][2];  // [k8 step of the 16]
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          const float* p = ta + (wm * WM + i * 16 + g) * kF32RowStride + c16 * 16 + 4 * t;
          const float4 lo = *reinterpret_cast<const float4*>(p), hi = *reinterpret_cast<const float4*>(p + 8 * kF32RowStride);
          split_tf32(lo.x, ab[0][i][0], as[0][i][0]);
          split_tf32(hi.x, ab[0][i][1], as[0][i][1]);
          split_tf32(lo.y, ab[0][i][2], as[0][i][2]);
          split_tf32(hi.y, ab[0][i][3], as[0][i][3]);
          split_tf32(lo.z, ab[1][i][0], as[1][i][0]);
          split_tf32(hi.z, ab[1][i][1], as[1][i][1]);
          split_tf32(lo.w, ab[1][i][2], as[1][i][2]);
          split_tf32(hi.w, ab[1][i][3], as[1][i][3]);
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const float4 v = *reinterpret_cast<const float4*>(tb + (wn * WN + j * 8 + g) * kF32RowStride + c16 * 16 + 4 * t);
          split_tf32(v.x, bb[0][j][0], bs[0][j][0]);
          split_tf32(v.y, bb[0][j][1], bs[0][j][1]);
          split_tf32(v.z, bb[1][j][0], bs[1][j][0]);
          split_tf32(v.w, bb[1][j][1], bs[1][j][1]);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j) {
              mma_tf32(fix[i][j], as[h][i], bb[h][j][0], bb[h][j][1]);
              mma_tf32(acc[i][j], ab[h][i], bb[h][j][0], bb[h][j][1]);
              mma_tf32(fix[i][j], ab[h][i], bs[h][j][0], bs[h][j][1]);
            }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < kF32BK / 8; ++kk) {
        uint32_t ab[MT][4], as[MT][4], bb[NT][2], bs[NT][2];
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          const float* p = ta + (wm * WM + i * 16 + g) * kF32RowStride + kk * 8 + t;
          split_tf32(p[0], ab[i][0], as[i][0]);
          split_tf32(p[8 * kF32RowStride], ab[i][1], as[i][1]);
          split_tf32(p[4], ab[i][2], as[i][2]);
          split_tf32(p[8 * kF32RowStride + 4], ab[i][3], as[i][3]);
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const float* p = tb + (wn * WN + j * 8 + g) * kF32RowStride + kk * 8 + t;
          split_tf32(p[0], bb[j][0], bs[j][0]);
          split_tf32(p[4], bb[j][1], bs[j][1]);
        }
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            mma_tf32(fix[i][j], as[i], bb[j][0], bb[j][1]);
            mma_tf32(acc[i][j], ab[i], bb[j][0], bb[j][1]);
            mma_tf32(fix[i][j], ab[i], bs[j][0], bs[j][1]);
          }
      }
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] += fix[i][j][e];
  auto each_pair = [&](auto&& f) { for_each_pair(acc, row0 + wm * WM, col0 + wn * WN, g, t, a.m, f); };
  if (a.splits > 1 && !sum_splits(a, each_pair)) return;
  const float* const bias = static_cast<const float*>(a.bias);
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int64_t col = col0 + wn * WN + j * 8 + 2 * t;
    const float b0 = bias ? bias[col] : 0.0f, b1 = bias ? bias[col + 1] : 0.0f;
    const int64_t part = col / a.width;
    float* const out = static_cast<float*>(a.out[part]) + (col - part * a.width);
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = row0 + wm * WM + i * 16 + g + 8 * h;
        if (row >= a.m) continue;
        float v0 = acc[i][j][2 * h] + b0, v1 = acc[i][j][2 * h + 1] + b1;
        if (a.act != TcAct::none) v0 = activate(a.act, v0), v1 = activate(a.act, v1);
        *reinterpret_cast<float2*>(out + row * a.width) = make_float2(v0, v1);
      }
  }
}
#else
template <int BM, int BN, int kStages, bool kVecK = false>
__global__ void gemm_tc_f32_kernel(GemmTcArgs) {
  __trap();  // gemm_tc_supported keeps devices before sm_80 away
}
#endif

}  // namespace livefuse::cuda::tc
