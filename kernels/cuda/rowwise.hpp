#pragma once
// Row-wise ops over the last dim: softmax, layer_norm, rms_norm. Rows are found through a
// StridedLayout over the leading dims, so views (sliced, permuted leading dims, a strided last
// dim) run without a copy; contiguous, aligned rows take 16-byte vector loads.
#include <cuda_runtime_api.h>

#include "kernels/cuda/strided.hpp"
#include "livefuse/dtype.hpp"

namespace livefuse::cuda {

// A 1-D operand along the row (weight, bias) or a broadcast operand (mask).
struct RowOperand {
  const void* ptr = nullptr;  // null: absent
  DType dtype = DType::f32;
  int64_t col_stride = 0;
};

struct RowPlan {
  const void* x = nullptr;
  DType dtype = DType::f32;  // of x and out
  void* out = nullptr;       // dense [rows, n]
  int64_t rows = 0, n = 0;
  int64_t x_col_stride = 1;
  // Over the leading dims: operand 0 = x's strides, operand 1 = mask's (0 where broadcast).
  StridedLayout outer;
  RowOperand mask;          // softmax
  RowOperand weight, bias;  // norms (stride along the row; no row offset)
  float scale = 1.0f;       // softmax
  float eps = 0.0f;         // norms
};

void launch_softmax(const RowPlan& p, cudaStream_t s);
void launch_layer_norm(const RowPlan& p, cudaStream_t s);
void launch_rms_norm(const RowPlan& p, cudaStream_t s);

}  // namespace livefuse::cuda
