#pragma once
#include <vector>

#include "livefuse/tensor.hpp"

namespace livefuse {
// A tensor of `dtype` on `device` holding `v` (converted; dense row-major).
Tensor from_doubles_impl(const std::vector<double>& v, const Shape& shape, DType dtype,
                         Device device);
}  // namespace livefuse
