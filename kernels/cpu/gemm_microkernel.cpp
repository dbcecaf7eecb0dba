// The GEMM micro-kernel: C[6 x 16] += Apanel[kc x 6]^T * Bpanel[kc x 16], in three builds
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
__attribute__((target("avx2,fma"))) void microkernel_avx2(int64_t kc, const float* a,
                                                          const float* b, float* c, int64_t ldc) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
         c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + k * kNR), b1 = _mm256_loadu_ps(b + k * kNR + 8);
    const float* ak = a + k * kMR;
#define LF_ROW(r)                                  \
  {                                                \
    const __m256 av = _mm256_broadcast_ss(ak + r); \
    c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);    \
    c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);    \
  }
    LF_ROW(0) LF_ROW(1) LF_ROW(2) LF_ROW(3) LF_ROW(4) LF_ROW(5)
#undef LF_ROW
  }
#define LF_STORE(r)                                                                    \
  _mm256_storeu_ps(c + r * ldc, _mm256_add_ps(_mm256_loadu_ps(c + r * ldc), c##r##0)); \
  _mm256_storeu_ps(c + r * ldc + 8, _mm256_add_ps(_mm256_loadu_ps(c + r * ldc + 8), c##r##1));
  LF_STORE(0) LF_STORE(1) LF_STORE(2) LF_STORE(3) LF_STORE(4) LF_STORE(5)
#undef LF_STORE
}

__attribute__((target("avx512f"))) void microkernel_avx512(int64_t kc, const float* a,
                                                           const float* b, float* c, int64_t ldc) {
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 bv = _mm512_loadu_ps(b + k * kNR);
    const float* ak = a + k * kMR;
    c0 = _mm512_fmadd_ps(_mm512_set1_ps(ak[0]), bv, c0);
    c1 = _mm512_fmadd_ps(_mm512_set1_ps(ak[1]), bv, c1);
    c2 = _mm512_fmadd_ps(_mm512_set1_ps(ak[2]), bv, c2);
    c3 = _mm512_fmadd_ps(_mm512_set1_ps(ak[3]), bv, c3);
    c4 = _mm512_fmadd_ps(_mm512_set1_ps(ak[4]), bv, c4);
    c5 = _mm512_fmadd_ps(_mm512_set1_ps(ak[5]), bv, c5);
  }
#define LF_STORE(r) \
  _mm512_storeu_ps(c + r * ldc, _mm512_add_ps(_mm512_loadu_ps(c + r * ldc), c##r));
  LF_STORE(0) LF_STORE(1) LF_STORE(2) LF_STORE(3) LF_STORE(4) LF_STORE(5)
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
