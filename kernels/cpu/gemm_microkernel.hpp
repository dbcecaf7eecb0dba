#pragma once
// Register-blocked inner kernel of the CPU GEMM (see gemm_microkernel.cpp).
#include <cstdint>

namespace livefuse::cpu {

// 8 x 32: sixteen AVX-512 accumulators, enough independent FMA chains to keep both FMA ports
// busy through their 4-cycle latency, and 10 loads per 16 FMAs (6 x 16 had 6 chains and 7 loads
// per 6 FMAs: latency- and load-bound at ~57% of the core's peak).
inline constexpr int kMR = 8;   // rows of C per micro-tile (A panels are kMR wide)
inline constexpr int kNR = 32;  // columns of C per micro-tile (B panels are kNR wide)

// x rounded up to a multiple of m: a count of rows or columns padded to whole panels.
inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// c[r * ldc + j] += sum_k a[k * kMR + r] * b[k * kNR + j] for r < kMR, j < kNR.
using MicroKernel = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc);
MicroKernel microkernel();

}  // namespace livefuse::cpu
