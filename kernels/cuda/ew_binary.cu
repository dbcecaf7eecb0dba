// Elementwise rows of arity 2 (add, mul, pow, ...), tensor or immediate right operand.
#include <cstring>

#include "kernels/cuda/elementwise.cuh"

namespace livefuse::cuda {
namespace {
struct Binary {
  static constexpr bool take(int arity, bool, OpId) { return arity == 2; }
};
}  // namespace

bool launch_ew_binary(const EwPlan& p, cudaStream_t s) { return launch_group<Binary>(p, s); }

void make_bare_add_f32(BareLaunch& bl, const float* a, const float* b, float* out, int64_t n) {
  using Args = VecArgs<F32, float>;
  static_assert(sizeof(Args) <= sizeof(bl.args) && alignof(Args) <= 16);
  EwPlan p;
  p.op = OpId::add;
  p.arity = 2;
  p.out = out;
  p.numel = n;
  p.in[0] = a;
  p.in[1] = b;
  const Args args = make_vec_args<EwOp_add, F32, float>(p);
  std::memcpy(bl.args, &args, sizeof(Args));
  bl.argv[0] = bl.args;
  bl.fn = reinterpret_cast<const void*>(&ew_vec_kernel<EwOp_add, F32, float>);
  bl.grid = dim3(grid_for(n / 4 > 0 ? n / 4 : 1));
  bl.block = dim3(kEwThreads);
}

}  // namespace livefuse::cuda
