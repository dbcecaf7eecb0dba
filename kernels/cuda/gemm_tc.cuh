#pragma once
// The tensor-core GEMM's device code (gemm_tc.hpp), shared by kernels/cuda/gemm_tc.cu and the
// GEMM lab (tools/gpu/lab/gemm_epilogue.cu, which times its tile shapes against cuBLASLt).
//
// A block of 4 warps computes a BM x 64 tile of the product (warps 2 x 2, each (BM / 2) x 32 as
// m16n8k16 tiles); K runs in steps of 64 through a kStages-deep ring of cp.async copies into
// swizzled shared tiles, the attention kernel's (attention_mma.cuh), so a step's loads are in
// flight while earlier steps compute. Rows past m are zero-filled and never stored. With
// `splits` > 1 the grid's z index takes a range of the K steps (gemm_tc_split.cuh). Sums are
// f32 in a fixed order: one call gives the same bits every time.
//
// Launched with PDL (pdl.hpp): nothing is read before pdl_wait() but, with `early_weights`, the
// weight tiles of the ring's first stages -- a plan's weights, which no kernel of its run writes
// (planner/early_reads.cpp) -- so their DRAM round trip overlaps the kernel before (a row kernel,
// the attention) instead of following it, as a decode step's GEMVs do.
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/gemm_tc.hpp"
#include "kernels/cuda/gemm_tc_split.cuh"
#include "kernels/cuda/pdl.cuh"
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
// The ring's first kStages - 1 steps (one commit group each): with `early_weights` their weight
// tiles before the PDL wait -- those copies join the first group, which the first step waits for
// anyway -- and x after it.
template <int kStages, class LoadW, class LoadX>
__device__ __forceinline__ void start_ring(const GemmTcArgs& a, int steps, LoadW&& load_w, LoadX&& load_x) {
  if (a.early_weights) {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s)
      if (s < steps) load_w(s, s);
  }
  pdl_wait();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) {
      if (!a.early_weights) load_w(s, s);
      load_x(s, s);
    }
    cp_async_commit();
  }
}

// The bias of columns col and col + 1 (zeros without one). Read before the tile's first store:
// loads after stores the compiler cannot prove apart wait for them (0.7-1.3 us a GEMM, session 53).
template <class S>
__device__ __forceinline__ float2 bias_pair(const GemmTcArgs& a, int64_t col) {
  const auto* bias = static_cast<const lf_u16*>(a.bias);
  return bias ? make_float2(S::to(bias[col]), S::to(bias[col + 1])) : make_float2(0.0f, 0.0f);
}

// The product's f32 sums v[0..1] at (row, col) and (row, col + 1) stored as eager writes them:
// the linear's value with its bias b rounded, then the activation of that value rounded. A pair
// never straddles two parts (widths are even).
template <class S>
__device__ __forceinline__ void store_pair(const GemmTcArgs& a, int64_t row, int64_t col, const float* v, float2 b) {
  const float b0 = b.x, b1 = b.y;
  const int64_t part = col / a.width;
  lf_u16* const out = static_cast<lf_u16*>(a.out[part]) + (col - part * a.width);
  float v0 = S::to(S::from(v[0] + b0)), v1 = S::to(S::from(v[1] + b1));
  if (a.act != TcAct::none) v0 = activate(a.act, v0), v1 = activate(a.act, v1);
  *reinterpret_cast<uint32_t*>(out + row * a.width) =
      static_cast<uint32_t>(S::from(v0)) | (static_cast<uint32_t>(S::from(v1)) << 16);
}

template <class S, int BM, int kStages>
__global__ void __launch_bounds__(kGemmThreads) gemm_tc_kernel(GemmTcArgs a) {
  constexpr int WM = BM / 2, WN = kGemmBN / 2, MT = WM / 16, NT = WN / 8;
  extern __shared__ __align__(128) lf_u16 smem[];
  lf_u16* const sa = smem;                        // [kStages][BM][kGemmBK]
  lf_u16* const sb = smem + kStages * BM * kGemmBK;   // [kStages][kGemmBN][kGemmBK]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp / 2, wn = warp % 2;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * BM, col0 = static_cast<int64_t>(blockIdx.x) * kGemmBN;
  const StepRange range = split_steps(static_cast<int>(a.k / kGemmBK), static_cast<int>(blockIdx.z), a.splits);
  const int steps = range.end - range.begin;
  const int64_t k_begin = static_cast<int64_t>(range.begin) * kGemmBK;
  const auto* x = static_cast<const lf_u16*>(a.x) + row0 * a.ldx + k_begin;
  const auto* w = static_cast<const lf_u16*>(a.w) + col0 * a.k + k_begin;
  auto load_x = [&](int s, int slot) {
    load_tile<kGemmBK, BM, kGemmThreads>(sa + slot * BM * kGemmBK, x + static_cast<int64_t>(s) * kGemmBK, a.ldx, 0,
                                         a.m - row0, tid);
  };
  auto load_w = [&](int s, int slot) {
    load_tile<kGemmBK, kGemmBN, kGemmThreads>(sb + slot * kGemmBN * kGemmBK, w + static_cast<int64_t>(s) * kGemmBK,
                                              a.k, 0, kGemmBN, tid);
  };
  start_ring<kStages>(a, steps, load_w, load_x);
  float acc[MT][NT][4] = {};
  const int a_row = lane & 15, a_half = lane >> 4;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_half = (lane >> 3) & 1;
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    // The slot every warp finished with last step takes step s + kStages - 1.
    if (s + kStages - 1 < steps) {
      load_w(s + kStages - 1, (s + kStages - 1) % kStages);
      load_x(s + kStages - 1, (s + kStages - 1) % kStages);
    }
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
  const int g = lane / 4, t = lane % 4;
  auto each_pair = [&](auto&& f) { for_each_pair(acc, row0 + wm * WM, col0 + wn * WN, g, t, a.m, f); };
  if (a.splits > 1 && !sum_splits(a, each_pair)) return;
  float2 b[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) b[j] = bias_pair<S>(a, col0 + wn * WN + j * 8 + 2 * t);
  each_pair([&](int64_t row, int64_t col, const float* v, int j) { store_pair<S>(a, row, col, v, b[j]); });
}
#else
template <class S, int BM, int kStages>
__global__ void gemm_tc_kernel(GemmTcArgs) {
  __trap();  // gemm_tc_supported keeps devices before sm_80 away
}
#endif

}  // namespace livefuse::cuda::tc
