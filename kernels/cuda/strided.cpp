#include "kernels/cuda/strided.hpp"

#include <cstdlib>
#include <limits>

#include "livefuse/error.hpp"

namespace livefuse::cuda {

StridedLayout make_layout(const Shape& shape) {
  StridedLayout l;
  l.rank = shape.rank;
  for (int d = 0; d < shape.rank; ++d) l.sizes[d] = shape[d];
  return l;
}

void add_operand(StridedLayout& l, const Shape& shape, const Strides& strides) {
  LF_ASSERT(l.n_operands < kMaxOperands, "too many operands for a strided layout");
  LF_ASSERT(shape.rank <= l.rank, "operand rank ", shape.rank, " above layout rank ", l.rank);
  int64_t* st = l.strides[l.n_operands++];
  const int lead = l.rank - shape.rank;
  for (int d = 0; d < l.rank; ++d) {
    if (d < lead) {
      st[d] = 0;
    } else {
      const int sd = d - lead;
      LF_ASSERT(shape[sd] == l.sizes[d] || shape[sd] == 1, "operand shape ", shape.str(),
                " does not broadcast to the layout");
      st[d] = shape[sd] == 1 ? 0 : strides[sd];
    }
  }
}

void add_dense_operand(StridedLayout& l) {
  LF_ASSERT(l.n_operands < kMaxOperands, "too many operands for a strided layout");
  int64_t* st = l.strides[l.n_operands++];
  int64_t s = 1;
  for (int d = l.rank - 1; d >= 0; --d) {
    st[d] = l.sizes[d] == 1 ? 0 : s;
    s *= l.sizes[d];
  }
}

void coalesce(StridedLayout& l) {
  // Drop size-1 dims (their strides never matter).
  int r = 0;
  for (int d = 0; d < l.rank; ++d) {
    if (l.sizes[d] == 1) continue;
    l.sizes[r] = l.sizes[d];
    for (int k = 0; k < l.n_operands; ++k) l.strides[k][r] = l.strides[k][d];
    ++r;
  }
  l.rank = r;
  if (r <= 1) return;
  // Merge dim d into the kept dim to its right when, for every operand, stepping the outer
  // dim once equals stepping the inner dim through its whole extent.
  int out = l.rank - 1;  // index of the current innermost kept dim (we walk right to left)
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxOperands][kMaxDims];
  int n = 0;
  // Build the merged list innermost-first, then reverse.
  int64_t cur_size = l.sizes[out];
  int64_t cur_stride[kMaxOperands];
  for (int k = 0; k < l.n_operands; ++k) cur_stride[k] = l.strides[k][out];
  for (int d = out - 1; d >= 0; --d) {
    bool mergeable = true;
    for (int k = 0; k < l.n_operands; ++k)
      if (l.strides[k][d] != cur_stride[k] * cur_size) mergeable = false;
    if (mergeable) {
      cur_size *= l.sizes[d];
    } else {
      sizes[n] = cur_size;
      for (int k = 0; k < l.n_operands; ++k) strides[k][n] = cur_stride[k];
      ++n;
      cur_size = l.sizes[d];
      for (int k = 0; k < l.n_operands; ++k) cur_stride[k] = l.strides[k][d];
    }
  }
  sizes[n] = cur_size;
  for (int k = 0; k < l.n_operands; ++k) strides[k][n] = cur_stride[k];
  ++n;
  l.rank = n;
  for (int d = 0; d < n; ++d) {
    l.sizes[d] = sizes[n - 1 - d];
    for (int k = 0; k < l.n_operands; ++k) l.strides[k][d] = strides[k][n - 1 - d];
  }
}

bool fits_uint32(const StridedLayout& l) {
  constexpr int64_t kLimit = std::numeric_limits<int32_t>::max();
  if (l.numel() >= kLimit) return false;
  for (int k = 0; k < l.n_operands; ++k) {
    int64_t span = 0;
    for (int d = 0; d < l.rank; ++d) {
      if (l.strides[k][d] < 0) return false;
      span += (l.sizes[d] - 1) * l.strides[k][d];
      if (span >= kLimit) return false;
    }
  }
  return true;
}

Div32 make_div32(uint32_t d) {
  LF_ASSERT(d >= 1 && d < (1u << 31), "divisor ", d, " out of range for Div32");
  Div32 r;
  r.d = d;
  while ((1ull << r.s) < d) ++r.s;
  r.m = static_cast<uint32_t>(((1ull << 32) * ((1ull << r.s) - d)) / d + 1);
  return r;
}

}  // namespace livefuse::cuda
