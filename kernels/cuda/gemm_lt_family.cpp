#include "kernels/cuda/gemm_lt_family.hpp"

#include <algorithm>

namespace livefuse::cuda {
namespace {

int64_t pow2_ceil(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

// At least `need`, with the byte alignment of `x` elements of `es` bytes (up to 256, what
// cuBLASLt is told: gemm_lt_operands.hpp): a whole number of 256 elements (a multiple of 256
// bytes in every dtype), plus x's alignment in elements when it is below 256 bytes. Lengths of
// one alignment share the value.
int64_t canon(int64_t x, int64_t need, int64_t es) {
  constexpr int64_t kQ = 256;
  const int64_t base = (std::max<int64_t>(need, 1) + kQ - 1) / kQ * kQ;
  int64_t a = kQ;  // bytes
  while (a > es && (x * es) % a != 0) a /= 2;
  return a == kQ ? base : base + a / es;
}

void resize(LtMat& mat, int64_t op_rows, int64_t op_cols, int64_t es) {
  const bool n = mat.op == CUBLAS_OP_N;
  mat.rows = n ? op_rows : op_cols;
  mat.cols = n ? op_cols : op_rows;
  mat.ld = canon(mat.ld, mat.rows, es);
}

}  // namespace

bool in_few_row_family(const LtCall& c) {
  return c.batch > 1 && std::min(c.m, c.n) <= kFamilyRows && c.c == nullptr && !c.d_f32;
}

LtCall family_representative(const LtCall& c) {
  const int64_t es = static_cast<int64_t>(dtype_size(c.dtype)), es_d = static_cast<int64_t>(dtype_size(d_dtype(c)));
  LtCall r = c;
  r.m = pow2_ceil(c.m);
  r.n = pow2_ceil(c.n);
  r.k = pow2_ceil(c.k);
  resize(r.a, r.m, r.k, es);  // op(A) is m x k
  resize(r.b, r.k, r.n, es);  // op(B) is k x n
  r.ldd = canon(c.ldd, r.m, es_d);
  const auto stride = [](int64_t s, int64_t need, int64_t e) { return s == 0 ? 0 : canon(s, need, e); };
  r.stride_a = stride(c.stride_a, r.a.ld * r.a.cols, es);
  r.stride_b = stride(c.stride_b, r.b.ld * r.b.cols, es);
  r.stride_d = stride(c.stride_d, r.ldd * r.n, es_d);
  return r;
}

}  // namespace livefuse::cuda
