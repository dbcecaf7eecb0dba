// Few-row products (gemv.hpp). A block is four warps; `kSplit` warps (1, 2 or 4) share one
// weight row, each taking every kSplit-th run of 32 16-byte chunks, each lane keeping kUnroll
// loads in flight. The split is chosen on the host so that short-and-wide weights (GPT-2's
// FFN2: 768 rows of 3072) still have enough loads in flight per SM, while tall ones (a
// vocabulary head) use one warp a row. Sums are float, in a fixed order: the same call gives
// the same bits every time.
#include <atomic>
#include <cstdint>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/launch_util.hpp"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/pdl.hpp"
#include "kernels/cuda/preload.hpp"
#include "kernels/cuda/warp.cuh"
#include "livefuse/config.hpp"

namespace livefuse::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kUnroll = 4;
std::atomic<uint64_t> g_launches{0}, g_early_launches{0}, g_rotary_launches{0}, g_norm_paired{0};
// Of a weight, the first this many bytes are prefetched into L2 while the kernel before runs
// (pdl.cuh): a third of the H200's L2, so a vocabulary head's or a Llama MLP's prefetch does not
// evict the running kernel's data; the rest streams as before.
constexpr int64_t kPrefetchBytes = int64_t{16} << 20;
// A norm's normalized rows live in shared memory (gemv_kernel): the default limit of 48 KB a
// block less what the kernel's static arrays take (a few hundred bytes: a launch asking for 48 KB
// of dynamic memory beside them failed with "invalid argument", as 8 rows of 3072 did until
// session 54). 8 rows of 2048 16-bit elements fit; larger rows run the norm's own kernel first.
constexpr int64_t kNormedBytes = (int64_t{48} << 10) - 1024;

// 16 bytes of the weight: read once per call, so kept out of L1 (x, re-read by every warp,
// stays there).
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Sums of row m of x over its 16-byte chunks, one lane's share (chunks lane, lane + 32, ...),
// kUnroll loads in flight: f(element) added up. The warp_sum is the caller's.
template <class S, class F>
__device__ __forceinline__ float row_sum(const char* row, int64_t chunks, int lane, F f) {
  constexpr int kPer = 16 / sizeof(typename S::Bits);
  float s = 0.0f;
  for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (c0 + 32 * u < chunks) v[u] = __ldg(reinterpret_cast<const uint4*>(row) + c0 + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (c0 + 32 * u >= chunks) break;
      float e[kPer];
      widen<S>(v[u], e);
#pragma unroll
      for (int j = 0; j < kPer; ++j) s += f(e[j]);
    }
  }
  return s;
}

// kRows: at most that many rows (a.rows of them are computed). kGate: each warp (or kSplit of
// them) takes two weight rows, output column n of a gated product's two halves (GemvArgs::gated).
// kPair: each warp (or kSplit of them) takes two adjacent weight rows, output columns n and n + 1
// -- twice the loads in flight a lane, as a gated product has (Config::gemv_pair). Each column's
// sum has the same lanes, loads and order as with one row a warp: the same bits.
//
// With a norm (kNorm) the block normalizes x's rows once, into shared memory, while its first
// weight loads are in flight: warp m % 4 takes row m's mean and rstd -- two passes over the row
// as eager's norm kernels do -- then every thread normalizes its share of the elements, rounded
// to the dtype as eager's norm output is, and the products read those. (Normalizing each
// element as it was multiplied, in every warp, made the norm's arithmetic once per weight row:
// Llama's gate/up GEMV took 34.9 us a layer with its rms_norm inside against ~26 for the two
// kernels apart, H200, session 24. An earlier shared-memory form took the statistics with two
// block-wide reductions: GPT-2's QKV GEMV went from 4.5 to 8.5 us.) The prologue's latency is
// paid once a block, so with a norm the grid is at most one wave of blocks, each taking several
// groups of rows (launch_split). With a block a group, Llama's Q/K/V with its norm inside was
// 1536 blocks in two waves, 14.3 us in ncu against 6.9 for the product alone (session 25); in
// one wave, one row, a graph of 16 (tools/gpu/lab/gemv_ab.sh, session 26): Q/K/V 10.30 -> 8.44
// us, gate/up 25.26 -> 22.41, the same bits, products without a norm unchanged.
// Output columns one block takes a group: a warp's (or kSplit warps') one, two with kPair. The
// kernel steps through them and launch_split sizes the grid by them.
template <int kSplit, bool kPair>
constexpr int kColumnsPerBlock = kWarps / kSplit * (kPair ? 2 : 1);

// kRope: a rotary on the first a.rope.cols columns (GemvRope), one row. The block's group of
// columns holds whole pairs (j, j + d/2 of a head; kSplit <= 2), each warp's column one half:
// the two sums meet in shared memory after the reductions, so the loads and sums are the plain
// kernel's (its bits). With kPair too (kSplit 4, one column a block) a warp takes both rows
// itself. Only kRope instantiations carry the rotary's code: with it, the plain pair kernel took
// 69-71 registers instead of 64, 7 blocks an SM instead of 8, and Llama's down projection (1024
// blocks of two rows) two waves instead of one -- 16.1 us a launch against 12.5 at 64 registers
// and 13.9 with one row a warp (H100, session 56; tests/build/gemv_registers.py holds the 64).
template <class S, int kRows, int kSplit, bool kNorm, bool kGate, bool kPair = false, bool kRope = false>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const GemvArgs a) {
  using Bits = typename S::Bits;
  constexpr int kPer = 16 / sizeof(Bits);  // elements in one 16-byte chunk
  constexpr int kW = kGate || kPair ? 2 : 1;  // weight rows a warp reads
  constexpr int kRowsPerBlock = kColumnsPerBlock<kSplit, kPair>;
  __shared__ float partial[kWarps][kW][kRows];

  // The b-th product of a batch. Pointers of its own, never `a` written: a written kernel
  // parameter struct is copied to local memory and every read of it goes there (ptxas: a
  // 296-byte stack frame; the build that did so, with double-buffered weight rounds since
  // taken out too, ran GPT-2's decode GEMVs 2.2x slower: bench/RESULTS.md, session 20).
  const int64_t batch = blockIdx.y;
  const char* x = static_cast<const char*>(a.x) + batch * a.x_bstride * int64_t{sizeof(Bits)};
  const char* w = static_cast<const char*>(a.w) + batch * a.w_bstride * int64_t{sizeof(Bits)};
  Bits* out = static_cast<Bits*>(a.out) + batch * a.o_bstride;
  const int64_t cols = kGate ? a.n / 2 : a.n;  // output columns (a gated product's: one half)
  const int64_t n0 = int64_t{blockIdx.x} * kRowsPerBlock;
  if (a.prefetch && threadIdx.x == 0 && n0 < cols) {  // this block's weights, while the kernel before ends
    const int64_t es = sizeof(Bits), last = (n0 + kRowsPerBlock < cols ? n0 + kRowsPerBlock : cols) - 1;
#pragma unroll
    for (int h = 0; h < (kGate ? 2 : 1); ++h) {
      const int64_t first = n0 + h * cols, end = last + h * cols;
      if ((end * a.ldw + a.k) * es <= kPrefetchBytes)
        prefetch_l2(w + first * a.ldw * es, ((end - first) * a.ldw + a.k) * es);
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int part = warp % kSplit;
  const int64_t xstride = a.ldx * int64_t{sizeof(Bits)};
  const int64_t chunks = a.k / kPer;
  constexpr int64_t kStep = int64_t{32} * kSplit;
  // The first group's weight loads, into registers before the wait where the launch says no
  // kernel that may still run writes the weights (GemvArgs::early_weights).
  uint4 wv[kW][kUnroll];
  const auto load_weights = [&](const char* const* wrow, int64_t c0, const bool* has) {
#pragma unroll
    for (int h = 0; h < kW; ++h)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * kStep;
        if (c < chunks && has[h]) wv[h][u] = load_stream(wrow[h] + c * 16);
      }
  };
  // Weight row h of output column n's warp, and whether it exists (a pair's second past the end).
  // Inside a rotary's columns (GemvRope) columns 2i and 2i + 1 are a head's columns j and j + d/2:
  // a kPair warp's two rows, or two warps' one each.
  const auto row_of = [&](int64_t n, int h) {
    if constexpr (kRope)
      if (n < a.rope.cols) {
        const int64_t first = kPair ? n : n & ~int64_t{1};  // the pair's first column
        return first / a.rope.d * a.rope.d + first % a.rope.d / 2 + (kPair ? h : n & 1) * (a.rope.d / 2);
      }
    return kGate ? n + h * cols : n + h;
  };
  const auto has_row = [&](int64_t n, int h) { return !kPair || h == 0 || n + h < cols; };
  const auto rows_of = [&](int64_t n, const char* (&wrow)[kW], bool (&has)[kW]) {
#pragma unroll
    for (int h = 0; h < kW; ++h) {
      has[h] = has_row(n, h);
      wrow[h] = w + (has[h] ? row_of(n, h) : n) * a.ldw * int64_t{sizeof(Bits)};
    }
  };
  // Output column col of row m: into its part's own dense output (GemvArgs::parts), else out.
  const auto store = [&](int m, int64_t col, float y) {
    if (a.parts > 0) {
      int p = 0;
      while (p + 1 < a.parts && col >= a.begin[p + 1]) ++p;
      static_cast<Bits*>(a.part_out[p])[m * (a.begin[p + 1] - a.begin[p]) + col - a.begin[p]] = S::from(y);
    } else {
      out[m * a.ldo + col] = S::from(y);
    }
  };
  // The output column of this warp's first weight row in the group that starts at column g0.
  const auto warp_col = [&](int64_t g0) { return g0 + warp / kSplit * (kPair ? 2 : 1); };
  const bool preloaded = a.early_weights && warp_col(n0) < cols;
  if (preloaded) {
    const char* wrow[kW];
    bool has[kW];
    rows_of(warp_col(n0), wrow, has);
    load_weights(wrow, int64_t{part} * 32 + lane, has);
  }
  pdl_wait();  // nothing above reads x, memory a kernel still running may write, or writes
  // kNorm: x's rows normalized, dense [a.rows, a.k] (gemv_supported bounds its size).
  extern __shared__ __align__(16) unsigned char normed[];
  // Row m of what the products read: x's, or its normalized copy.
  const auto x_chunk = [&](int m, int64_t c) {
    if constexpr (kNorm) return reinterpret_cast<const uint4*>(normed)[m * chunks + c];
    else return __ldg(reinterpret_cast<const uint4*>(x + m * xstride + c * 16));
  };
  // The block's groups of kRowsPerBlock weight rows: blockIdx.x, then every gridDim.x-th. With a
  // norm the grid is at most a wave of blocks (launch_split), so the norm's prologue is paid once
  // a block, not once a group. Without one the grid has a block a group and the loop is one pass
  // known at compile time (looping there cost 2-4% at four rows, H200, session 26).
  bool first_group = true;
  for (int64_t g0 = n0; g0 < cols; g0 = kNorm ? g0 + int64_t{gridDim.x} * kRowsPerBlock : cols, first_group = false) {
    const int64_t n = warp_col(g0);
    float acc[kW][kRows];
#pragma unroll
    for (int h = 0; h < kW; ++h)
#pragma unroll
      for (int m = 0; m < kRows; ++m) acc[h][m] = 0.0f;
    const char* wrow[kW];
    bool has[kW];
    rows_of(n, wrow, has);
    // The epilogue's operands first (the lane that writes row m reads them): loaded after the
    // reductions they were one more dependent round trip at the end of every product.
    float bias[kW] = {}, resid[kW] = {};
    float rope_cos[kW] = {}, rope_sin[kW] = {};  // at the rows' columns of their head
    const bool rotated = kRope && n < a.rope.cols;
    if (n < cols && lane < a.rows && part == 0) {
#pragma unroll
      for (int h = 0; h < kW; ++h) {
        if (!has[h]) continue;
        if (a.bias) bias[h] = S::to(static_cast<const Bits*>(a.bias)[row_of(n, h)]);
        if ((h == 0 || kPair) && a.residual && a.parts == 0)
          resid[h] = S::to(static_cast<const Bits*>(a.residual)[lane * a.ldo + n + h]);
        if (rotated) {
          const GemvRope& r = a.rope;
          const int64_t j = row_of(n, h) % r.d;  // the column within its head
          rope_cos[h] = S::to(static_cast<const Bits*>(r.cos)[j * r.cos_stride]);
          rope_sin[h] = S::to(static_cast<const Bits*>(r.sin)[j * r.sin_stride]);
        }
      }
    }
    int64_t c0 = int64_t{part} * 32 + lane;
    // In flight while a norm's rows are normalized (the first group's since before the wait).
    if (n < cols && !(first_group && preloaded)) load_weights(wrow, c0, has);

    if (kNorm && first_group) {
      // This thread's first chunk to normalize, and the norm's weight and bias for it, asked for
      // before the statistics: they arrive while the row is reduced, not one round trip after
      // (the generated row kernels' early loads; a decode step's norm is this chain and little
      // else). GPT-2's rows (96 chunks of 768) are all of it; a longer row's later chunks load
      // in the loop below as before. 16-bit rows only: f32 ones at 4 rows spilled with them.
      const int64_t i0 = threadIdx.x;
      const bool early = sizeof(Bits) == 2 && a.norm_early && i0 < a.rows * chunks;
      uint4 x_early{}, g_early{}, b_early{};
      if (early) {
        const int64_t m = i0 / chunks, c = i0 % chunks;
        x_early = __ldg(reinterpret_cast<const uint4*>(x + m * xstride) + c);
        if (a.norm_w) g_early = __ldg(static_cast<const uint4*>(a.norm_w) + c);
        if (a.norm_b) b_early = __ldg(static_cast<const uint4*>(a.norm_b) + c);
      }
      __shared__ float stats[kRows][2];
      const float inv_n = 1.0f / static_cast<float>(a.k);
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        if (m >= a.rows || m % kWarps != warp) continue;
        const char* row = x + m * xstride;
        float mean = 0.0f;
        if (a.norm == GemvNorm::layer)
          mean = warp_sum(row_sum<S>(row, chunks, lane, [](float e) { return e; })) * inv_n;
        const float sq = warp_sum(row_sum<S>(row, chunks, lane, [mean](float e) { return (e - mean) * (e - mean); }));
        if (lane == 0) {
          stats[m][0] = mean;
          stats[m][1] = lf_rsqrt(sq * inv_n + a.eps);
        }
      }
      __syncthreads();
      for (int64_t i = threadIdx.x; i < a.rows * chunks; i += kWarps * 32) {
        const int64_t m = i / chunks, c = i % chunks;
        const float mean = stats[m][0], rstd = stats[m][1];
        float v[kPer], gf[kPer], bf[kPer];
        const bool pre = early && i == i0;
        widen<S>(pre ? x_early : __ldg(reinterpret_cast<const uint4*>(x + m * xstride) + c), v);
        if (a.norm_w) widen<S>(pre ? g_early : __ldg(static_cast<const uint4*>(a.norm_w) + c), gf);
        if (a.norm_b) widen<S>(pre ? b_early : __ldg(static_cast<const uint4*>(a.norm_b) + c), bf);
        Bits o[kPer];
#pragma unroll
        for (int j = 0; j < kPer; ++j) {  // eager's layer_norm / rms_norm of the element, as written
          float e = (v[j] - mean) * rstd;
          if (a.norm_round_first) {  // cast(norm(x), dtype) * w: rounded, scaled, rounded
            e = rounded<S>(e);
            if (a.norm_w) e = __fmul_rn(e, gf[j]);
          } else {
            if (a.norm_w) e *= gf[j];
            if (a.norm_b) e += bf[j];
          }
          o[j] = S::from(e);
        }
        __builtin_memcpy(normed + i * 16, o, 16);
      }
      __syncthreads();
    }

    if (n < cols) {
      for (; c0 < chunks;) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t c = c0 + u * kStep;
          if (c >= chunks) break;
          float wf[kW][kPer];
#pragma unroll
          for (int h = 0; h < kW; ++h) widen<S>(wv[h][u], wf[h]);
#pragma unroll
          for (int m = 0; m < kRows; ++m) {
            if (m >= a.rows) break;
            float xf[kPer];
            widen<S>(x_chunk(m, c), xf);
#pragma unroll
            for (int j = 0; j < kPer; ++j)
#pragma unroll
              for (int h = 0; h < kW; ++h) acc[h][m] = fmaf(wf[h][j], xf[j], acc[h][m]);
          }
        }
        c0 += kStep * kUnroll;
        if (c0 < chunks) load_weights(wrow, c0, has);
      }
    }
#pragma unroll
    for (int h = 0; h < kW; ++h)
#pragma unroll
      for (int m = 0; m < kRows; ++m) acc[h][m] = warp_sum(acc[h][m]);
    if constexpr (kSplit > 1) {
      if (lane == 0) {
#pragma unroll
        for (int h = 0; h < kW; ++h)
#pragma unroll
          for (int m = 0; m < kRows; ++m) partial[warp][h][m] = acc[h][m];
      }
      __syncthreads();
      if (part == 0) {
#pragma unroll
        for (int h = 0; h < kW; ++h)
#pragma unroll
          for (int m = 0; m < kRows; ++m) {
            float t = 0.0f;
#pragma unroll
            for (int p = 0; p < kSplit; ++p) t += partial[warp + p][h][m];
            acc[h][m] = t;
          }
      }
      if constexpr (kNorm) __syncthreads();  // `partial` is written again for the next group
    }
    if constexpr (kRope && !kPair) {
      // A rotated column's partner is the next or previous column of the group, another warp's:
      // each writes its rounded sum (+ bias) here, then rotates with the other's (rotary.cu's
      // arithmetic: each product rounded, then the sum). One row (gemv_supported).
      __shared__ float rope_y[kWarps / kSplit];
      const bool mine = part == 0 && lane == 0 && n < cols;
      float y = 0.0f;
      if (mine) {
        y = acc[0][0];
        if (a.bias) y += bias[0];
        y = rounded<S>(y);
        rope_y[warp / kSplit] = y;
      }
      __syncthreads();
      const float other = rope_y[warp / kSplit ^ 1];
      if constexpr (kNorm) __syncthreads();  // rope_y is written again for the next group
      if (rotated) {
        if (mine) {
          store(0, row_of(n, 0), rotate_half_element<S>(y, other, rope_cos[0], rope_sin[0], (n & 1) == 0));
        }
        continue;
      }
    }
    if (part != 0 || n >= cols) continue;
    // Lane m writes row m: the epilogue, rounding as eager's ops do one after another.
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      if (lane != m || m >= a.rows) continue;
      if constexpr (kGate) {
        // Each half as its linear writes it, then act(gate) as the activation's kernel, then the
        // product as mul's.
        const float first = rounded<S>(acc[0][m] + bias[0]), second = rounded<S>(acc[kW - 1][m] + bias[kW - 1]);
        float g = a.gate_second ? second : first;
        const float up = a.gate_second ? first : second;
        if (a.act == GemvAct::silu) g = lf_silu(g);
        else if (a.act == GemvAct::gelu) g = lf_gelu(g);
        else if (a.act == GemvAct::gelu_tanh) g = lf_gelu_tanh(g);
        else if (a.act == GemvAct::relu) g = lf_relu(g);
        out[m * a.ldo + n] = S::from(rounded<S>(g) * up);
      } else {
        float ys[kW];
#pragma unroll
        for (int h = 0; h < kW; ++h) {
          float y = acc[h][m];
          if (a.bias) y += bias[h];
          y = rounded<S>(y);
          if (a.act == GemvAct::relu) y = lf_relu(y);
          else if (a.act == GemvAct::gelu_tanh) y = lf_gelu_tanh(y);
          ys[h] = y;
        }
        if (kPair && rotated) {  // rotary.cu's arithmetic
          const float lo = ys[0], hi = ys[kW - 1];
          ys[0] = rotate_half_element<S>(lo, hi, rope_cos[0], rope_sin[0], true);
          ys[kW - 1] = rotate_half_element<S>(hi, lo, rope_cos[kW - 1], rope_sin[kW - 1], false);
        }
#pragma unroll
        for (int h = 0; h < kW; ++h) {
          if (!has[h]) continue;
          float y = ys[h];
          if (a.residual && a.parts == 0) y = y + resid[h];
          store(m, row_of(n, h), y);
        }
      }
    }
  }
}

// Blocks of `kernel` resident at once on the current device, `smem` dynamic bytes each. Cached
// by the kernel's instantiation and smem in 128-byte steps: the query is not free, and a norm's
// GEMV is launched once a layer a decode step.
template <auto kKernel>
int64_t wave_blocks(size_t smem) {
  static std::atomic<int> per_sm[kNormedBytes / 128 + 1];
  std::atomic<int>& slot = per_sm[(smem + 127) / 128];
  int n = slot.load(std::memory_order_relaxed);
  if (n == 0) {
    LF_CUDA_CALL(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel, kWarps * 32, smem));
    n = n > 0 ? n : 1;
    slot.store(n, std::memory_order_relaxed);
  }
  return int64_t{n} * current_device_info().sm_count;
}

template <class S, int kRows, int kSplit, bool kNorm, bool kGate, bool kPair = false, bool kRope = false>
void launch_split(const GemvArgs& a, cudaStream_t s) {
  constexpr auto kKernel = gemv_kernel<S, kRows, kSplit, kNorm, kGate, kPair, kRope>;
  constexpr int64_t kGroup = kColumnsPerBlock<kSplit, kPair>;
  const int64_t cols = kGate ? a.n / 2 : a.n;
  const size_t smem = kNorm ? static_cast<size_t>(a.rows * a.k) * sizeof(typename S::Bits) : 0;
  int64_t blocks = (cols + kGroup - 1) / kGroup;  // a group of rows each
  if constexpr (kNorm) {  // at most one wave, the groups spread evenly over it (gemv_kernel)
    const int64_t wave = wave_blocks<kKernel>(smem);
    const int64_t rounds = (blocks + wave - 1) / wave;
    blocks = (blocks + rounds - 1) / rounds;
  }
  launch_pdl("gemv_kernel", kKernel, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(a.batch)),
             kWarps * 32, smem, s, a);
}

// Whether a one-row norm GEMV with one weight row a warp needs more groups of rows than one wave
// of its blocks holds, so that blocks would take two or more groups one after another (each
// group's weights a DRAM round trip after the last group's sums). With two rows a warp the
// block takes twice the columns and every group's weights are in flight at once, its first
// group's before the PDL wait: GPT-2's FFN1 (3072 x 768, layer_norm inside) is 768 groups of 4
// columns against a wave of 660 blocks of 96 registers on 132 SMs (Config::gemv_pair).
template <class S, int kSplit>
bool norm_groups_past_wave(const GemvArgs& a) {
  const int64_t groups = (a.n + kColumnsPerBlock<kSplit, false> - 1) / kColumnsPerBlock<kSplit, false>;
  const size_t smem = static_cast<size_t>(a.rows * a.k) * sizeof(typename S::Bits);
  return groups > wave_blocks<gemv_kernel<S, 1, kSplit, true, false>>(smem);
}

// `pair`: two weight rows a warp, taken by one-row products without a gate only (the
// instantiations stay few).
template <class S, int kRows, bool kNorm, bool kGate>
void launch_rows(const GemvArgs& a, int split, bool pair, cudaStream_t s) {
  if constexpr (kRows == 1 && !kGate) {
    if (a.rope.cols > 0) {  // a rotary's pairs over two warps of a block, or (4 warps a row) one warp
      switch (split) {
        case 1: return launch_split<S, 1, 1, kNorm, false, false, true>(a, s);
        case 2: return launch_split<S, 1, 2, kNorm, false, false, true>(a, s);
        default: return launch_split<S, 1, 4, kNorm, false, true, true>(a, s);
      }
    }
    if constexpr (kNorm)
      if (!pair && config().gemv_pair == 1 && split <= 2 &&
          (split == 1 ? norm_groups_past_wave<S, 1>(a) : norm_groups_past_wave<S, 2>(a))) {
        pair = true;
        g_norm_paired.fetch_add(1, std::memory_order_relaxed);
      }
    if (pair) {  // with a norm: past a wave of one row a warp (above), or under LIVEFUSE_GEMV_PAIR=2
      switch (split) {
        case 1: return launch_split<S, 1, 1, kNorm, false, true>(a, s);
        case 2: return launch_split<S, 1, 2, kNorm, false, true>(a, s);
        default: return launch_split<S, 1, 4, kNorm, false, true>(a, s);
      }
    }
  }
  switch (split) {
    case 1: return launch_split<S, kRows, 1, kNorm, kGate>(a, s);
    case 2: return launch_split<S, kRows, 2, kNorm, kGate>(a, s);
    default: return launch_split<S, kRows, 4, kNorm, kGate>(a, s);
  }
}

template <class S, int kRows>
void load_rows() {
  const auto split = [](auto k) {
    constexpr int kSplit = decltype(k)::value;
    load_kernel(gemv_kernel<S, kRows, kSplit, false, false>);
    load_kernel(gemv_kernel<S, kRows, kSplit, true, false>);
    load_kernel(gemv_kernel<S, kRows, kSplit, false, true>);
    load_kernel(gemv_kernel<S, kRows, kSplit, true, true>);
  };
  split(std::integral_constant<int, 1>{});
  split(std::integral_constant<int, 2>{});
  split(std::integral_constant<int, 4>{});
  if constexpr (kRows == 1) {
    for (const auto k : {gemv_kernel<S, 1, 1, false, false, true>, gemv_kernel<S, 1, 2, false, false, true>,
                         gemv_kernel<S, 1, 4, false, false, true>, gemv_kernel<S, 1, 1, true, false, true>,
                         gemv_kernel<S, 1, 2, true, false, true>, gemv_kernel<S, 1, 4, true, false, true>})
      load_kernel(k);
    for (const auto k :  // the rotary's (kRope)
         {gemv_kernel<S, 1, 1, false, false, false, true>, gemv_kernel<S, 1, 2, false, false, false, true>,
          gemv_kernel<S, 1, 4, false, false, true, true>, gemv_kernel<S, 1, 1, true, false, false, true>,
          gemv_kernel<S, 1, 2, true, false, false, true>, gemv_kernel<S, 1, 4, true, false, true, true>})
      load_kernel(k);
  }
}

template <class S, bool kNorm, bool kGate>
void launch_typed(const GemvArgs& a, int split, bool pair, cudaStream_t s) {
  if (a.rows == 1) return launch_rows<S, 1, kNorm, kGate>(a, split, pair, s);
  if (a.rows == 2) return launch_rows<S, 2, kNorm, kGate>(a, split, pair, s);
  if (a.rows <= 4) return launch_rows<S, 4, kNorm, kGate>(a, split, pair, s);
  return launch_rows<S, 8, kNorm, kGate>(a, split, pair, s);
}

}  // namespace

bool gemv_supported(const GemvArgs& a) {
  if (a.dtype != DType::f32 && a.dtype != DType::f16 && a.dtype != DType::bf16) return false;
  if (a.rows < 1 || a.rows > kGemvMaxRows || a.n < 1 || a.k < 1) return false;
  if (a.n > int64_t{1} << 31 || (a.residual && a.act != GemvAct::none)) return false;
  // silu / erf gelu only gate; a gated pair has two halves, and writes neither parts nor a sum
  if ((a.act == GemvAct::silu || a.act == GemvAct::gelu) && !a.gated) return false;
  if (a.gated && (a.n % 2 != 0 || a.residual || a.parts > 0 || a.batch > 1 || a.ldo < a.n / 2)) return false;
  if (a.parts < 0 || a.parts > kGemvMaxParts || (a.parts > 0 && (a.residual || a.begin[a.parts] != a.n)))
    return false;
  const int64_t es = static_cast<int64_t>(dtype_size(a.dtype)), per = 16 / es;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (a.norm != GemvNorm::none &&
      ((a.norm == GemvNorm::rms && a.norm_b) || !aligned(a.norm_w) || !aligned(a.norm_b) ||
       a.rows * a.k * es > kNormedBytes))
    return false;
  if (!aligned(a.x) || (a.rows > 1 && a.ldx % per != 0)) return false;
  if (a.batch < 1 || a.batch > 65535) return false;
  if (a.batch > 1 && (a.bias || a.residual || a.norm != GemvNorm::none || a.parts > 0 ||
                      a.x_bstride % per != 0 || a.w_bstride % per != 0))
    return false;
  if (const GemvRope& r = a.rope; r.cols != 0 &&
      (r.cols < 0 || r.d < 2 || r.d % 2 != 0 || r.cols % r.d != 0 || r.cols > a.n || !r.cos || !r.sin ||
       a.rows != 1 || a.gated || a.residual || a.act != GemvAct::none || a.batch != 1))
    return false;
  return a.k % per == 0 && a.ldw % per == 0 && aligned(a.w) && (a.gated || a.ldo >= a.n);
}

namespace {
std::atomic<bool> g_prefetch{true};
std::atomic<bool> g_norm_early{true};
thread_local bool t_early_weights = false;  // EarlyWeightsScope
}  // namespace

GemvLaunchCounts gemv_launch_counts() {
  return {g_launches.load(std::memory_order_relaxed), g_early_launches.load(std::memory_order_relaxed),
          g_rotary_launches.load(std::memory_order_relaxed), g_norm_paired.load(std::memory_order_relaxed)};
}

EarlyWeightsScope::EarlyWeightsScope(bool on) : before_(t_early_weights) { t_early_weights = on; }
EarlyWeightsScope::~EarlyWeightsScope() { t_early_weights = before_; }
bool early_weights_scope() { return t_early_weights; }

void set_gemv_prefetch(bool on) { g_prefetch.store(on, std::memory_order_relaxed); }
void set_gemv_norm_early(bool on) { g_norm_early.store(on, std::memory_order_relaxed); }

void preload_gemv_kernels(DType dt) {
  with_float_storage(dt, [](auto storage) {
    using S = decltype(storage);
    load_rows<S, 1>();
    load_rows<S, 2>();
    load_rows<S, 4>();
    load_rows<S, 8>();
  });
}

void launch_gemv(const GemvArgs& args, cudaStream_t s) {
  GemvArgs a = args;
  a.prefetch = g_prefetch.load(std::memory_order_relaxed) && pdl_enabled();
  a.norm_early = g_norm_early.load(std::memory_order_relaxed);
  a.early_weights = (a.early_weights || t_early_weights) && pdl_enabled();
  g_launches.fetch_add(1, std::memory_order_relaxed);
  if (a.early_weights) g_early_launches.fetch_add(1, std::memory_order_relaxed);
  if (a.rope.cols > 0) g_rotary_launches.fetch_add(1, std::memory_order_relaxed);
  // Warps a weight row: more while the grid would leave loads per SM short and each lane would
  // otherwise wait on more than one round of kUnroll loads. (A gated product's warp reads two
  // rows: its warps are counted by the rows they read.)
  const int64_t runs = a.k / (16 / static_cast<int64_t>(dtype_size(a.dtype))) / 32;
  int split = 1;
  while (split < kWarps && a.n * split < 8192 && runs > int64_t{kUnroll} * split) split *= 2;
  // Two weight rows a warp (Config::gemv_pair): by default where each lane reads at least 8
  // chunks of its share of a row (Llama's down projection gained 11%; shorter rows lost 4-5%).
  const int pair_mode = config().gemv_pair;
  const bool wide = pair_mode == 2 || (pair_mode == 1 && runs >= int64_t{8} * split);
  // A norm's product also pairs its rows where one row a warp takes more than a wave, and a
  // rotary's pairs are its heads' column pairs (both: launch_rows).
  const bool pair = (a.norm == GemvNorm::none && wide) ||
                    (a.norm != GemvNorm::none && pair_mode == 2 && a.rows == 1 && !a.gated);
  with_float_storage(a.dtype, [&](auto storage) {
    using S = decltype(storage);
    const bool norm = a.norm != GemvNorm::none;
    if (a.gated) norm ? launch_typed<S, true, true>(a, split, pair, s) : launch_typed<S, false, true>(a, split, pair, s);
    else norm ? launch_typed<S, true, false>(a, split, pair, s) : launch_typed<S, false, false>(a, split, pair, s);
  });
}

}  // namespace livefuse::cuda
