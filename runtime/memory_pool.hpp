#pragma once
// Device memory for tensors. CUDA: stream-ordered allocations from a cudaMemPool that keeps its
// memory, so steady-state inference allocates nothing from the driver, behind a per-stream
// cache of freed blocks. CPU: 64-byte aligned blocks kept in size-class free lists (page faults
// on fresh pages would otherwise dominate large eager CPU ops). What is kept unused is bounded
// by LIVEFUSE_CACHE_MAX_MB (memory.cpp says how).
#include <memory>
#include <vector>

#include "livefuse/memory.hpp"
#include "livefuse/tensor.hpp"

namespace livefuse {

// The bytes a cached CUDA allocation of `bytes` takes: its size class. Exact sizes would make
// every step of a decode loop miss the block cache -- the KV cache grown by concat is one row
// longer each step -- and pay an allocation and a free in the driver's pool per tensor (47,000
// evictions in a 2,300-token GPT-2 run). Classes: multiples of 512 B up to 64 KiB, then four per
// power of two up to 16 MiB (at most 25% more, under 4 MiB), then multiples of 2 MiB (under
// 12.5% and 2 MiB: weights, allocated once, stay close to their size).
size_t cuda_size_class(size_t bytes);

// Storage of `bytes` on `device`, freed back to the pool (on `stream` for CUDA) when released.
std::shared_ptr<Storage> allocate_storage(Device device, size_t bytes, void* stream);

// `parts` storages of `bytes` each, back to back in one allocation, each 256-byte aligned:
// their addresses are evenly spaced, kStorageRunAlign-rounded `bytes` apart (a strided-batched
// GEMM writes them all at once: kernels/cuda/gemm.hpp, run_sibling_linears). Each is a Storage
// of its own (its own flags and version); the allocation is released with the last of them.
inline constexpr size_t kStorageRunAlign = 256;
std::vector<std::shared_ptr<Storage>> allocate_storage_run(Device device, size_t bytes, int parts,
                                                           void* stream);

// Set while this thread captures a CUDA graph (graphs/ sets it, around the whole capture). An
// allocation made then is a graph memory node: it bypasses the per-stream block cache both ways
// (a cached block must never be one the graph owns, nor a graph own a block the cache hands out
// again later). Memory the graph does not own, freed then, is not freed until the scope ends
// (a cudaFreeAsync inside the capture would become a node of the graph), and the block cache
// evicts nothing meanwhile.
//
// Memory allocated inside a capture and still held when it ends (a value a step bound there)
// would make the graph unusable: a relaunch allocates it again, and CUDA refuses a graph whose
// allocation from its last launch is still live (cudaErrorInvalidValue). graphs::capture()
// then discards the graph and rehomes those storages: each gets a block of its own, outside any
// capture (the graph's addresses went with it, never written or freed).
class CaptureScope {
 public:
  CaptureScope();
  ~CaptureScope();
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;
  static bool active();
  // Storages allocated in this capture that something still holds.
  size_t held_allocations() const;
  // After the stream's capture ended and its graph was discarded: ends the scope's capture mode
  // and rehomes the held storages (on `stream`); returns how many.
  size_t rehome(void* stream);

  struct Allocation {
    std::weak_ptr<Storage> storage;
    bool owns = false;  // the graph's allocation itself (else a part of one: allocate_storage_run)
  };

 private:
  bool prev_;
  std::vector<Allocation> allocs_;
  std::vector<Allocation>* prev_allocs_;
};

}  // namespace livefuse
