#pragma once
// Thin RAII wrappers over CUDA Graphs, and a bounded cache of instantiated graphs.
// Only built with CUDA; plans without CUDA replay their step lists directly.
#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <unordered_map>

#include "livefuse/error.hpp"

namespace livefuse::graphs {

class PatchableGraph;  // patchable_graph.hpp

class CudaGraph {
 public:
  CudaGraph() = default;
  explicit CudaGraph(cudaGraph_t g) : g_(g) {}
  ~CudaGraph();
  CudaGraph(CudaGraph&& o) noexcept : g_(o.g_) { o.g_ = nullptr; }
  CudaGraph& operator=(CudaGraph&& o) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  cudaGraph_t get() const { return g_; }
  size_t node_count() const;

 private:
  cudaGraph_t g_ = nullptr;
};

class CudaGraphExec {
 public:
  CudaGraphExec() = default;
  explicit CudaGraphExec(const CudaGraph& g);  // instantiate
  ~CudaGraphExec();
  CudaGraphExec(CudaGraphExec&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  CudaGraphExec& operator=(CudaGraphExec&& o) noexcept;
  CudaGraphExec(const CudaGraphExec&) = delete;
  // In-place update to a graph of the same topology (new kernel arguments / pointers).
  // Returns false when CUDA refuses (topology changed): re-instantiate then.
  bool update(const CudaGraph& g);
  void launch(cudaStream_t s) const;
  cudaGraphExec_t get() const { return e_; }

 private:
  cudaGraphExec_t e_ = nullptr;
};

// Captures the work `enqueue` puts on `stream`, in thread-local mode: other threads are never
// disturbed, and this thread must make no unsafe call until the capture ends (no cudaMalloc,
// no synchronisation: the runtime allocates a binding's buffers and warms its modules and
// library handles by a direct run on the same stream before capturing it; frees of memory the
// graph does not own wait for the end of the capture, memory_pool.hpp).
// On an exception the capture is ended and the error rethrown. Memory the steps allocated
// during the capture that is still held when it ends makes the graph one that cannot be launched
// twice (runtime/memory_pool.hpp, CaptureScope): it is discarded, the memory rehomed, and
// CaptureHeldMemory thrown -- the work was not done; the caller runs it directly.
CudaGraph capture(cudaStream_t stream, const std::function<void()>& enqueue);
struct CaptureHeldMemory : Error {
  using Error::Error;
};
// This process's captures that a step ended by throwing (abandoned) and that were discarded for
// held memory (the report's graphs.captures_abandoned / captures_holding_memory).
struct CaptureCounts {
  uint64_t abandoned = 0, held_memory = 0;
};
CaptureCounts capture_counts();

struct GraphCacheCounters {
  uint64_t hits = 0, misses = 0, updates = 0, instantiations = 0, evictions = 0, dropped = 0;
};

// Instantiated graphs of one plan, keyed by what their nodes baked in (shapes, pointers).
// LRU with a hard cap: a workload that never repeats a key costs updates, never unbounded
// memory. A miss reuses the least recently used exec through cudaGraphExecUpdate when the
// cache is full (cheaper than instantiating), else instantiates.
class GraphCache {
 public:
  explicit GraphCache(size_t cap = 16);
  ~GraphCache();
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;
  // The exec for `key`, building it (capture via `enqueue`, then update or instantiate) on a miss.
  // `owner` names what the graph writes (a plan's binding set), for drop_owned().
  const CudaGraphExec& get_or_build(uint64_t key, uint32_t owner, cudaStream_t capture_stream,
                                    const std::function<void()>& enqueue, size_t* nodes);
  // Destroys the graphs of `owner` (its buffers are being freed: their addresses may come back
  // as someone else's). An exec still running is freed by CUDA when it completes.
  void drop_owned(uint32_t owner);
  // The exec for `key` if cached (counted as a hit), else null; never builds.
  const CudaGraphExec* find(uint64_t key);
  const GraphCacheCounters& counters() const { return ctr_; }
  bool contains(uint64_t key) const { return map_.count(key) != 0; }
  size_t size() const { return map_.size(); }
  // Patchable graphs (patchable_graph.hpp), keyed and owned as the others, at most `cap` of them
  // (the oldest goes first). find_patchable counts a hit; put_patchable returns what it keeps.
  PatchableGraph* find_patchable(uint64_t key);
  PatchableGraph* put_patchable(uint64_t key, uint32_t owner, std::unique_ptr<PatchableGraph> g);
  void drop_patchable(uint64_t key);
  size_t patchable_size() const { return patchable_.size(); }

 private:
  struct Entry {
    uint64_t key;
    uint32_t owner;
    CudaGraphExec exec;
    size_t nodes;
  };
  struct PatchableEntry {
    uint64_t key;
    uint32_t owner;
    std::unique_ptr<PatchableGraph> graph;
  };
  size_t cap_;
  std::list<Entry> lru_;  // front = most recent
  std::list<PatchableEntry> patchable_;  // front = newest
  std::unordered_map<uint64_t, std::list<Entry>::iterator> map_;
  GraphCacheCounters ctr_;
};

}  // namespace livefuse::graphs
#endif
