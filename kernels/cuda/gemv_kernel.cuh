#pragma once
// The few-row product's kernel (gemv.hpp; launched by gemv.cu, which chooses its instantiation
// and grid). A block is four warps; `kSplit` warps (1, 2 or 4) share one weight row, each taking
// every kSplit-th run of 32 16-byte chunks, each lane keeping kUnroll loads in flight. Sums are
// float, in a fixed order: the same call gives the same bits every time.
#include <cstdint>

#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/warp.cuh"

namespace livefuse::cuda::gemv_device {

constexpr int kWarps = 4;
constexpr int kUnroll = 4;
// Of a weight, the first this many bytes are prefetched into L2 while the kernel before runs
// (pdl.cuh): a third of the H200's L2, so a vocabulary head's or a Llama MLP's prefetch does not
// evict the running kernel's data; the rest streams as before.
constexpr int64_t kPrefetchBytes = int64_t{16} << 20;

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

}  // namespace livefuse::cuda::gemv_device
