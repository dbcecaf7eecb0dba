// Elementwise ops against float64 references: every table row, float and integer dtypes,
// scalar variants, broadcasting, strided views, where and cast across dtypes.
#include <cmath>
#include <functional>

#include "tests/ops/ops_util.hpp"

using namespace opstest;

namespace {

uint64_t g_seed = 1000;

double atol_for(DType t) { return t == DType::f32 ? 1e-6 : 1e-5; }

struct Unary {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
  std::function<double(double)> ref;
  double lo, hi;
};

const std::vector<Unary>& unary_float_ops() {
  static const std::vector<Unary> ops = {
      {"neg", [](const Tensor& x) { return lf::neg(x); }, [](double x) { return -x; }, -3, 3},
      {"abs", [](const Tensor& x) { return lf::abs(x); }, [](double x) { return std::fabs(x); }, -3,
       3},
      {"exp", [](const Tensor& x) { return lf::exp(x); }, [](double x) { return std::exp(x); }, -4,
       4},
      {"log", [](const Tensor& x) { return lf::log(x); }, [](double x) { return std::log(x); },
       0.05, 5},
      {"sqrt", [](const Tensor& x) { return lf::sqrt(x); }, [](double x) { return std::sqrt(x); },
       0.01, 9},
      {"rsqrt", [](const Tensor& x) { return lf::rsqrt(x); },
       [](double x) { return 1 / std::sqrt(x); }, 0.05, 9},
      {"tanh", [](const Tensor& x) { return lf::tanh(x); }, [](double x) { return std::tanh(x); },
       -4, 4},
      {"sigmoid", [](const Tensor& x) { return lf::sigmoid(x); },
       [](double x) { return 1 / (1 + std::exp(-x)); }, -6, 6},
      {"relu", [](const Tensor& x) { return lf::relu(x); },
       [](double x) { return x > 0 ? x : 0.0; }, -3, 3},
      {"gelu", [](const Tensor& x) { return lf::gelu(x); },
       [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -4, 4},
      {"gelu_tanh", [](const Tensor& x) { return lf::gelu_tanh(x); },
       [](double x) {
         return 0.5 * x *
                (1 + std::tanh(std::sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
       },
       -4, 4},
      {"silu", [](const Tensor& x) { return lf::silu(x); },
       [](double x) { return x / (1 + std::exp(-x)); }, -6, 6},
      {"erf", [](const Tensor& x) { return lf::erf(x); }, [](double x) { return std::erf(x); }, -3,
       3},
      {"sin", [](const Tensor& x) { return lf::sin(x); }, [](double x) { return std::sin(x); }, -7,
       7},
      {"cos", [](const Tensor& x) { return lf::cos(x); }, [](double x) { return std::cos(x); }, -7,
       7},
  };
  return ops;
}

struct Binary {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> fn;
  std::function<Tensor(const Tensor&, double)> fn_scalar;
  std::function<double(double, double)> ref;
  double alo, ahi, blo, bhi;  // input ranges (div and pow keep away from poles)
};

double int_div(double a, double b) { return b == 0 ? 0.0 : std::trunc(a / b); }

const std::vector<Binary>& binary_ops() {
  static const std::vector<Binary> ops = {
      {"add", [](auto& a, auto& b) { return lf::add(a, b); },
       [](auto& a, double b) { return lf::add(a, b); }, [](double a, double b) { return a + b; },
       -2, 2, -2, 2},
      {"sub", [](auto& a, auto& b) { return lf::sub(a, b); },
       [](auto& a, double b) { return lf::sub(a, b); }, [](double a, double b) { return a - b; },
       -2, 2, -2, 2},
      {"mul", [](auto& a, auto& b) { return lf::mul(a, b); },
       [](auto& a, double b) { return lf::mul(a, b); }, [](double a, double b) { return a * b; },
       -2, 2, -2, 2},
      {"div", [](auto& a, auto& b) { return lf::div(a, b); },
       [](auto& a, double b) { return lf::div(a, b); }, [](double a, double b) { return a / b; },
       -2, 2, 0.5, 2},
      {"maximum", [](auto& a, auto& b) { return lf::maximum(a, b); },
       [](auto& a, double b) { return lf::maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }, -2, 2, -2, 2},
      {"minimum", [](auto& a, auto& b) { return lf::minimum(a, b); },
       [](auto& a, double b) { return lf::minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }, -2, 2, -2, 2},
      {"pow", [](auto& a, auto& b) { return lf::pow(a, b); },
       [](auto& a, double b) { return lf::pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, 0.1, 3, -2, 2},
  };
  return ops;
}

std::vector<double> ref_binary(const Tensor& a, const Tensor& b, const Shape& out,
                               const std::function<double(double, double)>& f) {
  const std::vector<double> av = a.to_doubles(), bv = b.to_doubles();
  std::vector<double> w(static_cast<size_t>(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    const auto idx = unravel(i, out);
    w[i] = f(av[ravel_bcast(idx, a.shape())], bv[ravel_bcast(idx, b.shape())]);
  }
  return w;
}

// Shape pairs: equal, broadcast both ways, size 1, odd sizes, and one large enough to run in
// parallel.
const std::vector<std::pair<Shape, Shape>>& binary_shapes() {
  static const std::vector<std::pair<Shape, Shape>> s = {{{1}, {1}},
                                                         {{7}, {7}},
                                                         {{1023}, {1}},
                                                         {{4097}, {4097}},
                                                         {{3, 1, 5}, {4, 5}},
                                                         {{7, 1}, {1, 9}},
                                                         {{2, 3, 4, 5}, {3, 1, 5}},
                                                         {{64, 1023}, {1023}},
                                                         {{5}, {3, 1}}};
  return s;
}

}  // namespace

TEST_CASE("unary float ops: every dtype, odd shapes, strided views") {
  const Shape shapes[] = {{1}, {7}, {1023}, {4097}, {3, 5, 7}};
  for (Device dev : lftest::devices())
    for (const Unary& op : unary_float_ops())
      for (DType t : float_dtypes()) {
        const double tol = lftest::tolerance(t);
        for (const Shape& s : shapes) {
          const Tensor x = rand_tensor(s, t, dev, ++g_seed, op.lo, op.hi);
          std::vector<double> want = x.to_doubles();
          for (double& v : want) v = op.ref(v);
          poison(x.nbytes(), t, dev);
          check_close(op.fn(x), want, s, t, tol, atol_for(t), case_name(op.name, t, dev, s.str()));
        }
        // A transposed, step-sliced view: [14, 9] -> [9, 14] -> rows 1, 3, .. -> [4, 14].
        const Tensor base = rand_tensor({14, 9}, t, dev, ++g_seed, op.lo, op.hi);
        const Tensor x = base.transpose(0, 1).slice(0, 1, 9, 2);
        REQUIRE(!x.is_contiguous());
        std::vector<double> want = x.to_doubles();
        for (double& v : want) v = op.ref(v);
        check_close(op.fn(x), want, Shape{4, 14}, t, tol, atol_for(t),
                    case_name(op.name, t, dev, "view"));
      }
}

TEST_CASE("unary integer ops: neg, abs, relu on i32 and i64") {
  const std::vector<Unary> ops = {unary_float_ops()[0], unary_float_ops()[1], unary_float_ops()[8]};
  for (Device dev : lftest::devices())
    for (const Unary& op : ops)
      for (DType t : int_dtypes())
        for (const Shape& s : {Shape{1}, Shape{7}, Shape{4097}, Shape{3, 5, 7}}) {
          const Tensor x = rand_tensor(s, t, dev, ++g_seed, -1000, 1000);
          std::vector<double> want = x.to_doubles();
          for (double& v : want) v = op.ref(v);
          poison(x.nbytes(), t, dev);
          check_equal(op.fn(x), want, s, t, case_name(op.name, t, dev, s.str()));
        }
}

TEST_CASE("binary float ops: broadcasting, views, scalar operands") {
  for (Device dev : lftest::devices())
    for (const Binary& op : binary_ops())
      for (DType t : float_dtypes()) {
        const double tol = lftest::tolerance(t);
        for (const auto& [sa, sb] : binary_shapes()) {
          const Tensor a = rand_tensor(sa, t, dev, ++g_seed, op.alo, op.ahi);
          const Tensor b = rand_tensor(sb, t, dev, ++g_seed, op.blo, op.bhi);
          const Shape out = broadcast(sa, sb);
          const std::vector<double> want = ref_binary(a, b, out, op.ref);
          poison(static_cast<size_t>(out.numel()) * lf::dtype_size(t), t, dev);
          check_close(op.fn(a, b), want, out, t, tol, atol_for(t),
                      case_name(op.name, t, dev, sa.str() + " " + sb.str()));
        }
        // Transposed (a) and step-sliced (b) operands, and a broadcast row on a view.
        const Tensor a = rand_tensor({9, 7}, t, dev, ++g_seed, op.alo, op.ahi).transpose(0, 1);
        const Tensor b = rand_tensor({7, 18}, t, dev, ++g_seed, op.blo, op.bhi).slice(1, 1, 18, 2);
        REQUIRE(b.shape() == Shape{7, 9});
        check_close(op.fn(a, b), ref_binary(a, b, {7, 9}, op.ref), {7, 9}, t, tol, atol_for(t),
                    case_name(op.name, t, dev, "views"));
        const Tensor row = rand_tensor({9}, t, dev, ++g_seed, op.blo, op.bhi);
        check_close(op.fn(a, row), ref_binary(a, row, {7, 9}, op.ref), {7, 9}, t, tol, atol_for(t),
                    case_name(op.name, t, dev, "view + row"));
        // Scalar right-hand operand.
        const double s = op.name == std::string("pow") ? 1.5 : 1.75;
        const Tensor x = rand_tensor({1023}, t, dev, ++g_seed, op.alo, op.ahi);
        std::vector<double> want = x.to_doubles();
        for (double& v : want) v = op.ref(v, s);
        poison(x.nbytes(), t, dev);
        check_close(op.fn_scalar(x, s), want, {1023}, t, tol, atol_for(t),
                    case_name(op.name, t, dev, "scalar"));
      }
}

TEST_CASE("binary integer ops: exact, with broadcasting and scalars") {
  for (Device dev : lftest::devices())
    for (const Binary& op : binary_ops()) {
      if (op.name == std::string("pow")) continue;  // float only
      const bool is_div = op.name == std::string("div");
      const auto ref = is_div ? std::function<double(double, double)>(int_div) : op.ref;
      for (DType t : int_dtypes()) {
        for (const auto& [sa, sb] : binary_shapes()) {
          const Tensor a = rand_tensor(sa, t, dev, ++g_seed, -100, 100);
          const Tensor b = rand_tensor(sb, t, dev, ++g_seed, is_div ? 1 : -100, 100);
          const Shape out = broadcast(sa, sb);
          poison(static_cast<size_t>(out.numel()) * lf::dtype_size(t), t, dev);
          check_equal(op.fn(a, b), ref_binary(a, b, out, ref), out, t,
                      case_name(op.name, t, dev, sa.str() + " " + sb.str()));
        }
        const Tensor x = rand_tensor({4097}, t, dev, ++g_seed, -100, 100);
        std::vector<double> want = x.to_doubles();
        for (double& v : want) v = ref(v, 3.0);
        check_equal(op.fn_scalar(x, 3.0), want, {4097}, t, case_name(op.name, t, dev, "scalar"));
      }
    }
}

TEST_CASE("integer div truncates toward zero and defines x / 0 as 0") {
  for (Device dev : lftest::devices())
    for (DType t : int_dtypes()) {
      const Tensor a = lf::from_int64s({7, -7, 7, -7, 5, 9}, {6}, t, dev);
      const Tensor b = lf::from_int64s({2, 2, -2, -2, 0, 9}, {6}, t, dev);
      check_equal(lf::div(a, b), {3, -3, -3, 3, 0, 1}, {6}, t, case_name("div", t, dev));
    }
}

TEST_CASE("clamp: float and integer dtypes") {
  for (Device dev : lftest::devices()) {
    for (DType t : float_dtypes()) {
      const Tensor x = rand_tensor({4097}, t, dev, ++g_seed);
      std::vector<double> want = x.to_doubles();
      for (double& v : want) v = std::min(std::max(v, -0.5), 0.75);
      check_close(lf::clamp(x, -0.5, 0.75), want, {4097}, t, lftest::tolerance(t), 0,
                  case_name("clamp", t, dev));
    }
    for (DType t : int_dtypes()) {
      const Tensor x = rand_tensor({7, 9}, t, dev, ++g_seed, -10, 10).transpose(0, 1);
      std::vector<double> want = x.to_doubles();
      for (double& v : want) v = std::min(std::max(v, -3.0), 5.0);
      check_equal(lf::clamp(x, -3, 5), want, {9, 7}, t, case_name("clamp", t, dev));
    }
  }
}

TEST_CASE("where: any condition dtype, every value dtype, broadcasting") {
  for (Device dev : lftest::devices())
    for (DType ct : {DType::boolean, DType::f32, DType::i32, DType::f16})
      for (DType t : all_dtypes()) {
        // cond [7, 1] (f32 conditions hold fractions: 0.25 is true), a [7, 5], b [5].
        Tensor cond;
        if (ct == DType::boolean || lf::is_integral(ct)) {
          cond = rand_tensor({7, 1}, DType::boolean, dev, ++g_seed);
          if (ct != DType::boolean) cond = lf::cast(cond, ct);
        } else {
          cond = floats({0.25f, 0.f, -1.f, 0.f, 3.f, 0.f, 1e-3f}, {7, 1}, ct, dev);
        }
        const Tensor a = rand_tensor({7, 5}, t, dev, ++g_seed, -50, 50);
        const Tensor b = rand_tensor({5}, t, dev, ++g_seed, -50, 50);
        const std::vector<double> cv = cond.to_doubles(), av = a.to_doubles(), bv = b.to_doubles();
        std::vector<double> want(35);
        for (int i = 0; i < 7; ++i)
          for (int j = 0; j < 5; ++j) want[i * 5 + j] = cv[i] != 0 ? av[i * 5 + j] : bv[j];
        poison(35 * lf::dtype_size(t), t, dev);
        check_equal(lf::where(cond, a, b), want, {7, 5}, t,
                    case_name("where", t, dev, "cond " + std::string(lf::dtype_name(ct))));
      }
}

TEST_CASE("cast: every pair of dtypes") {
  for (Device dev : lftest::devices())
    for (DType from : all_dtypes()) {
      // Fractions, negatives, exact zeros and integers; within every dtype's range.
      Tensor x;
      if (lf::is_floating(from)) {
        std::vector<float> v = {0.f, -0.f, 1.f, -1.f, 2.5f, -2.5f, 99.75f, -99.75f, 0.3f, -7.f};
        const Tensor r = rand_tensor({247}, DType::f32, dev, ++g_seed, -100, 100);
        for (double d : r.to_doubles()) v.push_back(static_cast<float>(d));
        x = floats(v, {static_cast<int64_t>(v.size())}, from, dev);
      } else if (from == DType::boolean) {
        x = rand_tensor({257}, from, dev, ++g_seed);
      } else {
        std::vector<int64_t> v = {0, 1, -1, 1000, -1000, 2047};
        for (int i = 0; i < 251; ++i) v.push_back((i * 7919) % 2001 - 1000);
        x = lf::from_int64s(v, {257}, from, dev);
      }
      const std::vector<double> xv = x.to_doubles();
      for (DType to : all_dtypes()) {
        std::vector<double> want(xv.size());
        for (size_t i = 0; i < xv.size(); ++i) {
          if (to == DType::boolean)
            want[i] = xv[i] != 0 ? 1 : 0;
          else if (lf::is_integral(to))
            want[i] = std::trunc(xv[i]);
          else
            want[i] = xv[i];
        }
        poison(xv.size() * lf::dtype_size(to), to, dev);
        const double tol = lf::is_floating(to) ? lftest::tolerance(to) : 0.0;
        check_close(lf::cast(x, to), want, x.shape(), to, tol, 0.0,
                    case_name("cast", from, dev, "to " + std::string(lf::dtype_name(to))));
      }
      // Casting a strided view.
      const Tensor v = x.slice(0, 3, 200, 3);
      std::vector<double> want = v.to_doubles();
      for (double& d : want) d = d != 0 ? 1 : 0;
      check_equal(lf::cast(v, DType::boolean), want, v.shape(), DType::boolean,
                  case_name("cast view", from, dev));
    }
}
