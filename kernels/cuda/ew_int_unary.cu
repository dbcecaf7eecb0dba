// Elementwise rows of arity 1 that are also defined for integers (neg, abs, relu, cast, clamp).
#include "kernels/cuda/elementwise.cuh"

namespace livefuse::cuda {
namespace {
struct IntUnary {
  static constexpr bool take(int arity, bool int_ok, OpId) { return arity == 1 && int_ok; }
};
}  // namespace

bool launch_ew_int_unary(const EwPlan& p, cudaStream_t s) { return launch_group<IntUnary>(p, s); }

}  // namespace livefuse::cuda
