// Operand views as cuBLASLt matrices (gemm_lt.hpp).
#include <algorithm>

#include "kernels/cuda/gemm_lt.hpp"

namespace livefuse::cuda {

bool as_transposed(int64_t R, int64_t C, int64_t sr, int64_t sc, LtMat* m) {
  // A dim of size 1 is never stepped: its stride may be anything, so pick one that fits.
  if (C == 1) sc = 1;
  if (R == 1) sr = std::max<int64_t>(C, 1);
  if (sc == 1 && sr >= std::max<int64_t>(C, 1)) {  // row-major: memory is view^T col-major
    m->op = CUBLAS_OP_N;
    m->rows = C, m->cols = R, m->ld = sr;
    return true;
  }
  if (sr == 1 && sc >= std::max<int64_t>(R, 1)) {  // column-major view: use op = T
    m->op = CUBLAS_OP_T;
    m->rows = R, m->cols = C, m->ld = sc;
    return true;
  }
  return false;
}

}  // namespace livefuse::cuda
