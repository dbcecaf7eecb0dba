// Few-row products (gemv.hpp). A block is four warps; `kSplit` warps (1, 2 or 4) share one
// weight row, each taking every kSplit-th run of 32 16-byte chunks, each lane keeping kUnroll
// loads in flight. The split is chosen on the host so that short-and-wide weights (GPT-2's
// FFN2: 768 rows of 3072) still have enough loads in flight per SM, while tall ones (a
// vocabulary head) use one warp a row. Sums are float, in a fixed order: the same call gives
// the same bits every time.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/pdl.hpp"
#include "kernels/cuda/warp.cuh"
#include "livefuse/config.hpp"

namespace livefuse::cuda {
namespace {

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

template <class S>
__device__ __forceinline__ void widen(const uint4& v, float* f) {
  using Bits = typename S::Bits;
  constexpr int kN = 16 / sizeof(Bits);
  Bits b[kN];
  static_assert(sizeof(b) == sizeof(uint4));
  __builtin_memcpy(b, &v, sizeof(v));
#pragma unroll
  for (int j = 0; j < kN; ++j) f[j] = S::to(b[j]);
}

template <class S>
__device__ __forceinline__ float rounded(float v) {
  return S::to(S::from(v));
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

// kRows: at most that many rows (a.rows of them are computed).
//
// With a norm (kNorm) each warp first takes its rows' mean and rstd itself -- two passes over
// the row as eager's norm kernels do, from L1/L2, while its first weight loads are in flight --
// and then normalizes each element as it multiplies it, rounded to the dtype as eager's norm
// output is: no barrier and no shared memory. (Normalizing the row into shared memory once a
// block, behind two block-wide reductions, took a GPT-2 QKV GEMV from 4.5 to 8.5 us, H200;
// folding the norm into the sums algebraically was as fast, but skipped that rounding.)
template <class S, int kRows, int kSplit, bool kNorm>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const GemvArgs a) {
  using Bits = typename S::Bits;
  constexpr int kPer = 16 / sizeof(Bits);  // elements in one 16-byte chunk
  constexpr int kRowsPerBlock = kWarps / kSplit;
  __shared__ float partial[kWarps][kRows];

  // The b-th product of a batch. Pointers of its own, never `a` written: a written kernel
  // parameter struct is copied to local memory and every read of it goes there (ptxas: a
  // 296-byte stack frame; the build that did so, with double-buffered weight rounds since
  // taken out too, ran GPT-2's decode GEMVs 2.2x slower: bench/RESULTS.md, session 20).
  const int64_t batch = blockIdx.y;
  const char* x = static_cast<const char*>(a.x) + batch * a.x_bstride * int64_t{sizeof(Bits)};
  const char* w = static_cast<const char*>(a.w) + batch * a.w_bstride * int64_t{sizeof(Bits)};
  Bits* out = static_cast<Bits*>(a.out) + batch * a.o_bstride;
  const int64_t n0 = int64_t{blockIdx.x} * kRowsPerBlock;
  if (a.prefetch && threadIdx.x == 0 && n0 < a.n) {  // this block's weights, while the kernel before ends
    const int64_t es = sizeof(Bits), last = (n0 + kRowsPerBlock < a.n ? n0 + kRowsPerBlock : a.n) - 1;
    if ((last * a.ldw + a.k) * es <= kPrefetchBytes)
      prefetch_l2(w + n0 * a.ldw * es, ((last - n0) * a.ldw + a.k) * es);
  }
  pdl_wait();  // nothing above reads x or writes anything

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int part = warp % kSplit;
  const int64_t n = n0 + warp / kSplit;
  float acc[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = 0.0f;
  const int64_t xstride = a.ldx * int64_t{sizeof(Bits)};
  const int64_t chunks = a.k / kPer;
  const char* wrow = w + n * a.ldw * int64_t{sizeof(Bits)};
  constexpr int64_t kStep = int64_t{32} * kSplit;
  // The epilogue's operands first (the lane that writes row m reads them): loaded after the
  // reductions they were one more dependent round trip at the end of every product.
  float bias = 0.0f, resid = 0.0f;
  if (n < a.n && lane < a.rows && part == 0) {
    if (a.bias) bias = S::to(static_cast<const Bits*>(a.bias)[n]);
    if (a.residual && a.parts == 0) resid = S::to(static_cast<const Bits*>(a.residual)[lane * a.ldo + n]);
  }
  uint4 wv[kUnroll];
  const auto load_weights = [&](int64_t c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + u * kStep;
      if (c < chunks) wv[u] = load_stream(wrow + c * 16);
    }
  };
  int64_t c0 = int64_t{part} * 32 + lane;
  if (n < a.n) load_weights(c0);  // in flight while a norm's statistics are taken

  float mean[kRows], rstd[kRows];
  if constexpr (kNorm) {
    const float inv_n = 1.0f / static_cast<float>(a.k);
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      mean[m] = 0.0f;
      rstd[m] = 0.0f;
      if (m >= a.rows || n >= a.n) continue;
      const char* row = x + m * xstride;
      if (a.norm == GemvNorm::layer)
        mean[m] = warp_sum(row_sum<S>(row, chunks, lane, [](float e) { return e; })) * inv_n;
      const float mu = mean[m];
      const float sq = warp_sum(row_sum<S>(row, chunks, lane, [mu](float e) { return (e - mu) * (e - mu); }));
      rstd[m] = lf_rsqrt(sq * inv_n + a.eps);
    }
  }

  if (n < a.n) {
    for (; c0 < chunks;) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * kStep;
        if (c >= chunks) break;
        float wf[kPer], gf[kPer], bf[kPer];
        widen<S>(wv[u], wf);
        if constexpr (kNorm) {
          if (a.norm_w) widen<S>(__ldg(static_cast<const uint4*>(a.norm_w) + c), gf);
          if (a.norm_b) widen<S>(__ldg(static_cast<const uint4*>(a.norm_b) + c), bf);
        }
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
          if (m >= a.rows) break;
          float xf[kPer];
          widen<S>(__ldg(reinterpret_cast<const uint4*>(x + m * xstride + c * 16)), xf);
#pragma unroll
          for (int j = 0; j < kPer; ++j) {
            float v = xf[j];
            if constexpr (kNorm) {  // eager's layer_norm / rms_norm of the element, as written
              v = (v - mean[m]) * rstd[m];
              if (a.norm_round_first) {  // cast(norm(x), dtype) * w: rounded, scaled, rounded
                v = rounded<S>(v);
                if (a.norm_w) v = __fmul_rn(v, gf[j]);
              } else {
                if (a.norm_w) v *= gf[j];
                if (a.norm_b) v += bf[j];
              }
              v = rounded<S>(v);
            }
            acc[m] = fmaf(wf[j], v, acc[m]);
          }
        }
      }
      c0 += kStep * kUnroll;
      if (c0 < chunks) load_weights(c0);
    }
  }
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = warp_sum(acc[m]);
  if constexpr (kSplit > 1) {
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < kRows; ++m) partial[warp][m] = acc[m];
    }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      float t = 0.0f;
#pragma unroll
      for (int p = 0; p < kSplit; ++p) t += partial[warp + p][m];
      acc[m] = t;
    }
  }
  if (n >= a.n) return;
  // Lane m writes row m: the epilogue, rounding as eager's ops do one after another.
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    if (lane != m || m >= a.rows) continue;
    float y = acc[m];
    if (a.bias) y += bias;
    y = rounded<S>(y);
    if (a.act == GemvAct::relu) y = lf_relu(y);
    else if (a.act == GemvAct::gelu_tanh) y = lf_gelu_tanh(y);
    if (a.parts > 0) {
      int p = 0;
      while (p + 1 < a.parts && n >= a.begin[p + 1]) ++p;
      static_cast<Bits*>(a.part_out[p])[m * (a.begin[p + 1] - a.begin[p]) + n - a.begin[p]] = S::from(y);
      continue;
    }
    const int64_t o = m * a.ldo + n;
    if (a.residual) y = y + resid;
    out[o] = S::from(y);
  }
}

// The streaming form: a fixed grid of blocks, each taking row groups blockIdx.x, + gridDim.x,
// ...; every warp walks its (row, round) sequence as one stream with kDepth 16-byte loads a lane
// always in flight -- the next row's first loads are issued while this row's last are summed,
// so no warp drains its loads at a row's end and no block is launched per row group. A round is
// 32 chunks (one a lane); part p of a row takes rounds p, p + kSplit, ... as the rounds form
// does, so both forms add the same products in the same order for the same split: same bits.
// Every warp of a block runs the same number of steps (rounds past the row predicated off), so
// the split's barrier at each row's end is reached by all of them at the same step.
template <class S, int kRows, int kSplit, bool kNorm, int kDepth>
__global__ void __launch_bounds__(kWarps * 32) gemv_stream_kernel(const GemvArgs a) {
  using Bits = typename S::Bits;
  constexpr int kPer = 16 / sizeof(Bits);
  constexpr int kRowsPerBlock = kWarps / kSplit;
  __shared__ float partial[2][kWarps][kRows];

  const int64_t batch = blockIdx.y;
  const char* x = static_cast<const char*>(a.x) + batch * a.x_bstride * int64_t{sizeof(Bits)};
  const char* w = static_cast<const char*>(a.w) + batch * a.w_bstride * int64_t{sizeof(Bits)};
  Bits* out = static_cast<Bits*>(a.out) + batch * a.o_bstride;
  const int64_t groups = (a.n + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t g0 = blockIdx.x, gstep = gridDim.x;
  if (a.prefetch && threadIdx.x == 0 && g0 < groups) {  // the first group's weights (pdl.cuh)
    const int64_t es = sizeof(Bits), n0 = g0 * kRowsPerBlock;
    const int64_t last = (n0 + kRowsPerBlock < a.n ? n0 + kRowsPerBlock : a.n) - 1;
    if ((last * a.ldw + a.k) * es <= kPrefetchBytes)
      prefetch_l2(w + n0 * a.ldw * es, ((last - n0) * a.ldw + a.k) * es);
  }
  pdl_wait();  // nothing above reads x or writes anything

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int part = warp % kSplit, slot = warp / kSplit;
  const int64_t chunks = a.k / kPer;
  const int rounds = static_cast<int>(((chunks + 31) / 32 + kSplit - 1) / kSplit);  // a row's, per part
  const int nrows = g0 < groups ? static_cast<int>((groups - g0 + gstep - 1) / gstep) : 0;
  const int64_t wld = a.ldw * int64_t{sizeof(Bits)}, xstride = a.ldx * int64_t{sizeof(Bits)};
  const auto row_of = [&](int i) { return (g0 + int64_t{i} * gstep) * kRowsPerBlock + slot; };
  const auto chunk_of = [&](int j) { return (int64_t{part} + int64_t{j} * kSplit) * 32 + lane; };

  // The load cursor runs kDepth steps ahead of the use cursor.
  uint4 ring[kDepth];
  int li = 0, lj = 0;
  const char* lrow = w + row_of(0) * wld;
  bool lvalid = row_of(0) < a.n;
  const auto issue = [&](uint4& dst) {
    if (li >= nrows) return;
    const int64_t c = chunk_of(lj);
    if (lvalid && c < chunks) dst = load_stream(lrow + c * 16);
    if (++lj == rounds) {
      lj = 0;
      ++li;
      lrow = w + row_of(li) * wld;
      lvalid = row_of(li) < a.n;
    }
  };
#pragma unroll
  for (int u = 0; u < kDepth; ++u) issue(ring[u]);

  float mean[kRows], rstd[kRows];
  if constexpr (kNorm) {  // as the rounds form: each warp takes its rows' statistics itself
    const float inv_n = 1.0f / static_cast<float>(a.k);
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      mean[m] = 0.0f;
      rstd[m] = 0.0f;
      if (m >= a.rows || nrows == 0) continue;
      const char* row = x + m * xstride;
      if (a.norm == GemvNorm::layer)
        mean[m] = warp_sum(row_sum<S>(row, chunks, lane, [](float e) { return e; })) * inv_n;
      const float mu = mean[m];
      const float sq = warp_sum(row_sum<S>(row, chunks, lane, [mu](float e) { return (e - mu) * (e - mu); }));
      rstd[m] = lf_rsqrt(sq * inv_n + a.eps);
    }
  }

  float acc[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = 0.0f;
  int ui = 0, uj = 0;
  int64_t un = row_of(0);
  // The epilogue's operands of the row being summed, loaded as its first round is used.
  float bias = 0.0f, resid = 0.0f;
  const auto epilogue_operands = [&] {
    bias = resid = 0.0f;
    if (un < a.n && lane < a.rows && part == 0) {
      if (a.bias) bias = S::to(static_cast<const Bits*>(a.bias)[un]);
      if (a.residual && a.parts == 0) resid = S::to(static_cast<const Bits*>(a.residual)[lane * a.ldo + un]);
    }
  };
  if (nrows > 0) epilogue_operands();
  const int steps = nrows * rounds;
  for (int t0 = 0; t0 < steps; t0 += kDepth) {
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      if (t0 + u >= steps) break;
      const uint4 v = ring[u];
      issue(ring[u]);
      const int64_t c = chunk_of(uj);
      if (un < a.n && c < chunks) {
        float wf[kPer], gf[kPer], bf[kPer];
        widen<S>(v, wf);
        if constexpr (kNorm) {
          if (a.norm_w) widen<S>(__ldg(static_cast<const uint4*>(a.norm_w) + c), gf);
          if (a.norm_b) widen<S>(__ldg(static_cast<const uint4*>(a.norm_b) + c), bf);
        }
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
          if (m >= a.rows) break;
          float xf[kPer];
          widen<S>(__ldg(reinterpret_cast<const uint4*>(x + m * xstride + c * 16)), xf);
#pragma unroll
          for (int j = 0; j < kPer; ++j) {
            float xv = xf[j];
            if constexpr (kNorm) {  // as the rounds form
              xv = (xv - mean[m]) * rstd[m];
              if (a.norm_round_first) {
                xv = rounded<S>(xv);
                if (a.norm_w) xv = __fmul_rn(xv, gf[j]);
              } else {
                if (a.norm_w) xv *= gf[j];
                if (a.norm_b) xv += bf[j];
              }
              xv = rounded<S>(xv);
            }
            acc[m] = fmaf(wf[j], xv, acc[m]);
          }
        }
      }
      if (++uj < rounds) continue;
      // The row's end: its sum, the split's partial sums added by part 0, the epilogue.
#pragma unroll
      for (int m = 0; m < kRows; ++m) acc[m] = warp_sum(acc[m]);
      bool write = part == 0;
      if constexpr (kSplit > 1) {
        const int buf = ui & 1;  // two buffers: row i + 1's writes never meet row i's reads
        if (lane == 0) {
#pragma unroll
          for (int m = 0; m < kRows; ++m) partial[buf][warp][m] = acc[m];
        }
        __syncthreads();
        if (write) {
#pragma unroll
          for (int m = 0; m < kRows; ++m) {
            float s = 0.0f;
#pragma unroll
            for (int p = 0; p < kSplit; ++p) s += partial[buf][warp + p][m];
            acc[m] = s;
          }
        }
      }
      if (write && un < a.n) {
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
          if (lane != m || m >= a.rows) continue;
          float y = acc[m];
          if (a.bias) y += bias;
          y = rounded<S>(y);
          if (a.act == GemvAct::relu) y = lf_relu(y);
          else if (a.act == GemvAct::gelu_tanh) y = lf_gelu_tanh(y);
          if (a.parts > 0) {
            int p = 0;
            while (p + 1 < a.parts && un >= a.begin[p + 1]) ++p;
            static_cast<Bits*>(a.part_out[p])[m * (a.begin[p + 1] - a.begin[p]) + un - a.begin[p]] = S::from(y);
            continue;
          }
          if (a.residual) y = y + resid;
          out[m * a.ldo + un] = S::from(y);
        }
      }
#pragma unroll
      for (int m = 0; m < kRows; ++m) acc[m] = 0.0f;
      uj = 0;
      un = row_of(++ui);
      if (ui < nrows) epilogue_operands();
    }
  }
}

template <class S, int kRows, bool kNorm>
void launch_rows(const GemvArgs& a, int split, cudaStream_t s) {
  const auto grid = [&](int k) {
    return dim3(static_cast<unsigned>((a.n + kWarps / k - 1) / (kWarps / k)), static_cast<unsigned>(a.batch));
  };
  switch (split) {
    case 1:
      launch_pdl("gemv_kernel", gemv_kernel<S, kRows, 1, kNorm>, grid(1), kWarps * 32, 0, s, a);
      break;
    case 2:
      launch_pdl("gemv_kernel", gemv_kernel<S, kRows, 2, kNorm>, grid(2), kWarps * 32, 0, s, a);
      break;
    default:
      launch_pdl("gemv_kernel", gemv_kernel<S, kRows, 4, kNorm>, grid(4), kWarps * 32, 0, s, a);
      break;
  }
}

template <class S, bool kNorm>
void launch_typed(const GemvArgs& a, int split, cudaStream_t s) {
  if (a.rows == 1) return launch_rows<S, 1, kNorm>(a, split, s);
  if (a.rows == 2) return launch_rows<S, 2, kNorm>(a, split, s);
  if (a.rows <= 4) return launch_rows<S, 4, kNorm>(a, split, s);
  return launch_rows<S, 8, kNorm>(a, split, s);
}

}  // namespace

bool gemv_supported(const GemvArgs& a) {
  if (a.dtype != DType::f32 && a.dtype != DType::f16 && a.dtype != DType::bf16) return false;
  if (a.rows < 1 || a.rows > kGemvMaxRows || a.n < 1 || a.k < 1) return false;
  if (a.n > int64_t{1} << 31 || (a.residual && a.act != GemvAct::none)) return false;
  if (a.parts < 0 || a.parts > kGemvMaxParts || (a.parts > 0 && (a.residual || a.begin[a.parts] != a.n)))
    return false;
  const int64_t es = static_cast<int64_t>(dtype_size(a.dtype)), per = 16 / es;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (a.norm != GemvNorm::none &&
      ((a.norm == GemvNorm::rms && a.norm_b) || !aligned(a.norm_w) || !aligned(a.norm_b)))
    return false;
  if (!aligned(a.x) || (a.rows > 1 && a.ldx % per != 0)) return false;
  if (a.batch < 1 || a.batch > 65535) return false;
  if (a.batch > 1 && (a.bias || a.residual || a.norm != GemvNorm::none || a.parts > 0 ||
                      a.x_bstride % per != 0 || a.w_bstride % per != 0))
    return false;
  return a.k % per == 0 && a.ldw % per == 0 && aligned(a.w) && a.ldo >= a.n;
}

namespace {
std::atomic<bool> g_prefetch{true};
std::atomic<int> g_split{0};

// Warps a weight row in the rounds form: more while the grid would leave loads per SM short and
// each lane would otherwise wait on more than one round of kUnroll loads.
int rounds_split(const GemvArgs& a, int64_t runs) {
  int split = 1;
  while (split < kWarps && a.n * split < 8192 && runs > int64_t{kUnroll} * split) split *= 2;
  return split;
}

// In the streaming form a warp keeps kDepth loads in flight whatever its rows, so a row is split
// only while there are too few warps to keep ~16 a SM streaming. A function of the shape and the
// SM count alone: every call of one shape adds in one order (the eager and the fused launch of a
// product give the same bits).
int stream_split(const GemvArgs& a, int64_t runs) {
  const int64_t want = int64_t{current_device_info().sm_count} * 16;
  int split = 1;
  while (split < kWarps && 2 * split <= runs && a.n * split * a.batch < want) split *= 2;
  return split;
}

template <class S, int kRows, int kSplit, bool kNorm>
void launch_stream(const GemvArgs& a, cudaStream_t s) {
  constexpr int kDepth = kRows <= 2 ? 8 : 4;
  constexpr auto kernel = gemv_stream_kernel<S, kRows, kSplit, kNorm, kDepth>;
  // Resident blocks a SM, asked once a kernel (the grid's size, never the sums, depends on it).
  static const int per_sm = [] {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kWarps * 32, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      b = 1;
    }
    return b < 1 ? 1 : b;
  }();
  const int64_t groups = (a.n + kWarps / kSplit - 1) / (kWarps / kSplit);
  const int64_t cap = std::max<int64_t>(1, int64_t{current_device_info().sm_count} * per_sm / a.batch);
  const int64_t waves = (groups + cap - 1) / cap;
  const dim3 grid(static_cast<unsigned>((groups + waves - 1) / waves), static_cast<unsigned>(a.batch));
  launch_pdl("gemv_stream_kernel", kernel, grid, kWarps * 32, 0, s, a);
}

template <class S, int kRows, bool kNorm>
void launch_stream_rows(const GemvArgs& a, int split, cudaStream_t s) {
  if (split == 1) return launch_stream<S, kRows, 1, kNorm>(a, s);
  if (split == 2) return launch_stream<S, kRows, 2, kNorm>(a, s);
  launch_stream<S, kRows, 4, kNorm>(a, s);
}

template <class S, bool kNorm>
void launch_stream_typed(const GemvArgs& a, int split, cudaStream_t s) {
  if (a.rows == 1) return launch_stream_rows<S, 1, kNorm>(a, split, s);
  if (a.rows == 2) return launch_stream_rows<S, 2, kNorm>(a, split, s);
  if (a.rows <= 4) return launch_stream_rows<S, 4, kNorm>(a, split, s);
  launch_stream_rows<S, 8, kNorm>(a, split, s);
}

}  // namespace

void set_gemv_prefetch(bool on) { g_prefetch.store(on, std::memory_order_relaxed); }
void set_gemv_split(int warps) { g_split.store(warps, std::memory_order_relaxed); }

void launch_gemv(const GemvArgs& args, cudaStream_t s) {
  GemvArgs a = args;
  a.prefetch = g_prefetch.load(std::memory_order_relaxed) && pdl_enabled();
  const int64_t chunks = a.k / (16 / static_cast<int64_t>(dtype_size(a.dtype)));
  const bool stream = config().gemv_stream;
  int split = stream ? stream_split(a, (chunks + 31) / 32) : rounds_split(a, chunks / 32);
  if (const int forced = g_split.load(std::memory_order_relaxed); forced > 0) split = forced >= 4 ? 4 : forced >= 2 ? 2 : 1;
  with_float_storage(a.dtype, [&](auto storage) {
    using S = decltype(storage);
    if (stream) {
      if (a.norm != GemvNorm::none) launch_stream_typed<S, true>(a, split, s);
      else launch_stream_typed<S, false>(a, split, s);
    } else if (a.norm != GemvNorm::none) {
      launch_typed<S, true>(a, split, s);
    } else {
      launch_typed<S, false>(a, split, s);
    }
  });
}

}  // namespace livefuse::cuda
