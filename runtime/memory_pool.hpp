#pragma once
// Device memory for tensors. CUDA: stream-ordered allocations from a cudaMemPool whose release
// threshold is "never", so steady-state inference allocates nothing from the driver. CPU:
// 64-byte aligned blocks kept in size-class free lists (page faults on fresh pages would
// otherwise dominate large eager CPU ops).
#include <memory>

#include "livefuse/memory.hpp"
#include "livefuse/tensor.hpp"

namespace livefuse {

// Storage of `bytes` on `device`, freed back to the pool (on `stream` for CUDA) when released.
std::shared_ptr<Storage> allocate_storage(Device device, size_t bytes, void* stream);

}  // namespace livefuse
