#pragma once
#include <cstddef>

#include "livefuse/device.hpp"

namespace livefuse {

struct MemoryStats {
  size_t bytes_in_use = 0;   // held by live tensors
  size_t bytes_cached = 0;   // kept by the pool for reuse
  size_t peak_in_use = 0;
  size_t allocations = 0;    // calls served
  // The cap on cached bytes at work (LIVEFUSE_CACHE_MAX_MB): cached blocks handed back to the
  // system (CPU) or the stream-ordered pool (CUDA), oldest first, and their bytes.
  size_t cache_evictions = 0;
  size_t bytes_returned = 0;
  size_t pool_trims = 0;  // CUDA: times the pool's unused memory was trimmed to the cap
};

MemoryStats memory_stats(Device device);
// Returns cached (unused) blocks of `device` to the system.
void empty_cache(Device device);

}  // namespace livefuse
