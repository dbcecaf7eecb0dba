// Value conversions of fused kernels, shared by the CPU interpreter (g++) and generated CUDA
// (NVRTC gets this file as an embedded string, after lf_math.cuh).
//
// Eager execution stores every intermediate in its dtype and the next op loads it back into
// its own compute type; a fused group must give the same values without the memory round
// trip. So every value lives in registers in its dtype's *natural* form (float for
// f32/f16/bf16, already rounded to the storage precision; int for i32 and bool (0/1); lf_i64
// for i64) and each op converts its operands into its compute type exactly as a load would
// (kernels/cpu/cpu_common.hpp: to_compute, store_as). NaN -> 0 and saturation for float ->
// integer, like the eager CPU backend.
#pragma once

// ---- compute-type conversions --------------------------------------------------------------
LF_HD float lf_to_f(float x) { return x; }
LF_HD float lf_to_f(int x) { return (float)x; }
LF_HD float lf_to_f(lf_i64 x) { return (float)x; }

LF_HD int lf_to_i32(int x) { return x; }
LF_HD int lf_to_i32(lf_i64 x) { return (int)x; }
LF_HD int lf_to_i32(float x) {
  if (x != x) return 0;
  if (x >= 2147483647.0f) return 2147483647;
  if (x <= -2147483648.0f) return -2147483647 - 1;
  return (int)x;
}

LF_HD lf_i64 lf_to_i64(int x) { return (lf_i64)x; }
LF_HD lf_i64 lf_to_i64(lf_i64 x) { return x; }
LF_HD lf_i64 lf_to_i64(float x) {
  if (x != x) return 0;
  if (x >= 9223372036854775807.0f) return 9223372036854775807LL;
  if (x <= -9223372036854775808.0f) return -9223372036854775807LL - 1;
  return (lf_i64)x;
}

// ---- natural forms (value as eager would have stored and reloaded it) -----------------------
LF_HD float lf_nat_f16(float x) { return lf_h2f(lf_f2h(x)); }
LF_HD float lf_nat_bf16(float x) { return lf_bf2f(lf_f2bf(x)); }
template <class T> LF_HD int lf_nat_bool(T x) { return x != T(0) ? 1 : 0; }
// where's condition: truthiness of the natural value (a float 0.5 is true).
template <class T> LF_HD int lf_truth(T x) { return x != T(0) ? 1 : 0; }
