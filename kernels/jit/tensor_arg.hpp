#pragma once
#include "kernels/jit/geometry.hpp"
#include "livefuse/tensor.hpp"

namespace livefuse::jit {
// A bound (non-pending) tensor as a kernel operand.
inline TensorArg tensor_arg(const Tensor& t) {
  return TensorArg{t.impl()->data(), t.dtype(), t.shape(), t.strides()};
}
}  // namespace livefuse::jit
