#pragma once
// A graph whose marked regions -- chains of kernel nodes (and one-dimensional copies) -- take new
// parameters at every replay, and the captures those parameters come from.
//
// [ Note -- one graph for a step whose extents move ]
// A decode step's varying steps (the cache's concat, the attention over it) launch kernels whose
// pointers, grids and extents change with the KV length, so a graph of the whole step would be
// captured once per length. Their *kernels* stay the same across lengths, though (the same
// functions, block and cluster shapes) until a threshold is crossed (more splits of the keys,
// another attention kernel). So the whole step is captured once as a PatchableGraph, with the
// varying steps' kernel nodes marked; at each later run only the varying steps are captured
// (a KernelChain: nothing runs, the host work is a few captured launches) and their parameters
// are copied into the marked nodes of the instantiated graph (cuGraphExecKernelNodeSetParams,
// ~0.1 us a node on the H200: bench/graph_binding.cpp, "node params"). One graph launch then
// runs the step, instead of one launch per fixed stretch plus the varying steps' own launches.
// What must stay the same for that -- function, block and cluster dims, node count -- is the
// chain's `shape`: a run whose shape differs is keyed apart (its own graph).
#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "graphs/cuda_graph.hpp"
#include "kernels/cuda/launch_record.hpp"

namespace livefuse::graphs {

// The kernel nodes one capture made, in launch order.
class KernelChain {
 public:
  // Captures what `enqueue` puts on `stream` (capture(): nothing runs). ok() is false when that
  // is anything but a chain of kernel and memcpy nodes (a memset, an allocation, a fork).
  static KernelChain capture(cudaStream_t stream, const std::function<void()>& enqueue);
  bool ok() const { return ok_; }
  size_t size() const { return nodes_.size(); }
  uint64_t shape() const { return shape_; }  // functions, block and cluster dims, count
  // Whether `r` recorded these nodes: kinds, functions and block dims, in order (a recording
  // is trusted to patch a graph once its shape was seen to match a captured chain).
  bool recorded_by(const cuda::LaunchRecorder& r) const;

 private:
  friend class PatchableGraph;
  CudaGraph graph_;  // keeps the nodes and their parameters alive
  std::vector<cudaGraphNode_t> nodes_;
  uint64_t shape_ = 0;
  bool ok_ = false;
};

class PatchableGraph;

// Given to the enqueue of PatchableGraph::capture: begin()/end() around each patchable region,
// on the capturing stream's thread.
class RegionMarks {
 public:
  void begin();
  void end();

 private:
  friend class PatchableGraph;
  RegionMarks(cudaStream_t s, PatchableGraph* g) : stream_(s), g_(g) {}
  cudaStream_t stream_;
  PatchableGraph* g_;
  std::vector<cudaGraphNode_t> before_;
  bool open_ = false;
};

class PatchableGraph {
 public:
  // Captures `enqueue` on `stream` and instantiates it; enqueue marks its patchable regions.
  // ok() is false when a region is not a chain of kernel nodes (then nothing can be patched).
  static std::unique_ptr<PatchableGraph> capture(cudaStream_t stream,
                                                 const std::function<void(RegionMarks&)>& enqueue);
  bool ok() const { return ok_; }
  // Of the marked nodes, all regions in order: what a KernelChain of those regions must match.
  uint64_t shape() const { return shape_; }
  size_t patchable_nodes() const { return nodes_.size(); }
  size_t node_count() const { return graph_.node_count(); }
  // Sets the marked nodes to `c`'s parameters (its nodes are the regions' in order). False when
  // the shapes differ or CUDA refuses one; the graph must not be launched then.
  bool patch(const KernelChain& c);
  // The same from recorded launches (cuda/launch_record.hpp) of a shape that recorded_by()
  // matched with this graph's chain: no capture. False when CUDA refuses one.
  bool patch(const cuda::LaunchRecorder& r);
  void launch(cudaStream_t s) const { exec_.launch(s); }

 private:
  friend class RegionMarks;
  CudaGraph graph_;
  CudaGraphExec exec_;
  std::vector<cudaGraphNode_t> nodes_;  // the regions' kernel nodes, in order
  // Each node's driver function (nullptr: a copy), read once: patching from a recording through
  // the driver's call with it skips the runtime's lookup of a kernel's stub at every node.
  std::vector<void*> funcs_;
  uint64_t shape_ = 0;
  bool ok_ = true;
};

// Orders `nodes` (of one graph) as a chain: each depends on the one before it and no other node
// of the set depends on it. False when they are not kernel or memcpy nodes in one chain.
bool order_kernel_chain(std::vector<cudaGraphNode_t>& nodes);
// The shape of a chain: every node's type, a kernel's function, block and cluster dims, the count.
uint64_t chain_shape(const std::vector<cudaGraphNode_t>& nodes, bool* ok);

}  // namespace livefuse::graphs
#endif
