// NaN and Inf propagate as in PyTorch; outputs are fully written (poison check).
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/row_sums.hpp"
#include "tests/ops/ops_util.hpp"

using namespace opstest;

namespace {
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();
const double dNaN = std::numeric_limits<double>::quiet_NaN();
const double dInf = std::numeric_limits<double>::infinity();
}  // namespace

// The CPU row maximum (softmax, the fused attention, the fused row kernels' reduce_max): its
// lanes keep NaN apart from the maximum, so a NaN in any lane or in the tail reaches the result.
TEST_CASE("CPU row maximum: NaN at any position, -inf rows, the initial value") {
  using livefuse::cpu::max_float;
  for (int n : {1, 5, 16, 17, 40, 100})
    for (int at = 0; at < n; at += 3) {
      std::vector<float> row(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) row[static_cast<size_t>(i)] = static_cast<float>((i * 7) % 11);
      CHECK(max_float(row.data(), n, -kInf) == *std::max_element(row.begin(), row.end()));
      row[static_cast<size_t>(at)] = kNaN;
      CAPTURE(n);
      CAPTURE(at);
      CHECK(std::isnan(max_float(row.data(), n, -kInf)));
    }
  std::vector<float> neg(33, -kInf);
  CHECK(max_float(neg.data(), 33, -kInf) == -kInf);
  CHECK(max_float(neg.data(), 33, 2.0f) == 2.0f);
  CHECK(std::isnan(max_float(neg.data(), 33, kNaN)));
}

TEST_CASE("poisoning reaches fresh outputs (the check behind 'outputs fully written')") {
  // The CPU pool hands the most recently freed block of a size class back first; if this stops
  // holding, the poison in the other tests no longer proves anything.
  poison(4097 * 4, DType::f32, Device::cpu());
  const Tensor e = lf::empty({4097}, DType::f32, Device::cpu());
  const std::vector<double> v = e.to_doubles();
  size_t nans = 0;
  for (double x : v) nans += std::isnan(x);
  CHECK(nans == v.size());
}

TEST_CASE("elementwise NaN / Inf propagation") {
  for (Device dev : lftest::devices())
    for (DType t : float_dtypes()) {
      const Tensor a = floats({kNaN, kInf, -kInf, 1.f, 0.f, -1.f}, {6}, t, dev);
      const Tensor b = floats({1.f, -kInf, -kInf, kNaN, 0.f, kInf}, {6}, t, dev);
      auto name = [&](const char* op) { return case_name(op, t, dev); };
      check_equal(lf::add(a, b), {dNaN, dNaN, -dInf, dNaN, 0, dInf}, {6}, t, name("add"));
      check_equal(lf::mul(a, b), {dNaN, -dInf, dInf, dNaN, 0, -dInf}, {6}, t, name("mul"));
      check_equal(lf::div(a, b), {dNaN, dNaN, dNaN, dNaN, dNaN, -0.0}, {6}, t, name("div"));
      check_equal(lf::maximum(a, b), {dNaN, dInf, -dInf, dNaN, 0, dInf}, {6}, t, name("maximum"));
      check_equal(lf::minimum(a, b), {dNaN, -dInf, -dInf, dNaN, 0, -1}, {6}, t, name("minimum"));
      check_equal(lf::relu(a), {dNaN, dInf, 0, 1, 0, 0}, {6}, t, name("relu"));
      check_equal(lf::clamp(a, -2, 2), {dNaN, 2, -2, 1, 0, -1}, {6}, t, name("clamp"));
      check_close(lf::exp(a), {dNaN, dInf, 0, std::exp(1.0), 1, std::exp(-1.0)}, {6}, t,
                  lftest::tolerance(t), 0, name("exp"));
      const Tensor lx = floats({0.f, -1.f, kInf, kNaN}, {4}, t, dev);
      check_equal(lf::log(lx), {-dInf, dNaN, dInf, dNaN}, {4}, t, name("log"));
      check_equal(lf::sqrt(lx), {0, dNaN, dInf, dNaN}, {4}, t, name("sqrt"));
      check_close(lf::sigmoid(a),
                  {dNaN, 1, 0, 1 / (1 + std::exp(-1.0)), 0.5, 1 / (1 + std::exp(1.0))}, {6}, t,
                  lftest::tolerance(t), 0, name("sigmoid"));
      check_close(lf::tanh(a), {dNaN, 1, -1, std::tanh(1.0), 0, -std::tanh(1.0)}, {6}, t,
                  lftest::tolerance(t), 0, name("tanh"));
      check_equal(lf::div(lf::from_floats({1.f, -1.f}, {2}, t, dev),
                          lf::from_floats({0.f, 0.f}, {2}, t, dev)),
                  {dInf, -dInf}, {2}, t, name("div by 0"));
    }
}

TEST_CASE("reductions, softmax, norms and matmul propagate NaN / Inf") {
  for (Device dev : lftest::devices())
    for (DType t : float_dtypes()) {
      auto name = [&](const char* op) { return case_name(op, t, dev); };
      // Row 0 has a NaN, row 1 an inf, row 2 is finite.
      const Tensor x = floats({1, kNaN, 3, 2, 1, kInf, 2, 0.5, 1, 2, 3, 1.5}, {3, 4}, t, dev);
      check_equal(lf::sum(x, 1), {dNaN, dInf, 7.5}, {3}, t, name("sum"));
      check_equal(lf::max(x, 1), {dNaN, dInf, 3}, {3}, t, name("max"));
      check_equal(lf::argmax(x, 1), {1, 1, 2}, {3}, DType::i64, name("argmax"));
      check_equal(lf::max(x, 0), {1, dNaN, 3, 2}, {4}, t, name("max dim 0"));
      const std::vector<double> sm = lf::softmax(x).to_doubles();
      for (int i = 0; i < 4; ++i) CHECK(std::isnan(sm[i]));  // NaN row: all NaN
      for (int i = 4; i < 8; ++i) CHECK(std::isnan(sm[i]));  // +inf row: inf - inf = NaN
      for (int i = 8; i < 12; ++i) CHECK(std::isfinite(sm[i]));
      // Rows longer than the CPU kernels' 16 lanes: a NaN inside the lanes' main loop (column
      // 21) makes its whole row NaN; a -inf there is 0 and the row still sums to 1.
      std::vector<float> long_rows(80);
      for (int i = 0; i < 80; ++i) long_rows[i] = 0.25f * static_cast<float>(i % 7);
      long_rows[21] = kNaN;
      long_rows[40 + 21] = -kInf;
      const std::vector<double> sl = lf::softmax(floats(long_rows, {2, 40}, t, dev)).to_doubles();
      for (int i = 0; i < 40; ++i) CHECK(std::isnan(sl[i]));
      double row1 = 0;
      for (int i = 40; i < 80; ++i) row1 += sl[i];
      CHECK(sl[40 + 21] == 0.0);
      CHECK(std::abs(row1 - 1.0) < 4 * lftest::tolerance(t));
      // A fully masked row (-inf everywhere) is NaN, as in PyTorch; the others are finite.
      const Tensor mask = floats({-kInf, -kInf, -kInf, -kInf, 0, 0, 0, -kInf}, {2, 4}, t, dev);
      const Tensor y = floats({1, 2, 3, 4, 1, 2, 3, 4}, {2, 4}, t, dev);
      const std::vector<double> ms = lf::softmax(y, 1.0, mask).to_doubles();
      for (int i = 0; i < 4; ++i) CHECK(std::isnan(ms[i]));
      CHECK(ms[7] == 0.0);
      CHECK(std::abs(ms[4] + ms[5] + ms[6] - 1.0) < 4 * lftest::tolerance(t));
      const std::vector<double> ln = lf::layer_norm(x, {}, {}, 1e-5).to_doubles();
      for (int i = 0; i < 4; ++i) CHECK(std::isnan(ln[i]));
      for (int i = 8; i < 12; ++i) CHECK(std::isfinite(ln[i]));
      // matmul: an inf in row 0 of A makes row 0 of C infinite (signs follow B), others finite.
      const Tensor a = floats({kInf, 1, 1, 1}, {2, 2}, t, dev);
      const Tensor b = floats({1, -2, 3, 4}, {2, 2}, t, dev);
      check_equal(lf::matmul(a, b), {dInf, -dInf, 4, 2}, {2, 2}, t, name("matmul inf"));
      const Tensor an = floats({kNaN, 1, 1, 1}, {2, 2}, t, dev);
      check_equal(lf::matmul(an, b), {dNaN, dNaN, 4, 2}, {2, 2}, t, name("matmul nan"));
    }
}

TEST_CASE("large transposed inputs (copied densely before row-wise kernels)") {
  for (Device dev : lftest::devices())
    for (DType t : {DType::f32, DType::bf16}) {
      const double tol = lftest::tolerance(t);
      const Tensor a =
          rand_tensor({300, 70}, t, dev, 31).transpose(0, 1);  // [70, 300], 21000 elements
      const Tensor b = rand_tensor({300}, t, dev, 32);
      const std::vector<double> av = a.to_doubles(), bv = b.to_doubles();
      std::vector<double> sum(av.size()), sm(av.size()), rms(av.size());
      for (int r = 0; r < 70; ++r) {
        double mx = -1e300, z = 0, ss = 0;
        for (int c = 0; c < 300; ++c) mx = std::max(mx, av[r * 300 + c]);
        for (int c = 0; c < 300; ++c) z += std::exp(av[r * 300 + c] - mx);
        for (int c = 0; c < 300; ++c) ss += av[r * 300 + c] * av[r * 300 + c];
        for (int c = 0; c < 300; ++c) {
          const size_t i = static_cast<size_t>(r * 300 + c);
          sum[i] = av[i] + bv[c];
          sm[i] = std::exp(av[i] - mx) / z;
          rms[i] = av[i] / std::sqrt(ss / 300 + 1e-6);
        }
      }
      check_close(lf::add(a, b), sum, {70, 300}, t, tol, 1e-5,
                  case_name("add", t, dev, "large transposed"));
      check_close(lf::softmax(a), sm, {70, 300}, t, tol, 1e-7,
                  case_name("softmax", t, dev, "large transposed"));
      check_close(lf::rms_norm(a, {}, 1e-6), rms, {70, 300}, t, tol, tol,
                  case_name("rms_norm", t, dev, "large transposed"));
      check_equal(lf::contiguous(a), av, {70, 300}, t,
                  case_name("contiguous", t, dev, "large transposed"));
    }
}
