// A linear as K-split partial products in f32 (gemm.hpp, run_linear_partials): one
// strided-batched cuBLASLt call whose batch s multiplies K columns [s K/S, (s+1) K/S) of the
// input rows by the same columns of the weight -- both read in place, batch strides of K/S
// elements -- into a dense f32 [rows, N]. That is what cuBLASLt's own split-K hands its
// reduction kernel; here the consumer of the product takes it instead.
#include <cstdint>

#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/gemm_views.hpp"

namespace livefuse::cuda {

bool run_linear_partials(const OpCall& call, int slices, float* partials, void* stream) {
  if (call.op != OpId::linear || slices < 2 || !partials) return false;
  const Tensor &x = call.inputs[0], &w = call.inputs[1];
  if (x.rank() < 1 || w.rank() != 2 || !w.is_contiguous() || x.dtype() != w.dtype()) return false;
  if (x.dtype() != DType::f16 && x.dtype() != DType::bf16) return false;
  const int64_t n = w.shape()[0], k = w.shape()[1];
  if (n == 0 || k == 0 || k % (8 * slices) != 0) return false;
  detail::MatView a{}, b{};
  detail::linear_views(x, w, &a, &b);
  const int ra = a.shape.rank;
  if (a.strides[ra - 1] != 1) return false;
  int64_t rows = 0, row_stride = 0;
  if (!detail::fold_rows(a, k, &rows, &row_stride) || rows == 0) return false;
  const int64_t ks = k / slices;
  LtCall c;
  c.dtype = x.dtype();
  c.d_f32 = true;
  c.m = n, c.n = rows, c.k = ks, c.ldd = n;
  if (!as_transposed(k, n, b.strides[0], b.strides[1], &c.a) || !as_transposed(rows, k, row_stride, 1, &c.b))
    return false;
  // Both stored matrices run along K in their rows; a slice takes ks of them.
  if (c.a.op != CUBLAS_OP_T || c.a.rows != k || c.b.op != CUBLAS_OP_N || c.b.rows != k) return false;
  c.a.rows = ks, c.b.rows = ks;
  c.a.ptr = w.impl()->data();
  c.b.ptr = x.impl()->data();
  c.d = partials;
  c.batch = slices;
  c.stride_a = ks, c.stride_b = ks, c.stride_d = rows * n;
  lt_matmul(c, static_cast<cudaStream_t>(stream));
  return true;
}

int linear_split_k(int64_t rows, int64_t n, int64_t k, DType dtype, bool bias) {
  if (rows <= 0 || n <= 0 || k <= 0) return 1;
  // Dense, 256-byte aligned operands: the heuristic reads the pointers for their alignment.
  const void* aligned = reinterpret_cast<const void*>(uintptr_t{1} << 20);
  LtCall c;
  c.dtype = dtype;
  c.m = n, c.n = rows, c.k = k, c.ldd = n;
  c.a = {aligned, CUBLAS_OP_T, k, n, k};
  c.b = {aligned, CUBLAS_OP_N, k, rows, k};
  c.d = const_cast<void*>(aligned);
  c.bias = bias ? aligned : nullptr;
  const GemmTuneRecord top = lt_top1_algo(c);
  const int splits = static_cast<int>(top.split_k);
  if (splits < 2 || top.reduction == 0 || splits > 64 || k % (8 * splits) != 0) return 1;
  return splits;
}

}  // namespace livefuse::cuda
