#pragma once
// OpCall: one call of one op, as it travels through Executor::submit. Internal contract
// between runtime/, monitor/, planner/ and kernels/.
//
// [ Note -- attribute conventions ] (validated and normalised by runtime/src/infer.cpp, so
// every consumer sees canonical values: dims non-negative, reshape fully resolved)
//   cast          attrs.dtype = target dtype
//   clamp         f[0] = lo, f[1] = hi
//   binary op     scalar_operand = true: one tensor input, b = f[0]
//   sum/mean/max/argmax   i[0] = dim, i[1] = keepdim
//   topk          i[0] = k (over the last dim); outputs values, indices (i64)
//   softmax       f[0] = scale; inputs (x) or (x, mask); i[0] = has_mask
//   layer_norm    f[0] = eps; inputs x [, w] [, b]; i[0] = has_weight, i[1] = has_bias
//   rms_norm      f[0] = eps; inputs x [, w]; i[0] = has_weight
//   matmul        i[1] = tf32 allowed (i[0] unused)
//   linear        inputs x, w [, b]; i[0] = has_bias, i[1] = tf32 allowed
//   reshape       i[0..ni) = target shape
//   permute       i[0..ni) = permutation
//   slice         i = {dim, start, end, step}, start/end clamped, step > 0
//   expand        i[0..ni) = target shape, -1 resolved
//   contiguous    -
//   concat        i[0] = dim; inputs variadic
//   embedding     inputs (weight, ids)
//   custom        custom_id = CustomOp id; inputs: its arity
//   opaque        custom_id = OpaqueKernel id; out_specs = outputs
#include <array>
#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <span>
#include <vector>

#include "livefuse/custom.hpp"
#include "livefuse/detail/op_table.hpp"
#include "livefuse/tensor.hpp"

namespace livefuse {

struct Attrs {
  std::array<int64_t, 10> i{};
  std::array<double, 2> f{};
  uint8_t ni = 0;
  uint8_t nf = 0;
  DType dtype = DType::f32;
  bool scalar_operand = false;
  uint32_t custom_id = 0;

  void push_int(int64_t v) { i[ni++] = v; }
  void push_float(double v) { f[nf++] = v; }
  // Structural hash: every field that changes what the op computes.
  uint64_t hash() const;
  bool operator==(const Attrs& o) const;
};

using TensorList = boost::container::small_vector<Tensor, 4>;

struct OpCall {
  OpId op = OpId::kCount;
  TensorList inputs;
  Attrs attrs;
  const std::vector<OutputSpec>* out_specs = nullptr;  // opaque ops only

  OpCategory category() const { return op_info(op).category; }
};

// What an op produces, computed (and validated) before anything runs.
struct OutputInfo {
  Shape shape;
  DType dtype = DType::f32;
};
using OutputInfos = boost::container::small_vector<OutputInfo, 2>;

// Validates `call` (throwing livefuse::Error naming op, shapes, dtypes and what was expected)
// and normalises its attrs in place; returns its outputs' shapes and dtypes.
OutputInfos infer_outputs(OpCall& call);
// The one input check of infer_outputs that depends on more than the input's dtype, shape and
// device: it has storage, or is pending (a deferred value), or is empty. InferMemo re-runs it
// on every call it answers from memory.
inline bool has_data(const TensorImpl& t) {
  return t.storage != nullptr || t.pending != nullptr || t.numel() == 0;
}

// "add(f32[2, 3], f32[3])" for messages.
std::string describe_call(const OpCall& call);

}  // namespace livefuse
