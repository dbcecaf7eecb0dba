#pragma once
// The tensor-core GEMM's device code (gemm_tc.hpp), shared by kernels/cuda/gemm_tc.cu and the
// GEMM lab (tools/gpu/lab/gemm_epilogue.cu, which times its tile shapes against cuBLASLt).
//
// A block of 4 warps computes a BM x 64 tile of the product (warps 2 x 2, each (BM / 2) x 32 as
// m16n8k16 tiles); K runs in steps of 64 through a kStages-deep ring of cp.async copies into
// swizzled shared tiles, the attention kernel's (attention_mma.cuh), so a step's loads are in
// flight while earlier steps compute. Rows past m are zero-filled and never stored. Sums are
// f32 in a fixed order: one call gives the same bits every time.
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/gemm_tc.hpp"
#include "kernels/device/lf_math.cuh"

namespace livefuse::cuda::tc {

inline constexpr int kGemmThreads = 128;
inline constexpr int kGemmBK = static_cast<int>(kGemmTcStepK), kGemmBN = static_cast<int>(kGemmTcTileN);

// Dynamic shared memory of one block.
template <int BM, int kStages>
inline constexpr int kGemmSmem = kStages * (BM + kGemmBN) * kGemmBK * 2;

__device__ __forceinline__ float activate(TcAct act, float v) {
  switch (act) {
    case TcAct::relu: return lf_relu(v);
    case TcAct::gelu: return lf_gelu(v);
    case TcAct::gelu_tanh: return lf_gelu_tanh(v);
    case TcAct::silu: return lf_silu(v);
    default: return v;
  }
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
template <class S, int BM, int kStages>
__global__ void __launch_bounds__(kGemmThreads) gemm_tc_kernel(GemmTcArgs a) {
  constexpr int WM = BM / 2, WN = kGemmBN / 2, MT = WM / 16, NT = WN / 8;
  extern __shared__ __align__(128) lf_u16 smem[];
  lf_u16* const sa = smem;                        // [kStages][BM][kGemmBK]
  lf_u16* const sb = smem + kStages * BM * kGemmBK;   // [kStages][kGemmBN][kGemmBK]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp / 2, wn = warp % 2;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * BM, col0 = static_cast<int64_t>(blockIdx.x) * kGemmBN;
  const auto* x = static_cast<const lf_u16*>(a.x) + row0 * a.ldx;
  const auto* w = static_cast<const lf_u16*>(a.w) + col0 * a.k;
  const int steps = static_cast<int>(a.k / kGemmBK);
  auto load = [&](int s, int slot) {
    const int64_t k0 = static_cast<int64_t>(s) * kGemmBK;
    load_tile<kGemmBK, BM, kGemmThreads>(sa + slot * BM * kGemmBK, x + k0, a.ldx, 0, a.m - row0, tid);
    load_tile<kGemmBK, kGemmBN, kGemmThreads>(sb + slot * kGemmBN * kGemmBK, w + k0, a.k, 0, kGemmBN, tid);
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load(s, s);
    cp_async_commit();
  }
  float acc[MT][NT][4] = {};
  const int a_row = lane & 15, a_half = lane >> 4;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_half = (lane >> 3) & 1;
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    // The slot every warp finished with last step takes step s + kStages - 1.
    if (s + kStages - 1 < steps) load(s + kStages - 1, (s + kStages - 1) % kStages);
    cp_async_commit();
    const lf_u16* ta = sa + (s % kStages) * BM * kGemmBK;
    const lf_u16* tb = sb + (s % kStages) * kGemmBN * kGemmBK;
#pragma unroll
    for (int kk = 0; kk < kGemmBK / 16; ++kk) {
      uint32_t af[MT][4];
#pragma unroll
      for (int i = 0; i < MT; ++i)
        ldmatrix_x4(af[i], smem_address(ta + swizzled<kGemmBK>(wm * WM + i * 16 + a_row, 2 * kk + a_half)));
#pragma unroll
      for (int j = 0; j < NT / 2; ++j) {
        uint32_t bf[4];  // columns j*16 + [0, 8) then + [8, 16), each as two k8 halves
        ldmatrix_x4(bf, smem_address(tb + swizzled<kGemmBK>(wn * WN + j * 16 + b_row, 2 * kk + b_half)));
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          mma<S>(acc[i][2 * j], af[i], bf[0], bf[1]);
          mma<S>(acc[i][2 * j + 1], af[i], bf[2], bf[3]);
        }
      }
    }
  }
  cp_async_wait<0>();
  // Element e of tile (i, j) is row g + 8 (e / 2), column 2t + e % 2: a lane stores column
  // pairs, which never straddle two parts (widths are even).
  const int g = lane / 4, t = lane % 4;
  const auto* bias = static_cast<const lf_u16*>(a.bias);
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int64_t col = col0 + wn * WN + j * 8 + 2 * t;
    const float b0 = bias ? S::to(bias[col]) : 0.0f, b1 = bias ? S::to(bias[col + 1]) : 0.0f;
    const int64_t part = col / a.width;
    lf_u16* const out = static_cast<lf_u16*>(a.out[part]) + (col - part * a.width);
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = row0 + wm * WM + i * 16 + g + 8 * h;
        if (row >= a.m) continue;
        // The linear's value as eager writes it, then the activation of that value.
        float v0 = S::to(S::from(acc[i][j][2 * h] + b0)), v1 = S::to(S::from(acc[i][j][2 * h + 1] + b1));
        if (a.act != TcAct::none) v0 = activate(a.act, v0), v1 = activate(a.act, v1);
        const uint32_t packed = static_cast<uint32_t>(S::from(v0)) | (static_cast<uint32_t>(S::from(v1)) << 16);
        *reinterpret_cast<uint32_t*>(out + row * a.width) = packed;
      }
    }
  }
}
#else
template <class S, int BM, int kStages>
__global__ void gemm_tc_kernel(GemmTcArgs) {
  __trap();  // gemm_tc_supported keeps devices before sm_80 away
}
#endif

}  // namespace livefuse::cuda::tc
