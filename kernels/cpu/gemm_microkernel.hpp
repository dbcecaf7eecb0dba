#pragma once
// Register-blocked inner kernel of the CPU GEMM (see gemm_microkernel.cpp).
#include <cstdint>

namespace livefuse::cpu {

inline constexpr int kMR = 6;   // rows of C per micro-tile (A panels are kMR wide)
inline constexpr int kNR = 16;  // columns of C per micro-tile (B panels are kNR wide)

// c[r * ldc + j] += sum_k a[k * kMR + r] * b[k * kNR + j] for r < kMR, j < kNR.
using MicroKernel = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc);
MicroKernel microkernel();

}  // namespace livefuse::cpu
