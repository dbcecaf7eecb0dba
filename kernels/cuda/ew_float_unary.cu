// Elementwise rows of arity 1 defined only for floats (exp, gelu, ...), plus where.
#include "kernels/cuda/elementwise.cuh"

namespace livefuse::cuda {
namespace {
struct FloatUnary {
  static constexpr bool take(int arity, bool int_ok, OpId id) {
    return (arity == 1 && !int_ok) || id == OpId::where;
  }
};
}  // namespace

bool launch_ew_float_unary(const EwPlan& p, cudaStream_t s) {
  return launch_group<FloatUnary>(p, s);
}

}  // namespace livefuse::cuda
