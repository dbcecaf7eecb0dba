// Custom elementwise ops (registered with a CUDA expression and a CPU function) and opaque
// kernels, run like built-ins.
#include <cmath>

#include "tests/ops/ops_util.hpp"

using namespace opstest;

namespace {
uint64_t g_seed = 21000;

float softsign(float a, float, float) { return a / (1.0f + std::fabs(a)); }
float fma3(float a, float b, float c) { return a * b + c; }
float hypot2(float a, float b, float) { return std::sqrt(a * a + b * b); }
}  // namespace

TEST_CASE("custom elementwise ops of arity 1, 2, 3 with broadcasting") {
  const lf::CustomOp op1 =
      lf::register_elementwise("test_softsign", 1, "a / (1.0f + lf_abs(a))", softsign);
  const lf::CustomOp op2 =
      lf::register_elementwise("test_hypot", 2, "lf_sqrt(a * a + b * b)", hypot2);
  const lf::CustomOp op3 = lf::register_elementwise("test_fma3", 3, "a * b + c", fma3);
  for (Device dev : lftest::devices())
    for (DType t : float_dtypes()) {
      const double tol = lftest::tolerance(t);
      const Tensor a = rand_tensor({7, 1023}, t, dev, ++g_seed);
      const Tensor b = rand_tensor({1023}, t, dev, ++g_seed);
      const Tensor c = rand_tensor({7, 1}, t, dev, ++g_seed);
      const std::vector<double> av = a.to_doubles(), bv = b.to_doubles(), cv = c.to_doubles();
      std::vector<double> w1(av.size()), w2(av.size()), w3(av.size());
      for (size_t i = 0; i < av.size(); ++i) {
        const double x = av[i], y = bv[i % 1023], z = cv[i / 1023];
        w1[i] = x / (1 + std::fabs(x));
        w2[i] = std::sqrt(x * x + y * y);
        w3[i] = x * y + z;
      }
      poison(a.nbytes(), t, dev);
      check_close(op1(a), w1, {7, 1023}, t, tol, 1e-6, case_name("custom softsign", t, dev));
      check_close(op2(a, b), w2, {7, 1023}, t, tol, 1e-6, case_name("custom hypot", t, dev));
      check_close(op3(a, b, c), w3, {7, 1023}, t, tol, tol, case_name("custom fma3", t, dev));
      // A strided view goes through custom ops too.
      const Tensor at = a.transpose(0, 1);
      const std::vector<double> atv = at.to_doubles();
      std::vector<double> wt(atv.size());
      for (size_t i = 0; i < atv.size(); ++i) wt[i] = atv[i] / (1 + std::fabs(atv[i]));
      check_close(op1(at), wt, {1023, 7}, t, tol, 1e-6,
                  case_name("custom softsign", t, dev, "view"));
    }
}

TEST_CASE("opaque CPU kernel sees dense inputs and fills its outputs") {
  const lf::OpaqueKernel k =
      lf::wrap_kernel("test_scale_rows", [](const lf::KernelArgs& args, void* stream) {
        REQUIRE(stream == nullptr);
        const auto* x = static_cast<const float*>(args.inputs[0]);
        auto* y = static_cast<float*>(args.outputs[0]);
        auto* s = static_cast<float*>(args.outputs[1]);
        const int64_t rows = args.input_shapes[0][0], cols = args.input_shapes[0][1];
        for (int64_t r = 0; r < rows; ++r) {
          float acc = 0;
          for (int64_t c = 0; c < cols; ++c) {
            y[r * cols + c] = 2.0f * x[r * cols + c];
            acc += x[r * cols + c];
          }
          s[r] = acc;
        }
      });
  const Tensor x =
      rand_tensor({9, 5}, DType::f32, Device::cpu(), ++g_seed).transpose(0, 1);  // [5, 9]
  const std::vector<Tensor> out = k({x}, {{{5, 9}, DType::f32}, {{5}, DType::f32}});
  REQUIRE(out.size() == 2);
  const std::vector<double> xv = x.to_doubles();
  std::vector<double> w0(xv.size()), w1(5, 0.0);
  for (size_t i = 0; i < xv.size(); ++i) {
    w0[i] = 2 * xv[i];
    w1[i / 9] += xv[i];
  }
  check_close(out[0], w0, {5, 9}, DType::f32, 1e-6, 1e-6, "opaque out 0");
  check_close(out[1], w1, {5}, DType::f32, 1e-5, 1e-5, "opaque out 1");
}
