#pragma once
// Shared helpers for the doctest suites.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "livefuse/config.hpp"
#include "livefuse/livefuse.hpp"

// A test case that needs a GPU: reported as skipped (not passed) on machines without one.
#define LF_CUDA_TEST_CASE(name) TEST_CASE(name * doctest::skip(!::livefuse::cuda_available()))

namespace lftest {

// One Config field set for a scope, the whole Config restored after: ScopedConfig off(&Config::gemv, false).
class ScopedConfig {
 public:
  template <class T, class V>
  ScopedConfig(T livefuse::Config::*field, V value) {
    livefuse::Config c = saved_;
    c.*field = static_cast<T>(value);
    livefuse::set_config_for_testing(c);
  }
  ~ScopedConfig() { livefuse::set_config_for_testing(saved_); }
  ScopedConfig(const ScopedConfig&) = delete;
  ScopedConfig& operator=(const ScopedConfig&) = delete;

 private:
  livefuse::Config saved_ = livefuse::config();
};

// Devices to run a device-parametrised check on: always the CPU, plus cuda:0 when present.
inline std::vector<livefuse::Device> devices() {
  std::vector<livefuse::Device> d{livefuse::Device::cpu()};
  if (livefuse::cuda_available()) d.push_back(livefuse::Device::cuda(0));
  return d;
}

// Relative tolerance per dtype for results computed in f32 from inputs of that dtype.
inline double tolerance(livefuse::DType t) {
  switch (t) {
    case livefuse::DType::f16: return 2e-3;
    case livefuse::DType::bf16: return 1.6e-2;
    default: return 2e-5;
  }
}

// max |a-b| / (atol + rtol*|b|) style check; NaN must match NaN.
inline bool allclose(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                     double atol, size_t* bad_index = nullptr) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(w) || std::isnan(g)) {
      if (std::isnan(w) != std::isnan(g)) { if (bad_index) *bad_index = i; return false; }
      continue;
    }
    if (std::isinf(w) || std::isinf(g)) {
      if (g != w) { if (bad_index) *bad_index = i; return false; }
      continue;
    }
    if (std::abs(g - w) > atol + rtol * std::abs(w)) { if (bad_index) *bad_index = i; return false; }
  }
  return true;
}

// Whether every |got - want| is within tol x the largest |want| (at least 1e-3): the check for a
// whole output (logits, hidden states) whose small entries carry the rounding of the large
// ones. On failure *at is the worst index and *scale the largest |want|.
inline bool close_to_scale(const std::vector<double>& got, const std::vector<double>& want,
                           double tol, size_t* at = nullptr, double* scale = nullptr) {
  double big = 0, worst = 0;
  size_t where = 0;
  for (double w : want) big = std::max(big, std::abs(w));
  if (scale) *scale = big;
  if (got.size() != want.size()) return false;
  for (size_t j = 0; j < want.size(); ++j) {
    const double d = std::abs(got[j] - want[j]);
    if (std::isnan(d)) {  // the first NaN (in either) is the place to report
      if (at) *at = j;
      return false;
    }
    if (!(d <= worst)) worst = d, where = j;
  }
  if (at) *at = where;
  return worst <= tol * std::max(big, 1e-3);
}

}  // namespace lftest
