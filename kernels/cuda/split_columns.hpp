#pragma once
// Column split: a dense row-major [M, Ntot] matrix into dense [M, N_i] matrices, the columns
// [c_i, c_i + N_i) of each row going to part i, in one launch. A merged sibling GEMM (Q/K/V over
// one input, planner/pass_gemm_siblings.cpp) writes the product once and this hands every
// sibling its dense output, as eager gives it. Elements are copied as bits, in the widest word
// the widths and addresses allow (split_columns.cu).
#include <cstdint>

namespace livefuse::cuda {

inline constexpr int kMaxSplitParts = 8;

struct SplitColumnsArgs {
  const void* src = nullptr;
  int64_t rows = 0, cols = 0;  // src is [rows, cols]
  int parts = 0;
  void* dst[kMaxSplitParts] = {};
  int64_t begin[kMaxSplitParts + 1] = {};  // part i takes columns [begin[i], begin[i + 1])
  int elem_bytes = 4;
};

void split_columns(const SplitColumnsArgs& a, void* stream);

}  // namespace livefuse::cuda
