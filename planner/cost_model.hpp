#pragma once
// The cost model: a fused group is worth forming when it moves fewer bytes and saves launches.
// Time ~ bytes / bandwidth + launches * launch cost, with the device's measured numbers as
// parameters (defaults: an H200-class GPU; the CPU defaults are for the TBB interpreter).
#include <cstdint>

namespace livefuse::planner {

struct CostModel {
  double bandwidth_gbs = 3500.0;  // achievable device memory bandwidth, GB/s
  double launch_us = 4.0;         // cost of one kernel launch (or one eager dispatch)
  // Shared memory a row kernel may use per block to keep values of earlier phases.
  int row_cache_bytes = 96 * 1024;

  double time_us(double bytes, int launches) const {
    return bytes / (bandwidth_gbs * 1e3) + launches * launch_us;
  }
  static CostModel cpu() { return CostModel{20.0, 2.0, 1 << 20}; }
};

// Limits a fused kernel must respect.
struct KernelLimits {
  int max_io = 40;  // inputs + outputs of one kernel (parameter block of 4 KiB)
};

}  // namespace livefuse::planner
