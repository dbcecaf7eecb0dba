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
#if defined(LF_FAST_EXP)
// Generated kernels whose every result is f16/bf16 (render.cpp defines LF_FAST_EXP): 2^(x log2 e)
// as one MUFU instruction. Max rel. error about 5e-6 for |x| < 100 (the rounding of x log2 e),
// 100x below half an f16 ulp; exp(-inf) = 0, NaN and +inf propagate.
LF_HD float lf_exp(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x * 1.44269504088896341f));
  return r;
}
#else
LF_HD float lf_exp(float x) { return expf(x); }
#endif
LF_HD float lf_log(float x) { return logf(x); }
LF_HD float lf_sqrt(float x) { return sqrtf(x); }
LF_HD float lf_rsqrt(float x) { return rsqrtf(x); }
LF_HD float lf_tanh(float x) { return tanhf(x); }
// Full-range sinf/cosf (never __sinf): rotary embeddings take them of position * frequency,
// hundreds of radians, where the fast forms lose every digit.
LF_HD float lf_sin(float x) { return sinf(x); }
LF_HD float lf_cos(float x) { return cosf(x); }
LF_HD float lf_pow(float x, float y) { return powf(x, y); }
LF_HD float lf_isnan(float x) { return isnan(x); }
// 2^x as the one MUFU instruction (max rel. error 2^-22); lf_erf only takes it of x in
// [-28, 0], where flushing subnormal results to zero never matters.
LF_HD float lf_exp2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
LF_HD float lf_fma(float a, float b, float c) { return fmaf(a, b, c); }
// 1/x as the one MUFU instruction (max rel. error 2^-23); used where the result feeds an
// approximation, never where a division is the op.
LF_HD float lf_rcp(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
#else
LF_HD float lf_exp(float x) { return std::exp(x); }
LF_HD float lf_log(float x) { return std::log(x); }
LF_HD float lf_sqrt(float x) { return std::sqrt(x); }
LF_HD float lf_rsqrt(float x) { return 1.0f / std::sqrt(x); }
LF_HD float lf_tanh(float x) { return std::tanh(x); }
LF_HD float lf_sin(float x) { return std::sin(x); }
LF_HD float lf_cos(float x) { return std::cos(x); }
LF_HD float lf_pow(float x, float y) { return std::pow(x, y); }
LF_HD bool lf_isnan(float x) { return std::isnan(x); }
// 2^x without a libm call, so that the CPU loops over gelu and erf vectorise (a call per
// element took a fifth of the CPU demo's time): 2^k from the exponent bits times a degree-6 fit
// of 2^f, f in [-0.5, 0.5] (Cephes' exp2f: 1.2 ulp at most over the float range, against 0.5 for
// libm; gelu and erf keep their maximum errors). Results below 2^-126 may
// flush to 0, above 2^128 are inf; NaN propagates. Written as selects, no branches.
LF_HD float lf_exp2(float x) {
  float c = x < -127.0f ? -127.0f : x;
  c = c > 128.0f ? 128.0f : c;
  c = c == c ? c : 0.0f;                            // NaN: any finite value, replaced below
  const float k = (c + 12582912.0f) - 12582912.0f;  // nearest integer (adding 1.5 * 2^23)
  const float f = c - k;
  float p = 1.535336188319500e-4f;
  p = p * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.0f;
  const float r = p * lf_bits_to_float((lf_u32)(static_cast<int>(k) + 127) << 23);
  return x == x ? r : x;
}
// No fused multiply-add on the host: a libm call per step would cost more than the rounding
// it saves (lf_erf stays within 1.5 ulp either way).
LF_HD float lf_fma(float a, float b, float c) { return a * b + c; }
LF_HD float lf_rcp(float x) { return 1.0f / x; }
#endif

// erf without branches: x + x * P(x^2) for |x| < 1, else sign(x) * (1 - 2^Q(|x|)), Q a fit of
// log2(erfc) on [1, 3.92] (erf rounds to +-1 in f32 beyond). Both pieces are computed and one is
// selected, so a warp never diverges; about 20 instructions with one exp2 where erff runs two
// branches with a full expf. Max error 1.2 ulp with FMA and an exact exp2 (1.5 ulp on the host
// without FMA; about 2 ulp with the device's ex2.approx), max abs error 9e-8 over all floats.
// NaN propagates; erf(-0) = -0.
LF_HD float lf_erf(float x) {
  const float t = x < 0.0f ? -x : x, s = x * x;
  float p = 7.889121480e-05f;
  p = lf_fma(p, s, -8.020842215e-04f);
  p = lf_fma(p, s, 5.189535208e-03f);
  p = lf_fma(p, s, -2.685444430e-02f);
  p = lf_fma(p, s, 1.128360033e-01f);
  p = lf_fma(p, s, -3.761262596e-01f);
  p = lf_fma(p, s, 1.283791661e-01f);
  const float small = lf_fma(x, p, x);
  const float u = t > 3.92f ? 3.92f : t;  // a NaN stays NaN
  float q = 2.354427352e-06f;
  q = lf_fma(q, u, -6.624509115e-05f);
  q = lf_fma(q, u, 8.588316268e-04f);
  q = lf_fma(q, u, -6.854217965e-03f);
  q = lf_fma(q, u, 3.807591647e-02f);
  q = lf_fma(q, u, -1.587271243e-01f);
  q = lf_fma(q, u, -9.116347432e-01f);
  q = lf_fma(q, u, -1.630514979e+00f);
  q = lf_fma(q, u, 4.435068695e-04f);
  const float big = 1.0f - lf_exp2(q);
  return t < 1.0f ? small : (x < 0.0f ? -big : big);
}

// Generic helpers work for float and the integer compute types. max/min propagate NaN like
// torch.maximum / torch.minimum.
template <class T> LF_HD T lf_abs(T x) { return x < T(0) ? -x : x; }
LF_HD float lf_abs(float x) { return lf_bits_to_float(lf_float_to_bits(x) & 0x7fffffffu); }
template <class T> LF_HD T lf_max(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a > b ? a : b)); }
template <class T> LF_HD T lf_min(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a < b ? a : b)); }
template <class T> LF_HD T lf_relu(T x) { return (x != x) ? x : (x > T(0) ? x : T(0)); }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// f32 on sm_80+: one FMNMX.NAN each instead of two NaN tests, a compare and three selects (the
// max reduction of a row softmax is issue-bound on f16 rows). NaN still wins (a canonical NaN);
// max(-0, +0) is +0 either way round.
LF_HD float lf_max(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
LF_HD float lf_min(float a, float b) {
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
LF_HD float lf_relu(float x) { return lf_max(x, 0.0f); }
#endif
LF_HD float lf_sigmoid(float x) { return 1.0f / (1.0f + lf_exp(-x)); }
LF_HD float lf_silu(float x) { return x / (1.0f + lf_exp(-x)); }
// gelu(x) = x * Phi(x) from one erfc, not 0.5 x (1 + erf(x / sqrt 2)): with z = |x| / sqrt 2,
// h = erfc(z) / 2 = t * 2^(G(t) - z^2 log2 e), t = 1 / (1 + z/2), G a degree-8 fit of
// log2(erfc(z) / 2t) + z^2 log2 e over z in [0, 10] (max error 3.2e-7); Phi = x < 0 ? h : 1 - h.
// One exp2 and one reciprocal, no branches: about 18 instructions where the erf form took 30
// (f16 gelu is ALU-bound; NVRTC time grows with every inlined copy). The negative tail keeps its
// relative accuracy (1 + erf(x) cancels: 4e-3 relative error at x = -4 in f32, 3e-7 here).
// NaN propagates; gelu(+inf) = inf, gelu(-inf) = NaN as in 0.5 x (1 + erf).
LF_HD float lf_gelu(float x) {
  const float z = lf_abs(x) * 0.70710678118654752f;
  const float t = lf_rcp(lf_fma(0.5f, z < 10.0f ? z : 10.0f, 1.0f));
  float g = 1.071486548e-01f;
  g = lf_fma(g, t, -7.724742293e-01f);
  g = lf_fma(g, t, 2.073970795e+00f);
  g = lf_fma(g, t, -2.514523029e+00f);
  g = lf_fma(g, t, 1.195095778e+00f);
  g = lf_fma(g, t, -3.276627958e-01f);
  g = lf_fma(g, t, 6.308411956e-01f);
  g = lf_fma(g, t, 1.432906747e+00f);
  g = lf_fma(g, t, -2.825303555e+00f);
  const float h = t * lf_exp2(lf_fma(-z * z, 1.44269504088896341f, g));
  return x * (x < 0.0f ? h : 1.0f - h);
}
LF_HD float lf_gelu_tanh(float x) {
  return 0.5f * x * (1.0f + lf_tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
template <class T> LF_HD T lf_div(T a, T b) { return a / b; }
// Integer division by zero is undefined in C++; define it as 0 so no backend traps.
LF_HD int lf_div(int a, int b) { return b == 0 ? 0 : a / b; }
LF_HD lf_i64 lf_div(lf_i64 a, lf_i64 b) { return b == 0 ? 0 : a / b; }
