// sum / mean / max / argmax over every dim, keepdim or not, contiguous and strided inputs.
#include <cmath>
#include <limits>

#include "tests/ops/ops_util.hpp"

using namespace opstest;

namespace {

uint64_t g_seed = 5000;

enum class Red { sum, mean, max, argmax };

Tensor apply(Red r, const Tensor& x, int64_t dim, bool keep) {
  switch (r) {
    case Red::sum:
      return lf::sum(x, dim, keep);
    case Red::mean:
      return lf::mean(x, dim, keep);
    case Red::max:
      return lf::max(x, dim, keep);
    case Red::argmax:
      return lf::argmax(x, dim, keep);
  }
  return {};
}

const char* name_of(Red r) {
  switch (r) {
    case Red::sum:
      return "sum";
    case Red::mean:
      return "mean";
    case Red::max:
      return "max";
    case Red::argmax:
      return "argmax";
  }
  return "?";
}

// Reference over dense values `xv` of shape s; returns values in the output's order.
std::vector<double> reference(Red r, const std::vector<double>& xv, const Shape& s, int d) {
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < d; ++k) outer *= s[k];
  for (int k = d + 1; k < s.rank; ++k) inner *= s[k];
  const int64_t R = s[d];
  std::vector<double> w(static_cast<size_t>(outer * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double acc = r == Red::sum || r == Red::mean ? 0.0 : -std::numeric_limits<double>::infinity();
      int64_t best = 0;
      for (int64_t k = 0; k < R; ++k) {
        const double v = xv[(o * R + k) * inner + i];
        if (r == Red::sum || r == Red::mean)
          acc += v;
        else if (std::isnan(v) || std::isnan(acc)) {
          if (!std::isnan(acc)) best = k;
          acc = std::numeric_limits<double>::quiet_NaN();
        } else if (v > acc || k == 0) {
          acc = v;
          best = k;
        }
      }
      if (r == Red::mean) acc /= static_cast<double>(R);
      w[o * inner + i] = r == Red::argmax ? static_cast<double>(best) : acc;
    }
  return w;
}

Shape reduced_shape(const Shape& s, int d, bool keep) {
  Shape o;
  for (int k = 0; k < s.rank; ++k) {
    if (k != d)
      o.push_back(s[k]);
    else if (keep)
      o.push_back(1);
  }
  return o;
}

void check_reduction(Red r, const Tensor& x, int64_t dim, bool keep, Device dev,
                     const std::string& what) {
  const Shape s = x.shape();
  const int d = static_cast<int>(dim < 0 ? dim + s.rank : dim);
  const std::vector<double> want = reference(r, x.to_doubles(), s, d);
  const DType t = x.dtype();
  const DType out_t = r == Red::argmax ? DType::i64 : t;
  const double tol = r == Red::argmax || lf::is_integral(t) ? 0.0 : lftest::tolerance(t);
  // Sums of R values in [-1, 1) cancel: allow an absolute error that grows like sqrt(R).
  const double atol = r == Red::sum ? tol * std::sqrt(static_cast<double>(s[d])) : tol * 1e-2;
  poison(want.size() * lf::dtype_size(out_t), out_t, dev);
  check_close(apply(r, x, dim, keep), want, reduced_shape(s, d, keep), out_t, tol, atol,
              what + " dim " + std::to_string(dim) + (keep ? " keepdim" : ""));
}

}  // namespace

TEST_CASE("reductions: every dim, keepdim, dtypes, odd shapes") {
  // {2, 50257}: a decoder's logits -- on CUDA, long rows with few outputs take their own kernel.
  const std::vector<Shape> shapes = {{1},       {7},        {4097},    {3, 1023},
                                     {5, 7, 9}, {257, 255}, {2, 50257}};
  for (Device dev : lftest::devices())
    for (Red r : {Red::sum, Red::mean, Red::max, Red::argmax}) {
      std::vector<DType> dts = float_dtypes();
      if (r != Red::mean) dts.insert(dts.end(), int_dtypes().begin(), int_dtypes().end());
      for (DType t : dts)
        for (const Shape& s : shapes) {
          const Tensor x = lf::is_floating(t) ? rand_tensor(s, t, dev, ++g_seed, -1, 1)
                                              : rand_tensor(s, t, dev, ++g_seed, -1000, 1000);
          for (int d = 0; d < s.rank; ++d) {
            const std::string what = case_name(name_of(r), t, dev, s.str());
            check_reduction(r, x, d, false, dev, what);
            if (s.rank > 1 || d == 0) check_reduction(r, x, d - s.rank, true, dev, what);
          }
        }
    }
}

TEST_CASE("reductions over strided views") {
  for (Device dev : lftest::devices())
    for (Red r : {Red::sum, Red::mean, Red::max, Red::argmax})
      for (DType t : float_dtypes()) {
        // Transposed [9, 33] -> [33, 9] and a permuted, sliced 3-d view.
        const Tensor a = rand_tensor({9, 33}, t, dev, ++g_seed, -1, 1).transpose(0, 1);
        const Tensor b =
            rand_tensor({6, 5, 8}, t, dev, ++g_seed, -1, 1).permute({2, 0, 1}).slice(1, 1, 6, 2);
        REQUIRE(b.shape() == Shape{8, 3, 5});
        for (int d = 0; d < 2; ++d)
          check_reduction(r, a, d, d == 1, dev, case_name(name_of(r), t, dev, "transposed"));
        // Wide enough that the unit-stride dim is cut into several column blocks.
        const Tensor w = rand_tensor({300, 257}, t, dev, ++g_seed, -1, 1).transpose(0, 1);
        for (int d = 0; d < 2; ++d)
          check_reduction(r, w, d, false, dev, case_name(name_of(r), t, dev, "wide transposed"));
        for (int d = 0; d < 3; ++d)
          check_reduction(r, b, d, false, dev, case_name(name_of(r), t, dev, "permuted"));
      }
}

TEST_CASE("argmax returns the first of tied maxima") {
  for (Device dev : lftest::devices())
    for (DType t : {DType::f32, DType::bf16, DType::i32}) {
      const Tensor x = floats({1, 3, 3, 2, 3, 0, 5, 5}, {2, 4}, t, dev);
      check_equal(lf::argmax(x, 1), {1, 2}, {2}, DType::i64, case_name("argmax", t, dev));
      const Tensor y = floats({2, 1, 7, 2, 4, 7}, {2, 3}, t, dev);
      check_equal(lf::argmax(y, 0), {0, 1, 0}, {3}, DType::i64,
                  case_name("argmax", t, dev, "dim 0"));
    }
}

TEST_CASE("argmax over long rows: the first of tied maxima, the first NaN") {
  // Long enough for the CUDA long-row kernel (rounds of 4 x 1024 16-byte chunks, a tail of
  // chunks, then single elements; rows 1 and 2 start off a 16-byte boundary, so a head of
  // single elements too); the ties sit across threads and across rounds.
  const int64_t n = 50257;
  for (Device dev : lftest::devices())
    for (DType t : float_dtypes()) {
      std::vector<float> v(static_cast<size_t>(3 * n));
      for (int64_t i = 0; i < 3 * n; ++i)
        v[static_cast<size_t>(i)] = static_cast<float>((i * 37) % 101) / 128.0f;
      auto at = [&](int64_t row, int64_t i) -> float& {
        return v[static_cast<size_t>(row * n + i)];
      };
      at(0, 41000) = at(0, 7 + 1024) = at(0, 7) = 2.0f;          // row 0: 7
      at(1, 50256) = at(1, 30001) = 3.0f;                          // row 1: 30001
      at(1, 9) = 1.5f;
      at(2, 44444) = std::numeric_limits<float>::quiet_NaN();      // row 2: the first NaN
      at(2, 48000) = std::numeric_limits<float>::quiet_NaN();
      at(2, 3) = 4.0f;
      const Tensor x = floats(v, {3, n}, t, dev);
      check_equal(lf::argmax(x, 1), {7, 30001, 44444}, {3}, DType::i64,
                  case_name("argmax", t, dev, "long rows"));
    }
}
