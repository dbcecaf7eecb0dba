#pragma once
// Row sums in double and row maxima for the CPU norms and softmax (kernels/cpu/norm.cpp), the
// fused attention and the fused row interpreter's reductions (kernels/jit/cpu_eval.cpp): one
// summation order for all, so a fused layer_norm gives eager's statistics.
//
// A single running double is one dependent add per element -- 4 cycles each, a 768-wide row
// ~1.3 us, most of a layer_norm's time. kSumLanes independent partial sums vectorise (no
// reassociation is needed: lane l takes elements l, l + kSumLanes, ...) and are combined in a
// fixed tree at the end.
#include <cstdint>
#include <limits>

namespace livefuse::cpu {

inline constexpr int kSumLanes = 16;

// Σ f(p[i]) over [0, n), in double.
template <class F>
inline double lane_sum(const float* p, int64_t n, F&& f) {
  double acc[kSumLanes] = {};
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes)
    for (int l = 0; l < kSumLanes; ++l) acc[l] += f(static_cast<double>(p[i + l]));
  for (int l = 0; i + l < n; ++l) acc[l] += f(static_cast<double>(p[i + l]));
  for (int w = kSumLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

// Σ p[i].
inline double sum_double(const float* p, int64_t n) {
  return lane_sum(p, n, [](double x) { return x; });
}

// Σ (p[i] - mean)², the squares in double.
inline double sum_sq_dev_double(const float* p, int64_t n, double mean) {
  return lane_sum(p, n, [mean](double x) { return (x - mean) * (x - mean); });
}

// Σ p[i]², in double.
inline double sum_sq_double(const float* p, int64_t n) {
  return lane_sum(p, n, [](double x) { return x * x; });
}

// max(init, p[0], ..., p[n-1]), NaN when any of them is NaN (lf_max's rule). Lanes again: a
// running lf_max is a compare and two branches per element (4% of the CPU demo's samples in
// the attention's softmax). Each lane keeps its maximum as `x > m ? x : m` (a max instruction)
// and whether it saw a NaN apart, as a bit: one select that also let a NaN in
// (`x > m || x != x`) left GCC with scalar compares, an element at a time (the CPU demo's eager
// softmax: 74 us a layer with them, 40 without).
inline float max_float(const float* p, int64_t n, float init) {
  float m[kSumLanes];
  uint32_t nan[kSumLanes] = {};
  for (int l = 0; l < kSumLanes; ++l) m[l] = init;
  auto take = [&](int l, float x) {
    m[l] = x > m[l] ? x : m[l];
    nan[l] |= static_cast<uint32_t>(x != x);
  };
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes)
    for (int l = 0; l < kSumLanes; ++l) take(l, p[i + l]);
  for (int l = 0; i + l < n; ++l) take(l, p[i + l]);
  float r = init;
  uint32_t any_nan = static_cast<uint32_t>(init != init);
  for (int l = 0; l < kSumLanes; ++l) {
    r = m[l] > r ? m[l] : r;
    any_nan |= nan[l];
  }
  return any_nan ? std::numeric_limits<float>::quiet_NaN() : r;
}

}  // namespace livefuse::cpu
