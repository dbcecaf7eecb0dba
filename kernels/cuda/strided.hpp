#pragma once
// Host-side description of a strided iteration space shared by up to kMaxOperands operands
// (an output and its inputs), before it becomes a kernel's offset calculator. Plain data, so
// host .cpp files build it and .cu launchers consume it without sharing heavy headers.
#include <cstdint>

#include "livefuse/shape.hpp"

namespace livefuse::cuda {

inline constexpr int kMaxOperands = 4;

struct StridedLayout {
  int rank = 0;
  int n_operands = 0;
  int64_t sizes[kMaxDims] = {};                  // outermost first
  int64_t strides[kMaxOperands][kMaxDims] = {};  // in elements; 0 = broadcast

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= sizes[d];
    return n;
  }
};

// Starts a layout over `shape`; operands are added with add_operand. An operand of lower rank
// is right-aligned and broadcast (stride 0) where its size is 1 or missing.
StridedLayout make_layout(const Shape& shape);
void add_operand(StridedLayout& l, const Shape& shape, const Strides& strides);
void add_dense_operand(StridedLayout& l);  // row-major over l's own shape (an output)

// Drops size-1 dims and merges neighbours that every operand walks with one stride, so a
// dense tensor becomes rank 1 and most broadcasts rank 2. Fewer dims = fewer divisions.
void coalesce(StridedLayout& l);

// True when every offset (and the element count) fits a 32-bit index and no stride is
// negative, so kernels can use 32-bit index math.
bool fits_uint32(const StridedLayout& l);

// Magic-number division for 32-bit indices (as in "Division by Invariant Integers using
// Multiplication"): n / d == (umulhi(n, m) + n) >> s for n, d < 2^31. A hardware 32-bit
// division is ~20 instructions; this is 3, and the strided kernels do one per dim per element.
struct Div32 {
  uint32_t d = 1, m = 0, s = 0;
};
Div32 make_div32(uint32_t d);

}  // namespace livefuse::cuda
