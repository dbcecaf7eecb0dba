#pragma once
// Launches recorded instead of made: what a graph's kernel nodes need to be set to.
//
// [ Note -- recording the varying steps of a decode step ]
// A plan that serves every length of a decode step replays one graph whose varying kernel nodes
// (the cache's concat, the attention over it) take this run's parameters (graphs/
// patchable_graph.hpp). Those parameters used to come from a stream capture of the varying steps
// at every run: begin, three launches, end, then the graph's nodes read back and ordered -- 11-12
// us of the program's thread a layer on the H200 (GPT-2 and Llama decode, LIVEFUSE_TRACE's
// family/capture_varying), about a third of a layer's replay. While a thread holds a
// RecordingScope, the launch sites the varying steps reach (copies, the attention kernels) put
// their kernel, grid, block, shared memory and arguments here instead of on a stream, and the
// plan writes them into the graph's nodes directly. Nothing runs on the device while recording;
// a site that is not instrumented would launch for real, so only steps whose every launch site
// is instrumented are recorded (FusedPlan decides per plan), and a recorded chain's kernels are
// checked once against a captured chain before its recordings are trusted.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

namespace livefuse::cuda {

struct RecordedLaunch {
  const void* func = nullptr;  // the kernel's host stub; nullptr: a one-dimensional device copy
  dim3 grid, block;
  unsigned smem = 0;
  unsigned cluster = 1;          // blocks a cluster (x), 1: none
  std::shared_ptr<void> args;    // the arguments, held as the kernel's parameter types
  std::vector<void*> params;     // one pointer to each: cudaKernelNodeParams::kernelParams
  void* dst = nullptr;           // the copy's
  const void* src = nullptr;
  size_t bytes = 0;
};

class LaunchRecorder {
 public:
  template <class... Params, class... Args>
  void kernel(void (*k)(Params...), dim3 grid, dim3 block, size_t smem, unsigned cluster,
              Args&&... args) {
    RecordedLaunch l;
    l.func = reinterpret_cast<const void*>(k);
    l.grid = grid, l.block = block, l.smem = static_cast<unsigned>(smem), l.cluster = cluster;
    auto held = std::make_shared<std::tuple<std::decay_t<Params>...>>(std::forward<Args>(args)...);
    std::apply([&](auto&... p) { l.params = {static_cast<void*>(&p)...}; }, *held);
    l.args = std::move(held);
    launches_.push_back(std::move(l));
  }
  void copy(void* dst, const void* src, size_t bytes) {
    RecordedLaunch l;
    l.dst = dst, l.src = src, l.bytes = bytes;
    launches_.push_back(std::move(l));
  }
  const std::vector<RecordedLaunch>& launches() const { return launches_; }
  // Kinds, functions, block and cluster dims, count: equal shapes patch the same graph nodes.
  uint64_t shape() const;

 private:
  std::vector<RecordedLaunch> launches_;
};

// The calling thread's recorder, or nullptr: launches are made.
LaunchRecorder* recorder();

// While alive, the calling thread's instrumented launches go to `r`.
class RecordingScope {
 public:
  explicit RecordingScope(LaunchRecorder* r);
  ~RecordingScope();
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;

 private:
  LaunchRecorder* before_;
};

// Launches this thread made or recorded at instrumented sites (every record_launch call): a
// plan compares it before and after its steps to know a kernel of its own came last
// (planner/early_reads.cpp, StepsRun). Kernels launched elsewhere (cuBLASLt, generated ones) are
// not counted: the count only ever errs low.
inline thread_local uint64_t t_instrumented_launches = 0;

// At an instrumented site, before its launch: true when the thread records (the launch is
// recorded and must not be made).
template <class... Params, class... Args>
bool record_launch(void (*k)(Params...), dim3 grid, dim3 block, size_t smem, unsigned cluster,
                   Args&&... args) {
  ++t_instrumented_launches;
  LaunchRecorder* r = recorder();
  if (!r) return false;
  r->kernel(k, grid, block, smem, cluster, std::forward<Args>(args)...);
  return true;
}

}  // namespace livefuse::cuda
