#if LIVEFUSE_HAS_CUDA
#include "graphs/cuda_graph.hpp"

#include <atomic>

#include "graphs/capture_budget.hpp"
#include "graphs/patchable_graph.hpp"

#include "runtime/cuda_check.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/memory_pool.hpp"

namespace livefuse::graphs {

namespace {
std::atomic<uint64_t> g_abandoned{0}, g_held_memory{0};
}  // namespace

CaptureCounts capture_counts() {
  return {g_abandoned.load(std::memory_order_relaxed),
          g_held_memory.load(std::memory_order_relaxed)};
}

CudaGraph::~CudaGraph() {
  if (g_) (void)cudaGraphDestroy(g_);
}
CudaGraph& CudaGraph::operator=(CudaGraph&& o) noexcept {
  if (this != &o) {
    if (g_) (void)cudaGraphDestroy(g_);
    g_ = o.g_;
    o.g_ = nullptr;
  }
  return *this;
}
size_t CudaGraph::node_count() const {
  size_t n = 0;
  LF_CUDA_CHECK(cudaGraphGetNodes(g_, nullptr, &n));
  return n;
}

CudaGraphExec::CudaGraphExec(const CudaGraph& g) {
  LF_CUDA_CHECK(cudaGraphInstantiate(&e_, g.get(), 0));
}
CudaGraphExec::~CudaGraphExec() {
  if (e_) (void)cudaGraphExecDestroy(e_);
}
CudaGraphExec& CudaGraphExec::operator=(CudaGraphExec&& o) noexcept {
  if (this != &o) {
    if (e_) (void)cudaGraphExecDestroy(e_);
    e_ = o.e_;
    o.e_ = nullptr;
  }
  return *this;
}
bool CudaGraphExec::update(const CudaGraph& g) {
  cudaGraphExecUpdateResultInfo info{};
  const cudaError_t e = cudaGraphExecUpdate(e_, g.get(), &info);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return info.result == cudaGraphExecUpdateSuccess;
}
void CudaGraphExec::launch(cudaStream_t s) const { LF_CUDA_CHECK(cudaGraphLaunch(e_, s)); }

CudaGraph capture(cudaStream_t stream, const std::function<void()>& enqueue) {
  // Thread-local: a capture forbids unsafe calls (cudaMalloc, synchronisations, event queries)
  // on this thread only, and the steps make none; in global or relaxed mode another thread's
  // synchronize or event query during the capture could fail or break it.
  CaptureScope scope;  // temporaries allocated by the steps become graph memory nodes
  LF_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue();
  } catch (...) {
    // A step threw (a kernel still compiling for these shapes): no graph comes of it, and the
    // window runs eagerly (FusedPlan::run puts its outputs back first).
    g_abandoned.fetch_add(1, std::memory_order_relaxed);
    cudaGraph_t g = nullptr;
    (void)cudaStreamEndCapture(stream, &g);
    if (g) (void)cudaGraphDestroy(g);
    (void)cudaGetLastError();
    (void)scope.rehome(stream);
    throw;
  }
  cudaGraph_t g = nullptr;
  LF_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
  if (const size_t held = scope.held_allocations()) {
    (void)cudaGraphDestroy(g);
    (void)scope.rehome(stream);
    g_held_memory.fetch_add(1, std::memory_order_relaxed);
    throw CaptureHeldMemory(livefuse::detail::concat(
        "[graph] the captured steps allocated ", held,
        " storage(s) still held after the capture: a relaunch would allocate them again while they "
        "are live, which CUDA refuses"));
  }
  return CudaGraph(g);
}

GraphCache::GraphCache(size_t cap) : cap_(cap) {}
GraphCache::~GraphCache() = default;

PatchableGraph* GraphCache::find_patchable(uint64_t key) {
  for (PatchableEntry& e : patchable_)
    if (e.key == key) {
      ++ctr_.hits;
      return e.graph.get();
    }
  return nullptr;
}

PatchableGraph* GraphCache::put_patchable(uint64_t key, uint32_t owner,
                                          std::unique_ptr<PatchableGraph> g) {
  drop_patchable(key);
  if (patchable_.size() >= cap_) {
    patchable_.pop_back();
    ++ctr_.evictions;
  }
  ++ctr_.misses;
  ++ctr_.instantiations;
  patchable_.push_front(PatchableEntry{key, owner, std::move(g)});
  return patchable_.front().graph.get();
}

void GraphCache::drop_patchable(uint64_t key) {
  patchable_.remove_if([&](const PatchableEntry& e) { return e.key == key; });
}

const CudaGraphExec* GraphCache::find(uint64_t key) {
  auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  ++ctr_.hits;
  lru_.splice(lru_.begin(), lru_, it->second);
  return &it->second->exec;
}

void GraphCache::drop_owned(uint32_t owner) {
  for (auto it = patchable_.begin(); it != patchable_.end();) {
    if (it->owner != owner) {
      ++it;
      continue;
    }
    it = patchable_.erase(it);
    ++ctr_.dropped;
  }
  for (auto it = lru_.begin(); it != lru_.end();) {
    if (it->owner != owner) {
      ++it;
      continue;
    }
    map_.erase(it->key);
    it = lru_.erase(it);
    ++ctr_.dropped;
  }
}

const CudaGraphExec& GraphCache::get_or_build(uint64_t key, uint32_t owner, cudaStream_t stream,
                                              const std::function<void()>& enqueue, size_t* nodes) {
  if (auto it = map_.find(key); it != map_.end()) {
    ++ctr_.hits;
    lru_.splice(lru_.begin(), lru_, it->second);
    if (nodes) *nodes = it->second->nodes;
    return it->second->exec;
  }
  ++ctr_.misses;
  // On the stream's own thread (a capture takes what that thread enqueues): what it costs there.
  const trace::Scope span("graph", "capture_instantiate");
  const CaptureCharge charge;  // capture_budget.hpp
  CudaGraph g = capture(stream, enqueue);
  const size_t n = g.node_count();
  if (map_.size() >= cap_) {
    // Full: recycle the least recently used exec for the new key.
    auto victim = std::prev(lru_.end());
    map_.erase(victim->key);
    ++ctr_.evictions;
    if (victim->exec.update(g)) {
      ++ctr_.updates;
    } else {
      victim->exec = CudaGraphExec(g);
      ++ctr_.instantiations;
    }
    victim->key = key;
    victim->owner = owner;
    victim->nodes = n;
    lru_.splice(lru_.begin(), lru_, victim);
  } else {
    lru_.push_front(Entry{key, owner, CudaGraphExec(g), n});
    ++ctr_.instantiations;
  }
  map_[key] = lru_.begin();
  if (nodes) *nodes = n;
  return lru_.front().exec;
}

}  // namespace livefuse::graphs
#endif
