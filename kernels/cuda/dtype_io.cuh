#pragma once
// Loading and storing elements of any livefuse dtype as a compute type (float, int, int64).
// Kernels are templated on what they compute, never on what they store: the storage dtype is
// a runtime switch here. That keeps the number of instantiations (and nvcc time) down; the
// vectorised fast paths, where the switch would cost bandwidth, template on storage instead
// (the Storage tags below).
#include <cstdint>

#include "kernels/device/lf_math.cuh"
#include "livefuse/dtype.hpp"

namespace livefuse::cuda {

// ---- runtime dtype ------------------------------------------------------------------------
// x as a value written in dt holds it (f16/bf16 round; others are exact here).
__device__ __forceinline__ float round_as(float x, DType dt) {
  return dt == DType::f16 ? lf_h2f(lf_f2h(x)) : dt == DType::bf16 ? lf_bf2f(lf_f2bf(x)) : x;
}

template <class T, class I>
__device__ __forceinline__ T load_as(const void* p, I i, DType dt) {
  switch (dt) {
    case DType::f32:
      return static_cast<T>(static_cast<const float*>(p)[i]);
    case DType::f16:
      return static_cast<T>(lf_h2f(static_cast<const lf_u16*>(p)[i]));
    case DType::bf16:
      return static_cast<T>(lf_bf2f(static_cast<const lf_u16*>(p)[i]));
    case DType::i32:
      return static_cast<T>(static_cast<const int32_t*>(p)[i]);
    case DType::i64:
      return static_cast<T>(static_cast<const int64_t*>(p)[i]);
    case DType::boolean:
      return static_cast<T>(static_cast<const uint8_t*>(p)[i] != 0);
  }
  return T(0);
}

// Truthiness of an element (where's condition), exact for every dtype (a float 0.5 is true;
// converting to an integer compute type first would make it false). NaN is true, as in C.
template <class I>
__device__ __forceinline__ bool load_truth(const void* p, I i, DType dt) {
  switch (dt) {
    case DType::f32:
      return static_cast<const float*>(p)[i] != 0.0f;
    case DType::f16:
      return (static_cast<const lf_u16*>(p)[i] & 0x7fffu) != 0;
    case DType::bf16:
      return (static_cast<const lf_u16*>(p)[i] & 0x7fffu) != 0;
    case DType::i32:
      return static_cast<const int32_t*>(p)[i] != 0;
    case DType::i64:
      return static_cast<const int64_t*>(p)[i] != 0;
    case DType::boolean:
      return static_cast<const uint8_t*>(p)[i] != 0;
  }
  return false;
}

template <class T, class I>
__device__ __forceinline__ void store_as(void* p, I i, DType dt, T v) {
  switch (dt) {
    case DType::f32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DType::f16:
      static_cast<lf_u16*>(p)[i] = lf_f2h(static_cast<float>(v));
      break;
    case DType::bf16:
      static_cast<lf_u16*>(p)[i] = lf_f2bf(static_cast<float>(v));
      break;
    case DType::i32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DType::i64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
    case DType::boolean:
      static_cast<uint8_t*>(p)[i] = (v != T(0)) ? 1 : 0;
      break;
  }
}

// ---- compile-time storage (fast paths) -----------------------------------------------------
// Storage tags: the element as stored, and how it becomes / comes from the compute type.
struct F32 {
  using Bits = float;
  static constexpr DType kDType = DType::f32;
  __device__ static float to(Bits b) { return b; }
  __device__ static Bits from(float v) { return v; }
};
struct F16 {
  using Bits = lf_u16;
  static constexpr DType kDType = DType::f16;
  __device__ static float to(Bits b) { return lf_h2f(b); }
  __device__ static Bits from(float v) { return lf_f2h(v); }
};
struct BF16 {
  using Bits = lf_u16;
  static constexpr DType kDType = DType::bf16;
  __device__ static float to(Bits b) { return lf_bf2f(b); }
  __device__ static Bits from(float v) { return lf_f2bf(v); }
};
struct I32 {
  using Bits = int32_t;
  static constexpr DType kDType = DType::i32;
  __device__ static int32_t to(Bits b) { return b; }
  __device__ static Bits from(int32_t v) { return v; }
};
struct I64 {
  using Bits = int64_t;
  static constexpr DType kDType = DType::i64;
  __device__ static int64_t to(Bits b) { return b; }
  __device__ static Bits from(int64_t v) { return v; }
};

// 16 bytes of elements, for 128-bit loads and stores.
template <class Bits>
struct alignas(16) Vec16 {
  static constexpr int kN = 16 / sizeof(Bits);
  Bits v[kN];
};

#if defined(__CUDACC__)
// v as S stores it (f16 / bf16 round; f32 is exact): an eager op's rounded result.
template <class S>
__device__ __forceinline__ float rounded(float v) {
  return S::to(S::from(v));
}

// One element of a rotate-half rotary, as eager's ops compute x * cos + rotate_half(x) * sin:
// each product rounded to S, then their sum (rounded by the caller's store). `partner` is the
// element of the other half (d/2 away); the first half's is negated. __fmul_rn / __fadd_rn so
// that nvcc contracts nothing into an FMA. rotary.cu and the GEMV that rotates (gemv.cu) both.
template <class S>
__device__ __forceinline__ float rotate_half_element(float self, float partner, float cos, float sin,
                                                     bool first_half) {
  return __fadd_rn(rounded<S>(__fmul_rn(self, cos)), rounded<S>(__fmul_rn(first_half ? -partner : partner, sin)));
}

// The 16 / sizeof(S::Bits) elements of a 16-byte load, in f32.
template <class S>
__device__ __forceinline__ void widen(const uint4& v, float* f) {
  using Bits = typename S::Bits;
  constexpr int kN = 16 / sizeof(Bits);
  Bits b[kN];
  static_assert(sizeof(b) == sizeof(uint4));
  __builtin_memcpy(b, &v, sizeof(v));
#pragma unroll
  for (int j = 0; j < kN; ++j) f[j] = S::to(b[j]);
}
#endif

// Host-side dispatch on a floating storage dtype: f(F32{}) etc.
template <class F>
inline auto with_float_storage(DType dt, F&& f) {
  switch (dt) {
    case DType::f16:
      return f(F16{});
    case DType::bf16:
      return f(BF16{});
    default:
      return f(F32{});
  }
}

}  // namespace livefuse::cuda
