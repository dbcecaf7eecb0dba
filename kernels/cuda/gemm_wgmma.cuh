#pragma once
// A Hopper (sm_90a) tensor-core GEMM for livefuse's linears at few rows (BERT at batch 1: 128),
// in the lab only (tools/gpu/lab/gemm_epilogue.sh): WG warpgroups a block compute a 64 WG x BN
// tile with wgmma -- the product read by the tensor cores straight from shared memory,
// asynchronously, where gemm_tc.cuh's single warp a scheduler stalls on ldmatrix + mma.sync.
// K runs in steps of 64 through a kStages-deep cp.async ring of 128-byte-swizzled tiles (the
// swizzle of attention_mma.cuh is the hardware's 128-byte pattern at 64 columns of 16 bits),
// each tile 1024-byte aligned as the descriptors' swizzle needs. K splits are a thread-block
// cluster whose blocks add their partial tiles through distributed shared memory (no global
// round trip, no counters: the global-memory splits of gemm_tc_split.cuh cost 4-8 us here).
// Arguments, epilogue and PDL rules are gemm_tc_kernel's. On an H100 (bench/RESULTS.md,
// session 53) unsplit it gives cuBLASLt's bits, at best 0.63x its time (Q/K/V), 0.76x (output), 0.81x (FFN1
// + gelu against cuBLASLt and the gelu kernel) and 1.04x (FFN2, 8 splits): not yet worth a
// launch path of its own (which would also need an sm_90a build).
#include <cooperative_groups.h>

#include "kernels/cuda/gemm_tc.cuh"

namespace livefuse::cuda::tc {

namespace cg = cooperative_groups;

// Dynamic shared memory of one block of WG warpgroups: the ring, plus room to align it to 1024
// bytes (a split block's partial tile, 64 WG x (BN + 8) floats, fits in the ring).
template <int WG, int BN, int kStages>
inline constexpr int kWgmmaSmem = kStages * (64 * WG + BN) * kGemmBK * 2 + 1024;

// wgmma is in the arch-specific target only (sm_90a: -arch=sm_90a, or a gencode for compute_90a);
// compiled for plain sm_90 or PTX the kernel is a trap, and gemm_wgmma_built() says so.
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The descriptor of a K-major tile at shared address `addr` (rows of 64 16-bit elements, 8-row
// groups 1024 bytes apart, 128-byte swizzle): start >> 4, leading offset unused (1), stride
// 1024 >> 4, swizzle mode 1 (128 bytes) in bits 62-63.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

// d += A B^T over 16 columns of K: A 64 rows, B BN rows, both K-major in shared memory.
template <class S, int BN>
__device__ __forceinline__ void wgmma_k16(float (&d)[BN / 2], uint64_t da, uint64_t db) {
  if constexpr (BN == 64) {
    if constexpr (S::kDType == DType::f16) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
          : "l"(da), "l"(db), "r"(1));
    } else {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
          : "l"(da), "l"(db), "r"(1));
    }
  } else {
    static_assert(BN == 32);
    if constexpr (S::kDType == DType::f16) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
          : "l"(da), "l"(db), "r"(1));
    } else {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
          : "l"(da), "l"(db), "r"(1));
    }
  }
}

// Row stride (floats) of the partial tile a split block leaves in its shared memory for the
// cluster's sum: 8 more than BN, so a quad's float2 stores fall in distinct banks.
template <int BN>
inline constexpr int kWgmmaPartStride = BN + 8;
// The most K splits a tile's cluster has (the portable cluster size).
inline constexpr int kMaxClusterSplits = 8;

template <class S, int WG, int BN, int kStages, int kInFlight = 0>
__global__ void __launch_bounds__(WG * 128) gemm_wgmma_kernel(GemmTcArgs a) {
  constexpr int BM = 64 * WG, NT = BN / 8, kThreads = WG * 128;
  extern __shared__ __align__(128) lf_u16 smem[];
  // The ring from the first 1024-byte boundary: [kStages][BM][kGemmBK], then [kStages][BN][kGemmBK].
  const uint32_t raw = smem_address(smem), base = (raw + 1023) & ~uint32_t{1023};
  lf_u16* const sa = smem + (base - raw) / 2;
  lf_u16* const sb = sa + kStages * BM * kGemmBK;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;  // warp w: rows 16 w .. 16 w + 15
  // With splits > 1 a tile's splits are one cluster along x: block x = tile * splits + rank.
  const int rank = static_cast<int>(blockIdx.x) % a.splits;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * BM, col0 = static_cast<int64_t>(blockIdx.x / a.splits) * BN;
  const StepRange range = split_steps(static_cast<int>(a.k / kGemmBK), rank, a.splits);
  const int steps = range.end - range.begin;
  const int64_t k_begin = static_cast<int64_t>(range.begin) * kGemmBK;
  const auto* x = static_cast<const lf_u16*>(a.x) + row0 * a.ldx + k_begin;
  const auto* w = static_cast<const lf_u16*>(a.w) + col0 * a.k + k_begin;
  auto load_x = [&](int s, int slot) {
    load_tile<kGemmBK, BM, kThreads>(sa + slot * BM * kGemmBK, x + static_cast<int64_t>(s) * kGemmBK, a.ldx, 0,
                                     a.m - row0, tid);
  };
  auto load_w = [&](int s, int slot) {
    load_tile<kGemmBK, BN, kThreads>(sb + slot * BN * kGemmBK, w + static_cast<int64_t>(s) * kGemmBK, a.k, 0, BN,
                                     tid);
  };
  // kInFlight steps' products may still run while the next step's copies are waited for: the
  // ring then loads kAhead steps ahead, into the slot whose products were waited for.
  constexpr int kAhead = kStages - 1 - kInFlight;
  static_assert(kAhead >= 1);
  start_ring<kAhead + 1>(a, steps, load_w, load_x);
  float d[BN / 2] = {};
  const uint32_t a_rows = 2 * (warp / 4) * 64 * kGemmBK;  // this warpgroup's 64 rows of a stage's x
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kAhead - 1>();
    // cp.async wrote the tiles through the generic proxy; wgmma reads them through the async one.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    // Into the slot of step s - 1 - kInFlight, whose products every warp waited for below.
    if (s + kAhead < steps) {
      load_w(s + kAhead, (s + kAhead) % kStages);
      load_x(s + kAhead, (s + kAhead) % kStages);
    }
    cp_async_commit();
    const uint32_t ta = base + 2 * (s % kStages) * BM * kGemmBK + a_rows;
    const uint32_t tb = base + 2 * (kStages * BM * kGemmBK + (s % kStages) * BN * kGemmBK);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < kGemmBK / 16; ++kk)  // 16 columns of K: 32 bytes along the swizzled rows
      wgmma_k16<S, BN>(d, wgmma_desc(ta + 32 * kk), wgmma_desc(tb + 32 * kk));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kInFlight) : "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  cp_async_wait<0>();
  // d[4 j + e] is column 8 j + 2 t + e % 2 of row 16 w + g + 8 (e / 2) (the mma.sync accumulator
  // layout, one 16-row slab a warp).
  const int g = lane / 4, t = lane % 4;
  if (a.splits == 1) {
    float2 b[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) b[j] = bias_pair<S>(a, col0 + j * 8 + 2 * t);
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = row0 + warp * 16 + g + 8 * h, col = col0 + j * 8 + 2 * t;
        if (row < a.m) store_pair<S>(a, row, col, &d[4 * j + 2 * h], b[j]);
      }
    return;
  }
  // The cluster's sum: each block leaves its partial tile in its shared memory (over the ring,
  // which no copy or product reads any more), then block r sums rows [r BM / splits, (r + 1) BM /
  // splits) of every block's partial in rank order -- the same bits whichever block ran first --
  // and stores them. No global memory, no counters: the blocks meet at two cluster barriers.
  constexpr int PS = kWgmmaPartStride<BN>;
  float* const part = reinterpret_cast<float*>(sa);
  __syncthreads();
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<float2*>(part + (warp * 16 + g + 8 * h) * PS + j * 8 + 2 * t) =
          make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  // Every peer's pair is loaded before any is added (at most kMaxClusterSplits: independent
  // loads in flight together, where a loop over the peers waited for each in turn).
  const int r0 = BM * rank / a.splits, r1 = BM * (rank + 1) / a.splits;
  const float* peers[kMaxClusterSplits];
#pragma unroll
  for (int p = 0; p < kMaxClusterSplits; ++p) peers[p] = p < a.splits ? cluster.map_shared_rank(part, p) : part;
  for (int e = tid; e < (r1 - r0) * (BN / 2); e += kThreads) {
    const int r = r0 + e / (BN / 2), c = 2 * (e % (BN / 2));
    const int64_t row = row0 + r, col = col0 + c;
    const float2 b = bias_pair<S>(a, col);
    float2 q[kMaxClusterSplits];
#pragma unroll
    for (int p = 0; p < kMaxClusterSplits; ++p)
      if (p < a.splits) q[p] = *reinterpret_cast<const float2*>(peers[p] + r * PS + c);
    float v[2] = {0.0f, 0.0f};
#pragma unroll
    for (int p = 0; p < kMaxClusterSplits; ++p)
      if (p < a.splits) v[0] += q[p].x, v[1] += q[p].y;
    if (row < a.m) store_pair<S>(a, row, col, v, b);
  }
  cluster.sync();  // a block's shared memory lives only as long as the block
}
#else
template <class S, int WG, int BN, int kStages, int kInFlight = 0>
__global__ void gemm_wgmma_kernel(GemmTcArgs) {
  __trap();  // never launched from such a build (gemm_tc.cu)
}
#endif

}  // namespace livefuse::cuda::tc
