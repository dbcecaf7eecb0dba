#pragma once
// Launch geometry shared by the eager kernels.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <cuda_runtime.h>

#include "kernels/cuda/device_info.hpp"

namespace livefuse::cuda {

// Loads `kernel`'s code onto the current device now, instead of at its first launch
// (preload.hpp, the Note); an error is left for the launch to report.
template <class... P>
inline void load_kernel(void (*kernel)(P...)) {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(kernel)) != cudaSuccess) (void)cudaGetLastError();
}

inline constexpr int kEwThreads = 256;

// Blocks for a grid-stride loop over `items`: enough to fill every SM a few times over (so
// the tail wave is short), never more than the work needs.
inline unsigned grid_for(int64_t items, int threads = kEwThreads) {
  const DeviceInfo& info = current_device_info();
  const int64_t per_sm = std::max(1, info.max_threads_per_sm / threads);
  const int64_t cap = int64_t{info.sm_count} * per_sm * 4;
  const int64_t need = (items + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(need, 1, cap));
}

// double -> compute type without undefined behaviour: integers saturate, NaN becomes 0.
template <class T>
inline T scalar_to(double v) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    if (v != v) return T(0);
    if (v <= static_cast<double>(std::numeric_limits<T>::min()))
      return std::numeric_limits<T>::min();
    if (v >= static_cast<double>(std::numeric_limits<T>::max()))
      return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}

}  // namespace livefuse::cuda
