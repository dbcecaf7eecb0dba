// A wrapped kernel of the program's own that rejects some inputs (it throws from its launch):
// the error comes out of that kernel's own call, as in eager execution, the iteration's other
// results are right, and no plan is retired for one bad input.
#include <stdexcept>

#include "user_util.hpp"

namespace {
constexpr int64_t D = 32;

// out = in * 3 on the CPU; on a GPU a device-to-device copy times nothing (out = in), enough
// for a kernel the runtime cannot look into. Rejects inputs with an odd number of rows.
float g_factor = 3.0f;
const lf::OpaqueKernel& kernel() {
  static const lf::OpaqueKernel k = lf::wrap_kernel("user_even_rows", [](const lf::KernelArgs& a, void* stream) {
    if (a.input_shapes[0][0] % 2 != 0)
      throw std::invalid_argument("user_even_rows: rows must be even, got " +
                                  std::to_string(a.input_shapes[0][0]));
    const int64_t n = a.input_shapes[0].numel();
#if USERS_HAVE_CUDA
    if (stream) {
      cudaMemcpyAsync(a.outputs[0], a.inputs[0], n * sizeof(float), cudaMemcpyDeviceToDevice,
                      static_cast<cudaStream_t>(stream));
      return;
    }
#endif
    (void)stream;
    for (int64_t i = 0; i < n; ++i)
      static_cast<float*>(a.outputs[0])[i] = static_cast<const float*>(a.inputs[0])[i] * g_factor;
  });
  return k;
}
float factor() { return users::device().is_cuda() ? 1.0f : g_factor; }
}  // namespace

int main() {
  users::Engagement e;
  int thrown = 0, bad = 0;
  users::Loop loop(200, &e);
  for (int it = 0; loop.more(it); ++it) {
    const int64_t rows = it % 9 == 8 ? 3 : 4;
    bad += rows == 3;
    const std::vector<float> xv = users::values(rows * D, it % 4);
    const lf::Tensor x = lf::from_floats(xv, {rows, D}, lf::DType::f32, users::device());
    const lf::Tensor h = lf::tanh(lf::add(lf::mul(x, 0.5), 1.0));
    lf::Tensor k;
    try {
      k = kernel()({h}, {{h.shape(), lf::DType::f32}})[0];
    } catch (const lf::Error& err) {
      ++thrown;
      users::check(rows == 3, std::string("the kernel threw for a good input: ") + err.what());
      users::check(std::string(err.what()).find("rows must be even") != std::string::npos,
                   std::string("the error does not carry the kernel's message: ") + err.what());
    }
    // Whatever the kernel did, the values computed before it are there.
    std::vector<float> hv(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) hv[i] = std::tanh(xv[i] * 0.5f + 1.0f);
    users::check(users::close(h.to_floats(), hv), "the value before the kernel, iteration " + std::to_string(it));
    if (rows == 3) continue;
    const lf::Tensor y = lf::sigmoid(lf::mul(k, 2.0));
    std::vector<float> want(hv.size());
    for (size_t i = 0; i < hv.size(); ++i) want[i] = 1.0f / (1.0f + std::exp(-hv[i] * factor() * 2.0f));
    users::check(users::close(y.to_floats(), want, 1e-5), "after the kernel, iteration " + std::to_string(it));
  }
  users::check(thrown == bad, "errors thrown by the kernel's own call: " + std::to_string(thrown) +
                                  " of " + std::to_string(bad));
  for (const lf::PlanInfo& p : lf::inspect().plans)
    users::check(p.state != "failed", "a plan was marked failed: " + p.last_reason);
  e.expect("a user kernel that rejects some inputs", 0.2);
  return users::finish("users-kernel-errors");
}
