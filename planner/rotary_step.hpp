#pragma once
// Binding a RotaryStep: the kernels' 4-D strided operands (kernels/rotary_args.hpp) from the
// bound tensors, with the shapes checked as bound (one the kernels do not take throws
// livefuse::Error and the window runs eagerly).
#include <span>

#include "kernels/rotary_args.hpp"
#include "livefuse/tensor.hpp"
#include "planner/plan.hpp"

namespace livefuse::planner {

// out: the dense result, of x's shape; cos and sin broadcast to it.
RotaryArgs rotary_args(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out);

// Every part of a rotary step bound into out[0..n) (at most kRotaryMaxParts), each result
// given storage and, with `results`, kept in results[0..n). Returns n.
int bind_rotary(const RotaryStep& r, std::span<const Tensor> values, RotaryArgs* out, Tensor* results = nullptr);

}  // namespace livefuse::planner
