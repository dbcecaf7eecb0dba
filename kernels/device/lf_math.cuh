// Scalar math shared by every backend: eager CUDA kernels (nvcc), eager and fused CPU
// kernels (g++), and generated kernels (NVRTC gets this file as an embedded string).
// One definition of gelu, sigmoid, ... is what keeps fused and eager numerics from drifting.
//
// It must compile with no includes under NVRTC, so f16/bf16 conversions are written with
// inline PTX on the device and with bit manipulation on the host (no cuda_fp16.h).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define LF_HD __host__ __device__ __forceinline__
#define LF_DEVICE_CODE 1
#else
#define LF_HD inline
#include <cmath>
#include <cstdint>
#include <cstring>
#endif

#if defined(__CUDACC_RTC__)
typedef unsigned short lf_u16;
typedef unsigned int lf_u32;
typedef long long lf_i64;
#else
typedef uint16_t lf_u16;
typedef uint32_t lf_u32;
typedef int64_t lf_i64;
#endif

// ---- storage conversions -------------------------------------------------------------
LF_HD float lf_bits_to_float(lf_u32 u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, 4);
  return f;
#endif
}
LF_HD lf_u32 lf_float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  lf_u32 u;
  memcpy(&u, &f, 4);
  return u;
#endif
}

LF_HD float lf_h2f(lf_u16 h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  lf_u32 sign = (lf_u32)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  lf_u32 bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do { e++; man <<= 1; } while ((man & 0x400u) == 0);
      bits = sign | ((lf_u32)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  }
  return lf_bits_to_float(bits);
#endif
}

LF_HD lf_u16 lf_f2h(float f) {
#if defined(__CUDA_ARCH__)
  lf_u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  lf_u32 x = lf_float_to_bits(f);
  lf_u32 sign = (x >> 16) & 0x8000u;
  lf_u32 ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (lf_u16)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return (lf_u16)(sign | 0x7c00u);  // rounds to inf
  if (ax < 0x38800000u) {                                    // subnormal or zero in f16
    float a = lf_bits_to_float(ax);
    // a * 2^24 rounded to nearest even gives the subnormal mantissa.
    float m = a * 16777216.0f;
    lf_u32 r = (lf_u32)m;
    float frac = m - (float)r;
    if (frac > 0.5f || (frac == 0.5f && (r & 1u))) r++;
    return (lf_u16)(sign | r);
  }
  lf_u32 mant = ax & 0x7fffffu;
  lf_u32 e = (ax >> 23) - 112u;
  lf_u32 h = (e << 10) | (mant >> 13);
  lf_u32 rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
  return (lf_u16)(sign | h);
#endif
}

LF_HD float lf_bf2f(lf_u16 h) { return lf_bits_to_float((lf_u32)h << 16); }
LF_HD lf_u16 lf_f2bf(float f) {
#if defined(__CUDA_ARCH__)
  lf_u16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  lf_u32 x = lf_float_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (lf_u16)((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return (lf_u16)(x >> 16);
#endif
}

// ---- scalar math ---------------------------------------------------------------------
#if defined(__CUDA_ARCH__)
LF_HD float lf_exp(float x) { return expf(x); }
LF_HD float lf_log(float x) { return logf(x); }
LF_HD float lf_sqrt(float x) { return sqrtf(x); }
LF_HD float lf_rsqrt(float x) { return rsqrtf(x); }
LF_HD float lf_tanh(float x) { return tanhf(x); }
LF_HD float lf_erf(float x) { return erff(x); }
LF_HD float lf_pow(float x, float y) { return powf(x, y); }
LF_HD float lf_isnan(float x) { return isnan(x); }
#else
LF_HD float lf_exp(float x) { return std::exp(x); }
LF_HD float lf_log(float x) { return std::log(x); }
LF_HD float lf_sqrt(float x) { return std::sqrt(x); }
LF_HD float lf_rsqrt(float x) { return 1.0f / std::sqrt(x); }
LF_HD float lf_tanh(float x) { return std::tanh(x); }
LF_HD float lf_erf(float x) { return std::erf(x); }
LF_HD float lf_pow(float x, float y) { return std::pow(x, y); }
LF_HD bool lf_isnan(float x) { return std::isnan(x); }
#endif

// Generic helpers work for float and the integer compute types. max/min propagate NaN like
// torch.maximum / torch.minimum.
template <class T> LF_HD T lf_abs(T x) { return x < T(0) ? -x : x; }
LF_HD float lf_abs(float x) { return lf_bits_to_float(lf_float_to_bits(x) & 0x7fffffffu); }
template <class T> LF_HD T lf_max(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a > b ? a : b)); }
template <class T> LF_HD T lf_min(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a < b ? a : b)); }
template <class T> LF_HD T lf_relu(T x) { return (x != x) ? x : (x > T(0) ? x : T(0)); }
LF_HD float lf_sigmoid(float x) { return 1.0f / (1.0f + lf_exp(-x)); }
LF_HD float lf_silu(float x) { return x / (1.0f + lf_exp(-x)); }
LF_HD float lf_gelu(float x) { return 0.5f * x * (1.0f + lf_erf(x * 0.70710678118654752f)); }
LF_HD float lf_gelu_tanh(float x) {
  return 0.5f * x * (1.0f + lf_tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
template <class T> LF_HD T lf_div(T a, T b) { return a / b; }
// Integer division by zero is undefined in C++; define it as 0 so no backend traps.
LF_HD int lf_div(int a, int b) { return b == 0 ? 0 : a / b; }
LF_HD lf_i64 lf_div(lf_i64 a, lf_i64 b) { return b == 0 ? 0 : a / b; }
