#pragma once
// Eager reductions over one dim (sum, mean, max, argmax), on any strided input.
#include <cuda_runtime_api.h>

#include "kernels/cuda/strided.hpp"
#include "livefuse/dtype.hpp"

namespace livefuse::cuda {

enum class ReduceKind : uint8_t { sum, mean, max, argmax };

struct ReducePlan {
  ReduceKind kind = ReduceKind::sum;
  bool int_acc = false;  // accumulate in int64 (integer / bool input) instead of float
  const void* in = nullptr;
  DType in_dtype = DType::f32;
  void* out = nullptr;  // dense, one element per output
  DType out_dtype = DType::f32;
  int64_t n_out = 0;     // outputs
  int64_t r = 0;         // reduced length
  int64_t r_stride = 0;  // input stride along the reduced dim
  // Over the kept dims (output order): operand 0 = the input's strides.
  StridedLayout outer;
};

void launch_reduce(const ReducePlan& p, cudaStream_t s);

}  // namespace livefuse::cuda
