#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "livefuse/tensor.hpp"

namespace livefuse {
// A tensor of `dtype` on `device` holding `v` (converted; dense row-major).
Tensor from_doubles_impl(const std::vector<double>& v, const Shape& shape, DType dtype,
                         Device device);
// A tensor of `dtype` on `device` whose element k (dense row-major) is value(k), converted;
// computed in parallel on the host, so value must be a pure function of k.
Tensor from_index_fn(const Shape& shape, DType dtype, Device device,
                     const std::function<double(int64_t)>& value);
}  // namespace livefuse
