#pragma once
// Internal to kernels/cuda: matmul / linear operands as strided matrix views, shared by the
// cuBLASLt path (gemm_cublaslt.cpp) and the few-row GEMV's host side (gemv_host.cpp).
#include <cstdint>

#include "kernels/cuda/gemv.hpp"
#include "livefuse/tensor.hpp"

namespace livefuse::cuda::detail {

// A strided matrix view [R, C] (plus batch dims) of one operand.
struct MatView {
  const void* ptr;
  Shape shape;  // [..batch, R, C]
  Strides strides;
};

inline MatView view_of(const Tensor& t) { return {t.impl()->data(), t.shape(), t.strides()}; }

// linear(x, w)'s operands as matmul views: x [.., K] (a vector as [1, K]) and W[N, K]^T as a
// [K, N] view (strides swapped, no copy).
inline void linear_views(const Tensor& x, const Tensor& w, MatView* a, MatView* b) {
  *a = view_of(x);
  if (a->shape.rank == 1) {  // [K] -> [1, K]
    a->shape = Shape{1, x.shape()[0]};
    a->strides = Strides{x.shape()[0], x.strides()[0]};
  }
  *b = MatView{w.impl()->data(), Shape{w.shape()[1], w.shape()[0]},
               Strides{w.strides()[1], w.strides()[0]}};
}

struct OutView {
  void* ptr;
  Shape shape;  // [..batch, M, N], dense
  DType dtype;
  Device device;
};

// `shape` (a vector as [1, N]) with `like`'s dtype and device, no pointer yet; out_view: `out`.
OutView out_view_of(const Shape& shape, const Tensor& like);
OutView out_view(const Tensor& out);

// The epilogue's operands as gemm_nd reads them: the bias a dense, 16-byte aligned vector of the
// output's dtype; the residual laid out as the output (dense, same shape and dtype, aligned),
// never with an activation (`act` != 0). False: the GEMM + tail kernel path is left to run.
bool epilogue_operands(const Tensor& out, uint8_t act, const Tensor* bias, const Tensor* residual,
                       const void** bias_ptr);

// The rows of `a` (its leading dims, [.., M]) as one evenly spaced run read along K: how many and
// their stride (k for a single row). False when they do not fold to one run.
bool fold_rows(const MatView& a, int64_t k, int64_t* rows, int64_t* row_stride);

// The product as a few-row GEMV (gemv.hpp) when a's rows [..., M] fold to at most
// kGemvMaxRows evenly spaced rows read along K, b is one [K, N] matrix whose columns are read
// along K (a linear's weight, W[N, K]^T) and the output is dense: *g then holds everything but
// the epilogue (and, with `norm`, the norm's operands). False leaves the product to cuBLASLt.
bool gemv_args_for(const MatView& a, const MatView& b, const OutView& out, GemvArgs* g,
                   GemvNorm norm = GemvNorm::none);

// A batched product of at most kGemvColsMaxRows rows a batch (a decode step's eager q·kᵀ and
// p·v, one query row per head) as one launch of livefuse's few-row kernels, when its batch dims
// fold to one stride per operand: the GEMV where b's columns run along K (kᵀ), gemv_cols where
// its rows do (v). No bias, activation or residual. False leaves it to cuBLASLt.
bool launch_few_row_batched(const MatView& a, const MatView& b, const OutView& out, cudaStream_t s);

}  // namespace livefuse::cuda::detail
