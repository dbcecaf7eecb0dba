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
// AVX2 has 16 registers: the 8 x 32 tile runs as four 4 x 16 quarters (8 accumulators each),
// each streaming its part of the panels from L1.
__attribute__((target("avx2,fma"))) void microkernel_avx2(int64_t kc, const float* a,
                                                          const float* b, float* c, int64_t ldc) {
  for (int r0 = 0; r0 < kMR; r0 += 4)
    for (int j0 = 0; j0 < kNR; j0 += 16) {
      __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
             c30 = c00, c31 = c00;
      for (int64_t k = 0; k < kc; ++k) {
        const float* bk = b + k * kNR + j0;
        const __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8);
        const float* ak = a + k * kMR + r0;
#define LF_ROW(r)                                  \
  {                                                \
    const __m256 av = _mm256_broadcast_ss(ak + r); \
    c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);    \
    c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);    \
  }
        LF_ROW(0) LF_ROW(1) LF_ROW(2) LF_ROW(3)
#undef LF_ROW
      }
#define LF_STORE(r)                                                                 \
  {                                                                                 \
    float* cr = c + (r0 + r) * ldc + j0;                                            \
    _mm256_storeu_ps(cr, _mm256_add_ps(_mm256_loadu_ps(cr), c##r##0));              \
    _mm256_storeu_ps(cr + 8, _mm256_add_ps(_mm256_loadu_ps(cr + 8), c##r##1));      \
  }
      LF_STORE(0) LF_STORE(1) LF_STORE(2) LF_STORE(3)
#undef LF_STORE
    }
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
