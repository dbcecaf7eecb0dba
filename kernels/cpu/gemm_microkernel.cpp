// The GEMM micro-kernel: C[8 x 32] += Apanel[kc x 8]^T * Bpanel[kc x 32], in three builds
// (AVX-512, AVX2+FMA, portable) chosen once at run time. Only this function is ISA-specific;
// the packing and blocking around it are plain C++. Written with intrinsics because the
// project compiles with -std=c++20, where GCC does not contract a*b+c into an FMA.
#include "kernels/cpu/gemm_microkernel.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define LF_X86 1
#endif

namespace livefuse::cpu {
namespace {

void microkernel_generic(int64_t kc, const float* a, const float* b, float* c, int64_t ldc) {
  float acc[kMR][kNR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    const float* ak = a + k * kMR;
    const float* bk = b + k * kNR;
    for (int r = 0; r < kMR; ++r)
      for (int j = 0; j < kNR; ++j) acc[r][j] += ak[r] * bk[j];
  }
  for (int r = 0; r < kMR; ++r)
    for (int j = 0; j < kNR; ++j) c[r * ldc + j] += acc[r][j];
}

#if LF_X86
// AVX2 has 16 registers. Rows 0-5 run as two 6 x 16 halves (12 accumulators, 2 B loads and 6
// broadcasts per 12 FMAs: enough independent chains for both FMA ports through their latency),
// rows 6-7 as one 2 x 32 strip. The empty asm keeps each B row in registers: left alone, GCC
// folds the loads into the FMAs' memory operands and reads every B row once per A row, which
// made the kernel load-bound (43-56 GFLOP/s on a Zen 3 core against 80-90 this way; its peak
// is ~98).
__attribute__((target("avx2,fma"))) void microkernel_avx2(int64_t kc, const float* a,
                                                          const float* b, float* c, int64_t ldc) {
  for (int j0 = 0; j0 < kNR; j0 += 16) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
           c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    const float* bk = b + j0;
    const float* ak = a;
    for (int64_t k = 0; k < kc; ++k, bk += kNR, ak += kMR) {
      __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8);
      asm("" : "+x"(b0), "+x"(b1));
#define LF_ROW(r)                                  \
  {                                                \
    const __m256 av = _mm256_broadcast_ss(ak + r); \
    c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);    \
    c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);    \
  }
      LF_ROW(0) LF_ROW(1) LF_ROW(2) LF_ROW(3) LF_ROW(4) LF_ROW(5)
#undef LF_ROW
    }
#define LF_STORE(r)                                                            \
  {                                                                            \
    float* cr = c + r * ldc + j0;                                              \
    _mm256_storeu_ps(cr, _mm256_add_ps(_mm256_loadu_ps(cr), c##r##0));         \
    _mm256_storeu_ps(cr + 8, _mm256_add_ps(_mm256_loadu_ps(cr + 8), c##r##1)); \
  }
    LF_STORE(0) LF_STORE(1) LF_STORE(2) LF_STORE(3) LF_STORE(4) LF_STORE(5)
#undef LF_STORE
  }
  __m256 c60 = _mm256_setzero_ps(), c61 = c60, c62 = c60, c63 = c60, c70 = c60, c71 = c60,
         c72 = c60, c73 = c60;
  const float* bk = b;
  const float* ak = a + 6;
  for (int64_t k = 0; k < kc; ++k, bk += kNR, ak += kMR) {
    __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8), b2 = _mm256_loadu_ps(bk + 16),
           b3 = _mm256_loadu_ps(bk + 24);
    asm("" : "+x"(b0), "+x"(b1), "+x"(b2), "+x"(b3));
    const __m256 a6 = _mm256_broadcast_ss(ak), a7 = _mm256_broadcast_ss(ak + 1);
    c60 = _mm256_fmadd_ps(a6, b0, c60), c61 = _mm256_fmadd_ps(a6, b1, c61);
    c62 = _mm256_fmadd_ps(a6, b2, c62), c63 = _mm256_fmadd_ps(a6, b3, c63);
    c70 = _mm256_fmadd_ps(a7, b0, c70), c71 = _mm256_fmadd_ps(a7, b1, c71);
    c72 = _mm256_fmadd_ps(a7, b2, c72), c73 = _mm256_fmadd_ps(a7, b3, c73);
  }
#define LF_STORE(r, j)                                                 \
  {                                                                    \
    float* cr = c + r * ldc + 8 * j;                                   \
    _mm256_storeu_ps(cr, _mm256_add_ps(_mm256_loadu_ps(cr), c##r##j)); \
  }
  LF_STORE(6, 0) LF_STORE(6, 1) LF_STORE(6, 2) LF_STORE(6, 3)
  LF_STORE(7, 0) LF_STORE(7, 1) LF_STORE(7, 2) LF_STORE(7, 3)
#undef LF_STORE
}

__attribute__((target("avx512f"))) void microkernel_avx512(int64_t kc, const float* a,
                                                           const float* b, float* c, int64_t ldc) {
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
         c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00,
         c70 = c00, c71 = c00;
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(b + k * kNR), b1 = _mm512_loadu_ps(b + k * kNR + 16);
    const float* ak = a + k * kMR;
#define LF_ROW(r)                                   \
  {                                                 \
    const __m512 av = _mm512_set1_ps(ak[r]);        \
    c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);     \
    c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1);     \
  }
    LF_ROW(0) LF_ROW(1) LF_ROW(2) LF_ROW(3) LF_ROW(4) LF_ROW(5) LF_ROW(6) LF_ROW(7)
#undef LF_ROW
  }
#define LF_STORE(r)                                                               \
  {                                                                               \
    float* cr = c + r * ldc;                                                      \
    _mm512_storeu_ps(cr, _mm512_add_ps(_mm512_loadu_ps(cr), c##r##0));            \
    _mm512_storeu_ps(cr + 16, _mm512_add_ps(_mm512_loadu_ps(cr + 16), c##r##1));  \
  }
  LF_STORE(0) LF_STORE(1) LF_STORE(2) LF_STORE(3) LF_STORE(4) LF_STORE(5) LF_STORE(6) LF_STORE(7)
#undef LF_STORE
}
#endif

struct Choice {
  MicroKernel fn;
  const char* name;
};

Choice choose() {
#if LF_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return {microkernel_avx512, "avx512"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return {microkernel_avx2, "avx2"};
#endif
  return {microkernel_generic, "generic"};
}

const Choice& choice() {
  static const Choice c = choose();
  return c;
}

}  // namespace

MicroKernel microkernel() { return choice().fn; }
const char* gemm_kernel_name() { return choice().name; }

}  // namespace livefuse::cpu
