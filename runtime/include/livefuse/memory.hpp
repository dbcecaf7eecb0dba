#pragma once
#include <cstddef>

#include "livefuse/device.hpp"

namespace livefuse {

struct MemoryStats {
  size_t bytes_in_use = 0;   // held by live tensors
  size_t bytes_cached = 0;   // kept by the pool for reuse
  size_t peak_in_use = 0;
  size_t allocations = 0;    // calls served
};

MemoryStats memory_stats(Device device);
// Returns cached (unused) blocks of `device` to the system.
void empty_cache(Device device);

}  // namespace livefuse
