#pragma once
// Internal to kernels/cuda (gemm_lt.cpp): what a cuBLASLt call declares of its operands -- their
// alignment and data types.
#include <cublasLt.h>

#include <cstdint>

#include "livefuse/dtype.hpp"

namespace livefuse::cuda::detail {

inline int64_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int64_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// What cuBLASLt may assume of an operand's alignment: its pointer's, and that of every column
// and batch matrix after the first -- the pointer plus multiples of the leading dim and of the
// batch stride, in bytes. A batch of [7, 67] bf16 matrices starts its second one 938 bytes in:
// 2-byte aligned whatever the pointer is. Declaring the pointer's 256 let timed candidates that
// load 16 bytes at a time run on it (fuzz seed 100059 under LIVEFUSE_GEMM_TUNE=1).
inline int64_t operand_alignment(const void* p, int64_t ld, int64_t stride, int64_t batch, DType t) {
  const int64_t es = static_cast<int64_t>(dtype_size(t));
  int64_t a = alignment_of(p);
  const auto step = [&](int64_t elems) {
    const int64_t bytes = elems * es;
    while (a > 1 && bytes % a != 0) a /= 2;
  };
  step(ld);
  if (batch > 1) step(stride);
  return a;
}

inline cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

}  // namespace livefuse::cuda::detail
