#pragma once
// [ Note -- the op table ]
// Every op livefuse knows is ONE row of LF_OP_TABLE. Eager CPU kernels, eager CUDA kernels,
// the JIT renderer and the CPU fused interpreter all derive from these rows:
//   name      the op's identifier (OpId::name, and the string "name")
//   arity     number of tensor inputs (-1: variadic, see the op's builder in ops.cpp)
//   category  Elementwise | Reduction | Normalization | Matmul | Layout | Gather | Opaque
//   flags     kInt: also defined for integer dtypes; kF: float only
//   expr      for Elementwise rows: a C expression over the compute-type operands a, b, c and
//             the scalar attributes s0, s1, using the helpers of kernels/device/lf_math.cuh.
//             The same tokens are compiled by g++ (CPU), nvcc (eager CUDA) and, as the string
//             #expr, by NVRTC (fused kernels) -- which is why fused == eager numerics.
// Scalar variants (add(x, 2.0)) are the binary row with attrs.scalar_operand set: b = s0.
// Comparisons (lt .. eq) compute in their operands' type and produce bool (is_comparison).
#include <cstdint>
#include <string_view>

#define LF_OP_TABLE(X)                                                         \
  X(neg, 1, Elementwise, kInt, (-a))                                           \
  X(abs, 1, Elementwise, kInt, lf_abs(a))                                      \
  X(exp, 1, Elementwise, kF, lf_exp(a))                                        \
  X(log, 1, Elementwise, kF, lf_log(a))                                        \
  X(sqrt, 1, Elementwise, kF, lf_sqrt(a))                                      \
  X(rsqrt, 1, Elementwise, kF, lf_rsqrt(a))                                    \
  X(tanh, 1, Elementwise, kF, lf_tanh(a))                                      \
  X(sigmoid, 1, Elementwise, kF, lf_sigmoid(a))                                \
  X(relu, 1, Elementwise, kInt, lf_relu(a))                                    \
  X(gelu, 1, Elementwise, kF, lf_gelu(a))                                      \
  X(gelu_tanh, 1, Elementwise, kF, lf_gelu_tanh(a))                            \
  X(silu, 1, Elementwise, kF, lf_silu(a))                                      \
  X(erf, 1, Elementwise, kF, lf_erf(a))                                        \
  X(sin, 1, Elementwise, kF, lf_sin(a))                                        \
  X(cos, 1, Elementwise, kF, lf_cos(a))                                        \
  X(cast, 1, Elementwise, kInt, (a))                                           \
  X(clamp, 1, Elementwise, kInt, lf_min(lf_max(a, s0), s1))                    \
  X(add, 2, Elementwise, kInt, (a + b))                                        \
  X(sub, 2, Elementwise, kInt, (a - b))                                        \
  X(mul, 2, Elementwise, kInt, (a * b))                                        \
  X(div, 2, Elementwise, kInt, lf_div(a, b))                                   \
  X(maximum, 2, Elementwise, kInt, lf_max(a, b))                               \
  X(minimum, 2, Elementwise, kInt, lf_min(a, b))                               \
  X(pow, 2, Elementwise, kF, lf_pow(a, b))                                     \
  X(lt, 2, Elementwise, kInt, (a < b))                                         \
  X(le, 2, Elementwise, kInt, (a <= b))                                        \
  X(gt, 2, Elementwise, kInt, (a > b))                                         \
  X(ge, 2, Elementwise, kInt, (a >= b))                                        \
  X(eq, 2, Elementwise, kInt, (a == b))                                        \
  X(where, 3, Elementwise, kInt, (a != 0 ? b : c))                             \
  X(custom, -1, Elementwise, kF, (a))                                          \
  X(sum, 1, Reduction, kInt, 0)                                                \
  X(mean, 1, Reduction, kF, 0)                                                 \
  X(max, 1, Reduction, kInt, 0)                                                \
  X(argmax, 1, Reduction, kInt, 0)                                             \
  X(topk, 1, Reduction, kF, 0)                                                 \
  X(softmax, -1, Normalization, kF, 0)                                         \
  X(layer_norm, -1, Normalization, kF, 0)                                      \
  X(rms_norm, -1, Normalization, kF, 0)                                        \
  X(matmul, 2, Matmul, kF, 0)                                                  \
  X(linear, -1, Matmul, kF, 0)                                                 \
  X(reshape, 1, Layout, kInt, 0)                                               \
  X(permute, 1, Layout, kInt, 0)                                               \
  X(slice, 1, Layout, kInt, 0)                                                 \
  X(expand, 1, Layout, kInt, 0)                                                \
  X(contiguous, 1, Layout, kInt, 0)                                            \
  X(concat, -1, Layout, kInt, 0)                                               \
  X(embedding, 2, Gather, kF, 0)                                               \
  X(opaque, -1, Opaque, kInt, 0)

namespace livefuse {

enum class OpCategory : uint8_t { Elementwise, Reduction, Normalization, Matmul, Layout, Gather, Opaque };

enum class OpId : uint16_t {
#define LF_X(name, arity, cat, flags, expr) name,
  LF_OP_TABLE(LF_X)
#undef LF_X
      kCount
};

struct OpInfo {
  std::string_view name;
  int arity;
  OpCategory category;
  bool int_ok;
  std::string_view expr;  // elementwise expression as source text (for the JIT)
};

namespace detail {
inline constexpr bool kInt = true;
inline constexpr bool kF = false;
inline constexpr OpInfo kOpInfos[] = {
#define LF_X(name, arity, cat, flags, expr) {#name, arity, OpCategory::cat, flags, #expr},
    LF_OP_TABLE(LF_X)
#undef LF_X
};
}  // namespace detail

constexpr const OpInfo& op_info(OpId id) { return detail::kOpInfos[static_cast<int>(id)]; }
constexpr std::string_view op_name(OpId id) { return op_info(id).name; }
// Rows whose result is bool whatever their operands' dtype: infer_outputs gives them a bool
// output, and every backend computes them in the operands' type, not the output's.
constexpr bool is_comparison(OpId id) {
  return id == OpId::lt || id == OpId::le || id == OpId::gt || id == OpId::ge || id == OpId::eq;
}
std::string_view category_name(OpCategory c);

}  // namespace livefuse
