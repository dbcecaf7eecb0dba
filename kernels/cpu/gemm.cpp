// Blocked GEMM driver. The output is cut into (batch, mc x nc) tiles, one TBB task each. A task
// accumulates its tile in an f32 scratch block while K streams through in KC slices: for each
// slice it packs A[MC x KC] into kMR-row panels and B[KC x NC] into kNR-column panels (reading
// any strides and dtype, zero-padding the edges) and runs the micro-kernel over the panel grid.
// Then the epilogue adds the bias and converts into the dense output. Padding never leaks:
// a padded row or column only touches its own padded outputs.
//
// Tile sizes: a KC x kNR B panel (16 KiB) and an A panel (4 KiB) stay in a 32 KiB L1 while the A
// panels stream past (at KC = 256 the B panel alone filled a Zen 3 core's L1: its kernel ran at
// 69 GFLOP/s instead of 81-89), and the packed A block (at most MC x KC, 64 KiB) stays in L2;
// gemm_tiling() cuts smaller, even tiles.
//
// A B operand that repeats across calls (a weight) is packed whole once, block by block in the
// layout the tiles read, and kept (gemm_pack_cache.hpp); tiles then read their slice of it.
#include "kernels/cpu/gemm.hpp"

#include <vector>

#include "kernels/cpu/gemm_microkernel.hpp"
#include "kernels/cpu/gemm_pack_cache.hpp"

namespace livefuse::cpu {
namespace {

constexpr int64_t kMC = 128, kNC = 256, kKC = 128;

int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

}  // namespace

// The output's tiles: at most kMC x kNC, cut evenly (a 128-row product in 120-row tiles was one
// tile of 120 rows and one of 8: one core did 94% of it), and, when the product is worth
// spreading, at least two per thread -- M is cut first (B's panels come packed from the cache, A's
// are packed per tile, so an N cut packs A again), down to 4 panels, then N down to 2 panels.
// The cuts asked for grow by one each round even when the even tiles they give do not: 300 rows
// asked in 9 pieces are 8 tiles of 40 rows, as in 8 pieces, and a loop that asked for "one more
// than there are" never ended (a 300-row product on a 16-thread machine hung).
GemmTiling gemm_tiling(int64_t M, int64_t N, int64_t batch, int64_t work, int workers) {
  GemmTiling t;
  int64_t ask_m = ceil_div(M, kMC), ask_n = ceil_div(N, kNC);
  auto cut = [&] {
    t.mc = round_up(ceil_div(M, ask_m), kMR), t.nc = round_up(ceil_div(N, ask_n), kNR);
    t.mt = ceil_div(M, t.mc), t.nt = ceil_div(N, t.nc);
  };
  cut();
  if (work < kParallelWork) return t;
  const int64_t want = 2 * static_cast<int64_t>(workers);
  while (batch * t.mt * t.nt < want) {
    if (t.mc > 4 * kMR) ++ask_m;
    else if (t.nc > 2 * kNR) ++ask_n;
    else break;
    cut();
  }
  return t;
}

namespace {

// dst: ceil(mc / kMR) panels, each kc x kMR (row r of the panel at dst[k * kMR + r]).
template <DType D>
void pack_a(const GemmOperand& a, int64_t off, int64_t m0, int64_t mc, int64_t k0, int64_t kc,
            float* dst) {
  using T = typename DT<D>::T;
  const T* base = reinterpret_cast<const T*>(a.base) + off;
  for (int64_t p = 0; p < mc; p += kMR) {
    float* d = dst + p * kc;
    const int rows = static_cast<int>(std::min<int64_t>(kMR, mc - p));
    if (a.cs == 1 || a.rs != 1) {  // walk along k for each row
      for (int r = 0; r < kMR; ++r) {
        if (r >= rows) {
          for (int64_t k = 0; k < kc; ++k) d[k * kMR + r] = 0.0f;
          continue;
        }
        const T* src = base + (m0 + p + r) * a.rs + k0 * a.cs;
        for (int64_t k = 0; k < kc; ++k) d[k * kMR + r] = load_as<D, float>(src + k * a.cs);
      }
    } else {  // A is column-major (a transposed view): walk along m for each k
      for (int64_t k = 0; k < kc; ++k) {
        const T* src = base + (m0 + p) + (k0 + k) * a.cs;
        for (int r = 0; r < kMR; ++r) d[k * kMR + r] = r < rows ? load_as<D, float>(src + r) : 0.0f;
      }
    }
  }
}

// dst: ceil(nc / kNR) panels, each kc x kNR (column j of the panel at dst[k * kNR + j]).
template <DType D>
void pack_b(const GemmOperand& b, int64_t off, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
            float* dst) {
  using T = typename DT<D>::T;
  const T* base = reinterpret_cast<const T*>(b.base) + off;
  for (int64_t q = 0; q < nc; q += kNR) {
    float* d = dst + q * kc;
    const int cols = static_cast<int>(std::min<int64_t>(kNR, nc - q));
    if (b.cs == 1) {  // rows of B are contiguous along n
      for (int64_t k = 0; k < kc; ++k) {
        const T* src = base + (k0 + k) * b.rs + (n0 + q);
        for (int j = 0; j < kNR; ++j) d[k * kNR + j] = j < cols ? load_as<D, float>(src + j) : 0.0f;
      }
    } else {  // e.g. linear's W[out, in]: walk along k for each column
      for (int j = 0; j < kNR; ++j) {
        if (j >= cols) {
          for (int64_t k = 0; k < kc; ++k) d[k * kNR + j] = 0.0f;
          continue;
        }
        const T* src = base + k0 * b.rs + (n0 + q + j) * b.cs;
        for (int64_t k = 0; k < kc; ++k) d[k * kNR + j] = load_as<D, float>(src + k * b.rs);
      }
    }
  }
}

// The problem's tail on n results that go to output element `off` onwards.
void apply_tail(const GemmProblem& p, int64_t off, int64_t n, float* row) {
  if (p.act) p.act(row, n, p.act_s0, p.act_s1);
  if (!p.residual) return;
  float r[kNC];
  for (int64_t j0 = 0; j0 < n; j0 += kNC) {
    const int64_t m = std::min(kNC, n - j0);
    load_floats(p.residual, p.residual_dtype, off + j0, m, 1, r);
    for (int64_t j = 0; j < m; ++j) row[j0 + j] += r[j];
  }
}

// n results of output row `r` (batch * M + m) from column n0 on: into `out`, or the parts of
// the split that the columns fall in.
void store_row(const GemmProblem& p, int64_t r, int64_t n0, int64_t n, const float* row) {
  if (p.split.parts == 0) return store_floats(p.out, p.out_dtype, r * p.N + n0, n, row);
  for (int i = 0; i < p.split.parts; ++i) {
    const int64_t lo = std::max(n0, p.split.begin[i]), hi = std::min(n0 + n, p.split.begin[i + 1]);
    if (lo >= hi) continue;
    const int64_t width = p.split.begin[i + 1] - p.split.begin[i];
    store_floats(p.split.out[i], p.out_dtype, r * width + lo - p.split.begin[i], hi - lo, row + (lo - n0));
  }
}

using PackA = void (*)(const GemmOperand&, int64_t, int64_t, int64_t, int64_t, int64_t, float*);
using PackB = PackA;

template <class Fn>
Fn pick_pack(DType d, Fn f32, Fn f16, Fn bf16) {
  switch (d) {
    case DType::f32:
      return f32;
    case DType::f16:
      return f16;
    case DType::bf16:
      return bf16;
    default:
      break;
  }
  LF_ASSERT(false, "gemm got operand dtype ", dtype_name(d));
  return f32;
}

struct Scratch {
  std::vector<float> a, b, c;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// B packed whole, without gaps: the block of K rows [k0, k0 + kc) and N columns [n0, n0 + nc)
// (k0, n0 block starts, so every block before it is full) starts at k0 * np + kc * n0, np = N
// rounded up to whole panels; inside, pack_b's layout.
int64_t whole_b_offset(int64_t K, int64_t np, int64_t k0, int64_t n0) {
  return k0 * np + std::min(kKC, K - k0) * n0;
}

struct WholeB {
  int64_t K = 0, np = 0;
  const float* panels = nullptr;
  const float* block(int64_t k0, int64_t n0) const { return panels + whole_b_offset(K, np, k0, n0); }
};

PackedPanels pack_whole_b(const GemmProblem& p, PackB pb) {
  const int64_t kt = (p.K + kKC - 1) / kKC, nt = (p.N + kNC - 1) / kNC;
  const int64_t np = round_up(p.N, kNR);
  auto panels = std::make_shared<std::vector<float>>(static_cast<size_t>(p.K * np));
  parallel_range(kt * nt, p.K * p.N, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t k0 = (b / nt) * kKC, n0 = (b % nt) * kNC;
      pb(p.b, 0, k0, std::min(kKC, p.K - k0), n0, std::min(kNC, p.N - n0),
         panels->data() + whole_b_offset(p.K, np, k0, n0));
    }
  });
  return panels;
}

// The cached whole-B pack for p, packing it now when the cache admits it; null: pack per tile.
PackedPanels cached_b(const GemmProblem& p, PackB pb) {
  if (!pack_cache_enabled() || !p.b.owner || !p.b.owner->ptr) return nullptr;
  // One matrix for every batch (a weight): with a per-batch B there is nothing to reuse.
  for (int d = 0; d < p.b.batch.strides.rank; ++d)
    if (p.b.batch.strides.v[d] != 0 && p.b.batch.shape.v[d] != 1) return nullptr;
  const auto* start = static_cast<const std::byte*>(p.b.owner->ptr);
  PackKey k;
  k.byte_offset = static_cast<size_t>(p.b.base - start);
  k.K = p.K, k.N = p.N, k.rs = p.b.rs, k.cs = p.b.cs, k.dtype = p.b.dtype;
  bool admit = false;
  PackCache& cache = pack_cache();
  PackedPanels hit = cache.find(p.b.owner, k, &admit);
  if (hit || !admit) return hit;
  PackedPanels packed = pack_whole_b(p, pb);
  cache.insert(p.b.owner, k, packed);
  return packed;
}

void run_tile(const GemmProblem& p, PackA pa, PackB pb, const WholeB& wb, MicroKernel mk,
              const GemmTiling& tl, int64_t bi, int64_t m0, int64_t n0) {
  const int64_t mc = std::min(tl.mc, p.M - m0), nc = std::min(tl.nc, p.N - n0);
  const int64_t mcp = round_up(mc, kMR), ncp = round_up(nc, kNR);
  Scratch& s = scratch();
  if (s.c.size() < static_cast<size_t>(mcp * ncp)) s.c.resize(mcp * ncp);
  if (s.a.size() < static_cast<size_t>(mcp * kKC)) s.a.resize(mcp * kKC);
  if (!wb.panels && s.b.size() < static_cast<size_t>(ncp * kKC)) s.b.resize(ncp * kKC);
  float* c = s.c.data();
  std::fill_n(c, mcp * ncp, 0.0f);
  const int64_t aoff = p.a.batch.offset(bi), boff = p.b.batch.offset(bi);
  for (int64_t k0 = 0; k0 < p.K; k0 += kKC) {
    const int64_t kc = std::min(kKC, p.K - k0);
    pa(p.a, aoff, m0, mc, k0, kc, s.a.data());
    const float* bp = s.b.data();
    if (wb.panels) bp = wb.block(k0, n0);
    else pb(p.b, boff, k0, kc, n0, nc, s.b.data());
    for (int64_t q = 0; q < ncp; q += kNR)
      for (int64_t r = 0; r < mcp; r += kMR)
        mk(kc, s.a.data() + r * kc, bp + q * kc, c + r * ncp + q, ncp);
  }
  // Epilogue: bias, conversion, dense store.
  float bias[kNC];
  for (int64_t j = 0; j < nc; ++j) bias[j] = 0.0f;
  if (p.bias) load_floats(p.bias, p.bias_dtype, n0 * p.bias_stride, nc, p.bias_stride, bias);
  const int64_t out0 = bi * p.M * p.N + m0 * p.N + n0;
  for (int64_t i = 0; i < mc; ++i) {
    float* row = c + i * ncp;
    for (int64_t j = 0; j < nc; ++j) row[j] += bias[j];
    apply_tail(p, out0 + i * p.N, nc, row);
    store_row(p, bi * p.M + m0 + i, n0, nc, row);
  }
}

// A few rows times a B whose columns are contiguous along k (linear's W[out, in]): packing B
// would cost as much as the whole product, so take direct dot products instead, reading B
// once. This is the shape of token-by-token decoding (M = 1).
template <DType D>
void small_m(const GemmProblem& p) {
  using T = typename DT<D>::T;
  constexpr int kLanes = 16;
  constexpr int64_t kCols = 64;
  const int64_t blocks = (p.N + kCols - 1) / kCols;
  parallel_range(p.batch * blocks, p.batch * p.M * p.N * p.K / 4, [&](int64_t u0, int64_t u1) {
    float row[kCols];
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t bi = u / blocks, n0 = (u % blocks) * kCols, nc = std::min(kCols, p.N - n0);
      const T* a0 = reinterpret_cast<const T*>(p.a.base) + p.a.batch.offset(bi);
      const T* b0 = reinterpret_cast<const T*>(p.b.base) + p.b.batch.offset(bi);
      float bias[kCols] = {};
      if (p.bias) load_floats(p.bias, p.bias_dtype, n0 * p.bias_stride, nc, p.bias_stride, bias);
      for (int64_t m = 0; m < p.M; ++m) {
        const T* a = a0 + m * p.a.rs;
        for (int64_t j = 0; j < nc; ++j) {
          const T* b = b0 + (n0 + j) * p.b.cs;
          float acc[kLanes] = {};  // independent lanes: vectorises without reassociation
          int64_t k = 0;
          for (; k + kLanes <= p.K; k += kLanes)
            for (int l = 0; l < kLanes; ++l)
              acc[l] += load_as<D, float>(a + k + l) * load_as<D, float>(b + k + l);
          float sum = 0;
          for (int l = 0; l < kLanes; ++l) sum += acc[l];
          for (; k < p.K; ++k) sum += load_as<D, float>(a + k) * load_as<D, float>(b + k);
          row[j] = sum + bias[j];
        }
        apply_tail(p, (bi * p.M + m) * p.N + n0, nc, row);
        store_row(p, bi * p.M + m, n0, nc, row);
      }
    }
  });
}

}  // namespace

void gemm(const GemmProblem& p) {
  if (p.M == 0 || p.N == 0 || p.batch == 0) return;
  LF_ASSERT(p.split.parts == 0 || (!p.act && !p.residual), "gemm: a column split takes no tail");
  if (p.M <= 4 && p.K >= 16 && p.a.cs == 1 && p.b.rs == 1 && p.a.dtype == p.b.dtype) {
    switch (p.a.dtype) {
      case DType::f32:
        return small_m<DType::f32>(p);
      case DType::f16:
        return small_m<DType::f16>(p);
      case DType::bf16:
        return small_m<DType::bf16>(p);
      default:
        break;
    }
  }
  const PackA pa =
      pick_pack<PackA>(p.a.dtype, pack_a<DType::f32>, pack_a<DType::f16>, pack_a<DType::bf16>);
  const PackB pb =
      pick_pack<PackB>(p.b.dtype, pack_b<DType::f32>, pack_b<DType::f16>, pack_b<DType::bf16>);
  const MicroKernel mk = microkernel();
  const PackedPanels packed = cached_b(p, pb);
  const WholeB wb{p.K, round_up(p.N, kNR), packed ? packed->data() : nullptr};
  // Work in multiply-adds, padded the way the micro-kernel sees it; at least one per output.
  const int64_t work =
      p.batch * round_up(p.M, kMR) * round_up(p.N, kNR) * std::max<int64_t>(p.K, 1) / 4;
  const GemmTiling tl = gemm_tiling(p.M, p.N, p.batch, work, cpu_workers());
  const int64_t mt = tl.mt, nt = tl.nt, tiles = p.batch * mt * nt;
  parallel_range(tiles, work, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bi = t / (mt * nt), rem = t % (mt * nt);
      run_tile(p, pa, pb, wb, mk, tl, bi, (rem / nt) * tl.mc, (rem % nt) * tl.nc);
    }
  });
}

void gemm_prepare_thread() { (void)scratch(); }

}  // namespace livefuse::cpu
