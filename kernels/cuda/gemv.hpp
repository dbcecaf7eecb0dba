#pragma once
// Products with few rows -- a decode step's linears, out[m, n] = x[m, :] . w[n, :] for m < 8 --
// as one bandwidth-bound kernel instead of a cuBLASLt GEMM: each row of the weight is read once,
// 16 bytes a load, by one to four warps, with the bias, activation and residual applied as the
// result is written. cuBLASLt's kernels for M = 1 took 5.5-9 us (with a split-K reduction) for
// GPT-2's 1-5 MB weights (ncu, H200), where the bytes alone take ~1 us.
//
// Rounding follows eager op by op: (product + bias) is rounded to the dtype first, then the
// activation or the residual add is applied to that rounded value and rounded again -- what a
// linear then a gelu_tanh / add kernel write. So a fused epilogue here gives the bits eager
// gives, in f16 and bf16 too (cuBLASLt's epilogue rounds once, which is why a half-precision
// residual is only fused where this kernel runs).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "livefuse/dtype.hpp"

namespace livefuse::cuda {

inline constexpr int kGemvMaxRows = 8;

// The activation applied after the bias (the first three as LtAct's: none, relu, gelu_tanh);
// silu and erf gelu only as a gate's (GemvArgs::gated).
enum class GemvAct : uint8_t { none, relu, gelu_tanh, silu, gelu };
// A normalization of x's rows applied first, inside the kernel: a decode layer's layer_norm /
// rms_norm before its QKV or FFN1 product is then no launch of its own. Each warp takes the
// rows' mean and rstd itself, then normalizes every element as it multiplies it, rounded to
// the dtype as eager's norm output is (gemv.cu says why so).
enum class GemvNorm : uint8_t { none, layer, rms };
// Column ranges of the product written to outputs of their own (a merged sibling GEMM).
inline constexpr int kGemvMaxParts = 8;

// The rotate-half rotary embedding (kernels/rotary_args.hpp) applied as the product is written:
// columns [0, cols) are whole heads of d, and column j of a head is written as
//   y[j] * cos[j] - y[j + d/2] * sin[j]      (j < d/2)
//   y[j] * cos[j] + y[j - d/2] * sin[j]      (j >= d/2),
// y the product (+ bias) rounded as the linear writes it, each product and the sum rounded as
// eager's muls and add round them (the rotary kernel's arithmetic, bit for bit). A head's
// columns j and j + d/2 are two warps' of one block, their sums meeting in shared memory (at
// four warps a row, one column a block: one warp's two weight rows), so every sum is the plain
// kernel's: a decode layer's rotary for q and k is then no launch of its own. One row: cos and
// sin are the row's d values (broadcast over the heads), read through their element strides.
struct GemvRope {
  int64_t cols = 0;  // 0: none
  int64_t d = 0;     // the head size: even, cols a multiple of it
  const void* cos = nullptr;
  const void* sin = nullptr;
  int64_t cos_stride = 0, sin_stride = 0;  // along d, in elements
};

struct GemvArgs {
  DType dtype = DType::f32;  // of x, w, bias, residual and out alike (f32, f16, bf16)
  int rows = 0;              // 1..kGemvMaxRows
  int64_t n = 0, k = 0;
  const void* x = nullptr;  // [rows, k], row stride ldx, unit stride along k
  int64_t ldx = 0;
  const void* w = nullptr;  // [n, k], row stride ldw, unit stride along k (a linear's weight)
  int64_t ldw = 0;
  const void* bias = nullptr;      // [n] dense, or null
  const void* residual = nullptr;  // [rows, n] laid out as out, or null (never with act)
  void* out = nullptr;             // [rows, n], row stride ldo
  int64_t ldo = 0;
  GemvAct act = GemvAct::none;
  GemvNorm norm = GemvNorm::none;  // applied to x first
  const void* norm_w = nullptr;    // [k] dense, 16-byte aligned, or null (no scale)
  const void* norm_b = nullptr;    // [k] dense, 16-byte aligned, or null (layer only)
  float eps = 0;
  // The normalized element is rounded to the dtype before the scale, and again after it: Llama's
  // norm, cast(rms_norm(cast(x, f32)), dtype) * w, two eager ops (the lone norm op scales in f32
  // and rounds once).
  bool norm_round_first = false;
  // parts > 0: out is unused, and column n of the product, begin[p] <= n < begin[p + 1], goes to
  // part_out[p] at [m, n - begin[p]] (dense rows of the part's width): each sibling of a merged
  // GEMM gets its output as eager gives it, without a split kernel. Never with a residual.
  int parts = 0;
  void* part_out[kGemvMaxParts] = {};
  int64_t begin[kGemvMaxParts + 1] = {};
  // gated: a merged pair of siblings of n / 2 rows each (a gated MLP's gate and up), and what is
  // written is act(gate) * up, [rows, n / 2] at out (ldo >= n / 2): gate is the first half's
  // product (+ bias), up the second's -- or the other way round with gate_second -- each
  // rounded as its linear writes it, act's result rounded, then the product rounded, as eager's
  // silu(gate) * up gives it. The siblings' own outputs are not written. Never with a residual
  // or parts.
  bool gated = false, gate_second = false;
  // batch > 1: that many independent products (a decode step's eager q·kᵀ, one per head), the
  // b-th reading x, w and writing out `*_bstride` elements past the first; no bias, residual,
  // norm or parts then.
  int64_t batch = 1, x_bstride = 0, w_bstride = 0, o_bstride = 0;
  // A rotary embedding on the product's first rope.cols columns (Q and K of a merged Q/K/V):
  // one row only, never with a gate, residual, activation or batch. See GemvRope.
  GemvRope rope;
  // Set by launch_gemv: the kernel prefetches its weights into L2 before its PDL wait.
  bool prefetch = false;
  // Set by launch_gemv: with a norm, each thread loads its first chunk of x and of the norm's
  // weight and bias before the row's statistics are taken (set_gemv_norm_early).
  bool norm_early = false;
  // The first weight loads are made before the PDL wait, into registers: only where no kernel
  // that may still be running when this one starts writes the weights (a launch with PDL lets
  // the kernel before run on). Set by the caller that knows, or by an EarlyWeightsScope;
  // launch_gemv clears it without PDL.
  bool early_weights = false;
};

// out[b][m, n] = sum_k x[b][m, k] * B[b][k, n] for m < kGemvColsMaxRows, B row-major with unit
// stride along n (a decode step's eager p·v: probabilities times a V cache of L keys). Each
// thread sums 16 bytes of columns over a share of the keys; the shares are added in shared
// memory. f32 sums, rounded to the dtype once, as a GEMM writes them.
inline constexpr int kGemvColsMaxRows = 2;
inline constexpr int kGemvColsMaxChunks = 64;  // 16-byte column chunks a row of B: n <= 512 f16
struct GemvColsArgs {
  DType dtype = DType::f32;
  int rows = 0;
  int64_t n = 0, k = 0;
  const void* x = nullptr;  // [rows, k], row stride ldx, unit stride along k
  int64_t ldx = 0;
  const void* b = nullptr;  // [k, n], row stride ldb, unit stride along n
  int64_t ldb = 0;
  void* out = nullptr;      // [rows, n], row stride ldo
  int64_t ldo = 0;
  int64_t batch = 1, x_bstride = 0, b_bstride = 0, o_bstride = 0;
};
bool gemv_cols_supported(const GemvColsArgs& a);
void launch_gemv_cols(const GemvColsArgs& a, cudaStream_t s);

// Whether launch_gemv takes `a`: dtype, rows, k a whole number of 16-byte loads, x and w
// 16-byte aligned (pointers and row strides), no activation together with a residual; a norm's
// vectors 16-byte aligned, its rows at most 47 KB (kNormedBytes), and no shift for rms_norm;
// silu / gelu only as a gate's; a gated product's n even; a rotary on one row alone (GemvRope).
bool gemv_supported(const GemvArgs& a);
// Enqueues the product on `s`; `a` must be gemv_supported. Nothing is allocated.
void launch_gemv(const GemvArgs& a, cudaStream_t s);
// Whether a GEMV launched with PDL (LIVEFUSE_PDL) prefetches its weights into L2 first
// (default on); for livefuse-bench-gemv-chain's comparison.
void set_gemv_prefetch(bool on);
// Whether a GEMV with a norm inside loads what its threads normalize first (their chunk of x, of
// the norm's weight and bias) before the statistics, so those loads arrive while the row is
// reduced rather than one memory round trip after it (default on; the same bits either way);
// for livefuse-bench-gemv-chain's comparison.
void set_gemv_norm_early(bool on);
// The report's "cuda.gemv" counters (gemv_host.cpp): GEMVs launched (or recorded), and of them
// those that load their first weights before their PDL wait, those that rotate (GemvRope), and
// those with a norm inside that take two weight rows a warp because one row a warp would need
// more than a wave of blocks (Config::gemv_pair).
struct GemvLaunchCounts {
  uint64_t launches = 0, early_weights = 0, rotary = 0, norm_paired = 0;
};
GemvLaunchCounts gemv_launch_counts();

// While alive (and `on`), GEMVs and tensor-core GEMMs (gemm_tc.hpp) this thread launches with
// PDL load their first weights before their wait (GemvArgs::early_weights,
// GemmTcArgs::early_weights): a plan's step whose weights no kernel that may still be running
// writes (planner/early_reads.hpp, weights_early).
class EarlyWeightsScope {
 public:
  explicit EarlyWeightsScope(bool on);
  ~EarlyWeightsScope();
  EarlyWeightsScope(const EarlyWeightsScope&) = delete;
  EarlyWeightsScope& operator=(const EarlyWeightsScope&) = delete;

 private:
  bool before_;
};
// Whether this thread is inside an EarlyWeightsScope that is on.
bool early_weights_scope();

}  // namespace livefuse::cuda
