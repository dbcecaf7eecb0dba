// softmax (scale, broadcast additive mask), layer_norm and rms_norm against float64 references.
#include <cmath>
#include <limits>

#include "tests/ops/ops_util.hpp"

using namespace opstest;

namespace {

uint64_t g_seed = 9000;

// Rows of the last dim of dense values.
template <class F>
std::vector<double> per_row(const std::vector<double>& xv, int64_t L, F&& f) {
  std::vector<double> out(xv.size());
  for (size_t r = 0; r * L < xv.size(); ++r) {
    std::vector<double> row(xv.begin() + r * L, xv.begin() + (r + 1) * L);
    f(r, row);
    std::copy(row.begin(), row.end(), out.begin() + r * L);
  }
  return out;
}

std::vector<double> softmax_ref(const Tensor& x, double scale, const Tensor& mask) {
  const Shape s = x.shape();
  const int64_t L = s[s.rank - 1];
  std::vector<double> mv;
  if (mask.defined()) mv = mask.to_doubles();
  return per_row(x.to_doubles(), L, [&](size_t r, std::vector<double>& v) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < L; ++i) {
      v[i] *= scale;
      if (mask.defined())
        v[i] += mv[ravel_bcast(unravel(static_cast<int64_t>(r) * L + i, s), mask.shape())];
      m = std::isnan(v[i]) || std::isnan(m) ? NAN : std::max(m, v[i]);
    }
    double sum = 0;
    for (double& e : v) sum += (e = std::exp(e - m));
    for (double& e : v) e /= sum;
  });
}

std::vector<double> layer_norm_ref(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  const int64_t L = x.shape()[x.rank() - 1];
  const std::vector<double> wv = w.defined() ? w.to_doubles() : std::vector<double>(L, 1.0);
  const std::vector<double> bv = b.defined() ? b.to_doubles() : std::vector<double>(L, 0.0);
  return per_row(x.to_doubles(), L, [&](size_t, std::vector<double>& v) {
    double mean = 0, var = 0;
    for (double e : v) mean += e;
    mean /= L;
    for (double e : v) var += (e - mean) * (e - mean);
    var /= L;
    for (int64_t i = 0; i < L; ++i) v[i] = (v[i] - mean) / std::sqrt(var + eps) * wv[i] + bv[i];
  });
}

std::vector<double> rms_norm_ref(const Tensor& x, const Tensor& w, double eps) {
  const int64_t L = x.shape()[x.rank() - 1];
  const std::vector<double> wv = w.defined() ? w.to_doubles() : std::vector<double>(L, 1.0);
  return per_row(x.to_doubles(), L, [&](size_t, std::vector<double>& v) {
    double ms = 0;
    for (double e : v) ms += e * e;
    ms /= L;
    for (int64_t i = 0; i < L; ++i) v[i] = v[i] / std::sqrt(ms + eps) * wv[i];
  });
}

// Outputs are O(1): atol = tol covers f16/bf16 rounding of values near 0 after normalisation.
double atol_for(DType t) { return lftest::tolerance(t) * 0.5; }

}  // namespace

TEST_CASE("softmax: shapes, scale, broadcast masks, views") {
  const std::vector<Shape> shapes = {{1}, {7}, {3, 1023}, {2, 4097}, {2, 3, 5, 33}, {64, 130}};
  for (Device dev : lftest::devices())
    for (DType t : float_dtypes()) {
      const double tol = lftest::tolerance(t);
      for (const Shape& s : shapes)
        for (double scale : {1.0, 0.125}) {
          const Tensor x = rand_tensor(s, t, dev, ++g_seed, -4, 4);
          poison(x.nbytes(), t, dev);
          check_close(lf::softmax(x, scale), softmax_ref(x, scale, {}), s, t, tol,
                      atol_for(t) * 0.01, case_name("softmax", t, dev, s.str()));
        }
      // Masks broadcast along leading dims, with -inf entries (a padding mask).
      const Shape s{2, 3, 5, 33};
      const Tensor x = rand_tensor(s, t, dev, ++g_seed, -4, 4);
      for (const Shape& ms : {Shape{33}, Shape{2, 1, 1, 33}, Shape{5, 1}, Shape{2, 3, 5, 33}}) {
        std::vector<float> mv = rand_tensor(ms, DType::f32, dev, ++g_seed, -2, 2).to_floats();
        for (size_t i = 0; i < mv.size(); i += 4) mv[i] = -std::numeric_limits<float>::infinity();
        if (ms == Shape{5, 1}) mv[0] = 0.5f;  // keep every row partly unmasked
        const Tensor mask = floats(mv, ms, t, dev);
        poison(x.nbytes(), t, dev);
        check_close(lf::softmax(x, 0.5, mask), softmax_ref(x, 0.5, mask), s, t, tol,
                    atol_for(t) * 0.01, case_name("softmax", t, dev, "mask " + ms.str()));
      }
      // Strided scores (transposed) and a strided mask.
      const Tensor xt = rand_tensor({33, 6}, t, dev, ++g_seed, -4, 4).transpose(0, 1);
      const Tensor mt = rand_tensor({66}, t, dev, ++g_seed, -1, 1).slice(0, 0, 66, 2);
      check_close(lf::softmax(xt, 1.0, mt), softmax_ref(xt, 1.0, mt), {6, 33}, t, tol,
                  atol_for(t) * 0.01, case_name("softmax", t, dev, "views"));
    }
}

// HF's padding mask is (1 - mask) * the dtype's lowest finite value, not -inf: a row padded
// throughout gets that value at every key and averages them (f32 / bf16: every score rounds to
// the lowest value), a padded key among kept ones gets probability 0. On CUDA the mask once went
// through log2(e) first, which overflowed to -inf and made such rows NaN.
TEST_CASE("softmax: HF's padding mask (the dtype's lowest value) averages a fully padded row") {
  for (Device dev : lftest::devices())
    for (DType t : float_dtypes()) {
      const double lowest = t == DType::f16    ? -65504.0
                            : t == DType::bf16 ? -3.3895313892515355e38
                                               : static_cast<double>(std::numeric_limits<float>::lowest());
      for (int64_t n : {33, 1500}) {  // rows in registers, and the two-pass kernel
        const Shape s{2, 3, 5, n};
        const Tensor x = rand_tensor(s, t, dev, ++g_seed, -4, 4);
        std::vector<float> mv(static_cast<size_t>(2 * n), 0.0f);
        for (int64_t j = 0; j < n; ++j) {
          mv[static_cast<size_t>(j)] = j >= 20 ? static_cast<float>(lowest) : 0.0f;  // batch 0: padded from 20
          mv[static_cast<size_t>(n + j)] = static_cast<float>(lowest);             // batch 1: all padded
        }
        const Tensor mask = floats(mv, {2, 1, 1, n}, t, dev);
        const Tensor y = lf::softmax(x, 0.125, mask);
        const std::vector<double> got = y.to_doubles();
        for (double g : got) REQUIRE_MESSAGE(std::isfinite(g), case_name("softmax", t, dev, "padded rows"));
        // (f16: x * scale + -65504 in f32 keeps x to ~0.002 -- eager's own rounding, not the
        // kernel's; the float64 reference keeps it whole.)
        const double tol = t == DType::f16 ? 1e-2 : lftest::tolerance(t);
        check_close(y, softmax_ref(x, 0.125, mask), s, t, tol, atol_for(t) * 0.01,
                    case_name("softmax", t, dev, "HF padding mask, n " + std::to_string(n)));
      }
    }
}

TEST_CASE("layer_norm and rms_norm: with and without affine params, shapes, views") {
  const std::vector<Shape> shapes = {{1, 1}, {7}, {7, 1023}, {3, 4097}, {2, 5, 33}, {130, 64}};
  for (Device dev : lftest::devices())
    for (DType t : float_dtypes()) {
      const double tol = lftest::tolerance(t);
      for (const Shape& s : shapes) {
        const int64_t L = s[s.rank - 1];
        const Tensor x = rand_tensor(s, t, dev, ++g_seed, -3, 5);
        const Tensor w = rand_tensor({L}, t, dev, ++g_seed, 0.5, 1.5);
        const Tensor b = rand_tensor({L}, t, dev, ++g_seed, -1, 1);
        for (int mode = 0; mode < 4; ++mode) {
          const Tensor wm = mode & 1 ? w : Tensor(), bm = mode & 2 ? b : Tensor();
          poison(x.nbytes(), t, dev);
          check_close(lf::layer_norm(x, wm, bm, 1e-5), layer_norm_ref(x, wm, bm, 1e-5), s, t, tol,
                      atol_for(t),
                      case_name("layer_norm", t, dev, s.str() + " mode " + std::to_string(mode)));
        }
        for (const Tensor& wm : {w, Tensor()}) {
          poison(x.nbytes(), t, dev);
          check_close(lf::rms_norm(x, wm, 1e-6), rms_norm_ref(x, wm, 1e-6), s, t, tol, atol_for(t),
                      case_name("rms_norm", t, dev, s.str() + (wm.defined() ? " weight" : "")));
        }
      }
      // Transposed input and step-sliced weight / bias.
      const Tensor x = rand_tensor({40, 6}, t, dev, ++g_seed, -3, 5).transpose(0, 1);
      const Tensor w = rand_tensor({80}, t, dev, ++g_seed, 0.5, 1.5).slice(0, 1, 80, 2);
      const Tensor b = rand_tensor({80}, t, dev, ++g_seed, -1, 1).slice(0, 0, 80, 2);
      check_close(lf::layer_norm(x, w, b, 1e-3), layer_norm_ref(x, w, b, 1e-3), {6, 40}, t, tol,
                  atol_for(t), case_name("layer_norm", t, dev, "views"));
      check_close(lf::rms_norm(x, w, 1e-3), rms_norm_ref(x, w, 1e-3), {6, 40}, t, tol, atol_for(t),
                  case_name("rms_norm", t, dev, "views"));
    }
}
