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

// Blocks of `Kernel` one SM holds at once, launched with `threads` threads (the same at every call
// for one kernel) and no dynamic shared memory; 1 where the query fails. Asked once per kernel:
// the kernel is the template argument, so each instantiation keeps its own answer (a cache keyed
// by the function pointer's type would hand every kernel of one signature the first one's), and
// the first device's answer stands for all.
template <auto Kernel>
int64_t resident_per_sm(int threads) {
  static const int64_t n = [threads] {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, Kernel, threads, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      b = 1;
    }
    return int64_t{b > 0 ? b : 1};
  }();
  return n;
}

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
