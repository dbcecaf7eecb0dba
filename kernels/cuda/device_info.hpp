#pragma once
// Per-device facts the launchers need on every call, read once (device attribute queries
// are cheap but not free, and the eager hot path has a budget of about a microsecond).
#include <cuda_runtime_api.h>

namespace livefuse::cuda {

struct DeviceInfo {
  int sm_count = 0;
  int max_threads_per_sm = 0;
  int cc_major = 0;
};

// The current device (cudaGetDevice) and its cached facts.
int current_device();
const DeviceInfo& device_info(int device);
inline const DeviceInfo& current_device_info() { return device_info(current_device()); }

}  // namespace livefuse::cuda
