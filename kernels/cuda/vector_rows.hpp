#pragma once
// Whether an operand can be read 16 bytes at a time, as the vectorized kernels read it (the
// decode attentions' K and V rows, the tensor-core GEMM's operands). Host code.
#include <cstdint>

namespace livefuse::cuda {

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Rows of a [batch, head, key, col] operand (element strides `st`) as whole 16-byte vectors of
// `per` elements: unit column stride, `cols` a whole number of vectors, a 16-byte aligned base,
// and every stride of a dim longer than one a whole number of vectors (each row start aligned).
inline bool vector_rows(const void* base, const int64_t (&st)[4], int64_t batch, int64_t heads,
                        int64_t keys, int64_t cols, int per) {
  const auto fits = [per](int64_t n, int64_t s) { return n <= 1 || s % per == 0; };
  return aligned16(base) && st[3] == 1 && cols % per == 0 && fits(batch, st[0]) &&
         fits(heads, st[1]) && fits(keys, st[2]);
}

}  // namespace livefuse::cuda
