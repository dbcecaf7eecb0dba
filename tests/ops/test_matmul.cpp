// matmul (2-D, batched, broadcast batch dims, transposed / sliced operands) and linear.
#include <cmath>

#include "tests/ops/ops_util.hpp"

using namespace opstest;

namespace {

uint64_t g_seed = 13000;

std::vector<double> matmul_ref(const Tensor& a, const Tensor& b, const Shape& out) {
  const std::vector<double> av = a.to_doubles(), bv = b.to_doubles();
  const Shape as = a.shape(), bs = b.shape();
  const int64_t M = as[as.rank - 2], K = as[as.rank - 1], N = bs[bs.rank - 1];
  Shape ab(std::span<const int64_t>(as.begin(), as.rank - 2));
  Shape bb(std::span<const int64_t>(bs.begin(), bs.rank - 2));
  Shape ob(std::span<const int64_t>(out.begin(), out.rank - 2));
  std::vector<double> w(static_cast<size_t>(out.numel()));
  for (int64_t bi = 0; bi < ob.numel(); ++bi) {
    const auto idx = unravel(bi, ob);
    const int64_t ao = ravel_bcast(idx, ab) * M * K, bo = ravel_bcast(idx, bb) * K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += av[ao + m * K + k] * bv[bo + k * N + n];
        w[(bi * M + m) * N + n] = acc;
      }
  }
  return w;
}

std::vector<double> linear_ref(const Tensor& x, const Tensor& w, const Tensor& b) {
  const std::vector<double> xv = x.to_doubles(), wv = w.to_doubles();
  const std::vector<double> bv = b.defined() ? b.to_doubles() : std::vector<double>();
  const int64_t K = w.shape()[1], N = w.shape()[0];
  int64_t M = 1;
  for (int d = 0; d + 1 < x.rank(); ++d) M *= x.shape()[d];
  std::vector<double> out(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = b.defined() ? bv[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) acc += xv[m * K + k] * wv[n * K + k];
      out[m * N + n] = acc;
    }
  return out;
}

// f32 accumulation over K terms of O(1) products: the absolute error grows like sqrt(K).
double atol_for(DType t, int64_t K) {
  return lftest::tolerance(t) * std::sqrt(static_cast<double>(K) + 1);
}

void check_matmul(const Tensor& a, const Tensor& b, const Shape& out, Device dev,
                  const std::string& what) {
  const DType t = a.dtype();
  const int64_t K = a.shape()[a.rank() - 1];
  poison(static_cast<size_t>(out.numel()) * lf::dtype_size(t), t, dev);
  check_close(lf::matmul(a, b), matmul_ref(a, b, out), out, t, lftest::tolerance(t), atol_for(t, K),
              case_name("matmul", t, dev, what));
}

}  // namespace

TEST_CASE("matmul: 2-D, batched, broadcast batch dims") {
  struct Case {
    Shape a, b, out;
  };
  const std::vector<Case> cases = {
      {{1, 1}, {1, 1}, {1, 1}},
      {{7, 33}, {33, 5}, {7, 5}},
      {{1, 1023}, {1023, 3}, {1, 3}},
      {{65, 130}, {130, 77}, {65, 77}},
      {{130, 300}, {300, 140}, {130, 140}},  // several cache blocks in every dim
      {{2, 3, 7, 9}, {9, 11}, {2, 3, 7, 11}},
      {{3, 1, 7, 9}, {4, 9, 5}, {3, 4, 7, 5}},
      {{2, 7, 9}, {2, 9, 5}, {2, 7, 5}},
      {{4, 6, 0}, {0, 5}, {4, 6, 5}},  // K = 0: zeros
  };
  for (Device dev : lftest::devices())
    for (DType t : float_dtypes())
      for (const Case& c : cases) {
        const Tensor a = rand_tensor(c.a, t, dev, ++g_seed, -1, 1);
        const Tensor b = rand_tensor(c.b, t, dev, ++g_seed, -1, 1);
        check_matmul(a, b, c.out, dev, c.a.str() + " @ " + c.b.str());
      }
}

TEST_CASE("matmul: transposed and sliced operands") {
  for (Device dev : lftest::devices())
    for (DType t : float_dtypes()) {
      const Tensor at = rand_tensor({33, 7}, t, dev, ++g_seed, -1, 1).transpose(0, 1);   // [7, 33]
      const Tensor bt = rand_tensor({19, 33}, t, dev, ++g_seed, -1, 1).transpose(0, 1);  // [33, 19]
      const Tensor bs =
          rand_tensor({33, 40}, t, dev, ++g_seed, -1, 1).slice(1, 1, 40, 2);  // [33, 20]
      check_matmul(at, bt, {7, 19}, dev, "a^T @ b^T");
      check_matmul(at, bs, {7, 20}, dev, "a^T @ b[:, 1::2]");
      // Attention-style: q @ k^T with k a transposed batched view.
      const Tensor q = rand_tensor({2, 3, 17, 8}, t, dev, ++g_seed, -1, 1);
      const Tensor k = rand_tensor({2, 3, 23, 8}, t, dev, ++g_seed, -1, 1).transpose(-1, -2);
      check_matmul(q, k, {2, 3, 17, 23}, dev, "q @ k^T");
      // Few rows against a transposed B (the direct dot-product path), batched and broadcast.
      const Tensor a3 = rand_tensor({3, 40}, t, dev, ++g_seed, -1, 1);
      const Tensor b3 = rand_tensor({70, 40}, t, dev, ++g_seed, -1, 1).transpose(0, 1);
      check_matmul(a3, b3, {3, 70}, dev, "few rows @ b^T");
      const Tensor a4 = rand_tensor({2, 1, 2, 40}, t, dev, ++g_seed, -1, 1);
      const Tensor b4 = rand_tensor({3, 50, 40}, t, dev, ++g_seed, -1, 1).transpose(-1, -2);
      check_matmul(a4, b4, {2, 3, 2, 50}, dev, "batched few rows @ b^T");
      // Permuted batch dims.
      const Tensor p =
          rand_tensor({5, 2, 9}, t, dev, ++g_seed, -1, 1).permute({1, 0, 2});  // [2, 5, 9]
      const Tensor r = rand_tensor({2, 9, 4}, t, dev, ++g_seed, -1, 1);
      check_matmul(p, r, {2, 5, 4}, dev, "permuted batch");
    }
}

TEST_CASE("linear: bias or not, leading dims, views, a BERT-sized projection") {
  struct Case {
    Shape x;
    int64_t out;
  };
  const std::vector<Case> cases = {
      {{1, 1}, 1}, {{7}, 5},      {{2, 7, 33}, 17}, {{130, 300}, 77},
      {{3, 0}, 4}, {{3, 40}, 70}, {{1, 1, 200}, 3}};  // few rows: dot path
  for (Device dev : lftest::devices())
    for (DType t : float_dtypes()) {
      const double tol = lftest::tolerance(t);
      for (const Case& c : cases) {
        const int64_t K = c.x[c.x.rank - 1];
        const Tensor x = rand_tensor(c.x, t, dev, ++g_seed, -1, 1);
        const Tensor w = rand_tensor({c.out, K}, t, dev, ++g_seed, -1, 1);
        const Tensor b = rand_tensor({c.out}, t, dev, ++g_seed, -1, 1);
        Shape os = c.x;
        os[os.rank - 1] = c.out;
        for (const Tensor& bias : {b, Tensor()}) {
          poison(static_cast<size_t>(os.numel()) * lf::dtype_size(t), t, dev);
          check_close(lf::linear(x, w, bias), linear_ref(x, w, bias), os, t, tol, atol_for(t, K),
                      case_name("linear", t, dev, c.x.str() + (bias.defined() ? " bias" : "")));
        }
      }
      // x a transposed view, W a transposed view ([in, out] storage), bias sliced.
      const Tensor x = rand_tensor({33, 14}, t, dev, ++g_seed, -1, 1).transpose(0, 1);
      const Tensor w = rand_tensor({33, 9}, t, dev, ++g_seed, -1, 1).transpose(0, 1);
      const Tensor b = rand_tensor({18}, t, dev, ++g_seed, -1, 1).slice(0, 0, 18, 2);
      check_close(lf::linear(x, w, b), linear_ref(x, w, b), {14, 9}, t, tol, atol_for(t, 33),
                  case_name("linear", t, dev, "views"));
      // Leading dims that cannot fold into one row stride: [2, 5, 33] permuted from [5, 2, 33].
      const Tensor xp = rand_tensor({5, 2, 33}, t, dev, ++g_seed, -1, 1).permute({1, 0, 2});
      const Tensor wp = rand_tensor({6, 33}, t, dev, ++g_seed, -1, 1);
      check_close(lf::linear(xp, wp), linear_ref(xp, wp, {}), {2, 5, 6}, t, tol, atol_for(t, 33),
                  case_name("linear", t, dev, "permuted rows"));
    }
  // One BERT-base sized projection (f32), checked on a sample of rows to keep the suite fast.
  // (Few-row products: the next case.)
  for (Device dev : lftest::devices()) {
    const Tensor x = rand_tensor({128, 768}, DType::f32, dev, ++g_seed, -1, 1);
    const Tensor w = rand_tensor({3072, 768}, DType::f32, dev, ++g_seed, -0.05, 0.05);
    const Tensor b = rand_tensor({3072}, DType::f32, dev, ++g_seed, -1, 1);
    const Tensor y = lf::linear(x, w, b);
    REQUIRE(y.shape() == Shape{128, 3072});
    const Tensor rows = x.slice(0, 5, 128, 41);  // rows 5, 46, 87
    const std::vector<double> want = linear_ref(rows, w, b);
    const std::vector<double> got = y.slice(0, 5, 128, 41).to_doubles();
    size_t bad = 0;
    const bool ok = lftest::allclose(got, want, 1e-4, 1e-4, &bad);
    INFO("linear 128x768x3072 on " << dev.str() << " mismatch at " << bad);
    CHECK(ok);
  }
}

// On CUDA, products of at most 8 rows whose weight is read along K run as the GEMV kernel
// (kernels/cuda/gemv.hpp): every row count, a weight row split over 1, 2 or 4 warps, chunk counts
// that leave lanes idle, rows taken from a strided view (a decode step's last position), and
// shapes it declines (9 rows, K not a whole number of 16-byte loads) that go to cuBLASLt.
TEST_CASE("linear: few rows -- the decode-step product") {
  struct Case {
    int64_t rows, k, n;
  };
  const std::vector<Case> cases = {
      {1, 768, 2304},  // GPT-2's QKV: one warp a row
      {1, 3072, 96},   // FFN2-shaped: the row split over four warps
      {2, 1032, 5},    // 129 chunks of 8: one lane with an extra load
      {3, 256, 1},     // one output column
      {4, 24, 33},     // K below one warp's run (f32: 6 chunks, f16: 3)
      {8, 512, 300},   // every lane of the epilogue's row loop busy
      {5, 64, 9000},   // tall: 2250 blocks
      {9, 64, 40},     // 9 rows: cuBLASLt
      {2, 36, 16},     // f16/bf16: K not a whole number of 16-byte loads
  };
  for (Device dev : lftest::devices())
    for (DType t : float_dtypes()) {
      const double tol = lftest::tolerance(t);
      for (const Case& c : cases) {
        const Tensor x = rand_tensor({c.rows, c.k}, t, dev, ++g_seed, -1, 1);
        const Tensor w = rand_tensor({c.n, c.k}, t, dev, ++g_seed, -0.5, 0.5);
        const Tensor b = rand_tensor({c.n}, t, dev, ++g_seed, -1, 1);
        const std::string what = std::to_string(c.rows) + "x" + std::to_string(c.k) + "x" + std::to_string(c.n);
        for (const Tensor& bias : {b, Tensor()}) {
          poison(static_cast<size_t>(c.rows * c.n) * lf::dtype_size(t), t, dev);
          check_close(lf::linear(x, w, bias), linear_ref(x, w, bias), {c.rows, c.n}, t, tol,
                      atol_for(t, c.k), case_name("linear", t, dev, what + (bias.defined() ? " bias" : "")));
        }
      }
      // The last position of [2, 5, 64] as [2, 1, 64]: two rows 320 elements apart.
      const Tensor seq = rand_tensor({2, 5, 64}, t, dev, ++g_seed, -1, 1);
      const Tensor last = seq.slice(1, 4, 5, 1);
      const Tensor w = rand_tensor({48, 64}, t, dev, ++g_seed, -0.5, 0.5);
      const Tensor b = rand_tensor({48}, t, dev, ++g_seed, -1, 1);
      check_close(lf::linear(last, w, b), linear_ref(last.contiguous(), w, b), {2, 1, 48}, t, tol,
                  atol_for(t, 64), case_name("linear", t, dev, "last position of a sequence"));
    }
}
