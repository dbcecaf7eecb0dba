#pragma once
// One cuBLASLt matmul call in cuBLASLt's own (column-major) terms; gemm_lt.cpp keeps the
// handle, the per-shape plans and the per-stream workspaces behind it.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "livefuse/dtype.hpp"

namespace livefuse::cuda {

// A matrix operand for cuBLASLt: already in its (column-major) terms.
struct LtMat {
  const void* ptr = nullptr;
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t rows = 0, cols = 0, ld = 0;  // of the stored matrix, before op
};

// Row-major [R, C] view with strides (sr, sc) as a column-major cuBLASLt matrix whose op()
// is the transpose of the view, i.e. op(M) = view^T with shape [C, R]. False if the view has
// no unit stride (it must be copied).
bool as_transposed(int64_t R, int64_t C, int64_t sr, int64_t sc, LtMat* m);

// The activation cuBLASLt applies after the (bias and) product, in its epilogue. Its GELU is
// the tanh approximation (gelu_tanh), never erf gelu.
enum class LtAct : uint8_t { none, relu, gelu_tanh };

// D = act(op(A) op(B) (+ bias per row of D)) (+ C), `batch` strided matrices. C, when set, is
// laid out as D (the residual of a layer: one rounding instead of the GEMM's and the add's).
struct LtCall {
  DType dtype = DType::f32;
  bool tf32 = false;
  LtMat a, b;  // cuBLASLt's A (our B) and B (our A)
  void* d = nullptr;
  int64_t m = 0, n = 0, k = 0, ldd = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_d = 0;
  const void* bias = nullptr;
  const void* c = nullptr;  // added with beta = 1; never with an activation (it would apply after C)
  LtAct act = LtAct::none;
};

// Enqueues the call on `s`. Allocates nothing after the stream's first GEMM.
void lt_matmul(const LtCall& c, cudaStream_t s);

}  // namespace livefuse::cuda
