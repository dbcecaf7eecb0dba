#if LIVEFUSE_HAS_CUDA
#include "graphs/patchable_graph.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "graphs/capture_budget.hpp"
#include "kernels/jit/cuda_driver.hpp"
#include "runtime/inspect_registry.hpp"

namespace livefuse::graphs {
namespace {

// Kernel nodes of generated kernels hold driver functions (CUfunction), which the runtime API's
// node-parameter calls refuse: the driver's calls, reached without linking libcuda
// (jit::driver_entry_point).
struct NodeApi {
  PFN_cuGraphKernelNodeGetParams_v12000 get = nullptr;
  PFN_cuGraphExecKernelNodeSetParams_v12000 set = nullptr;
  PFN_cuGraphKernelNodeGetAttribute_v11000 attribute = nullptr;
  bool ok() const { return get && set && attribute; }
};

template <class F>
void entry(const char* name, F* out) {
  *out = reinterpret_cast<F>(jit::driver_entry_point(name));
}

const NodeApi& api() {
  static const NodeApi a = [] {
    NodeApi n;
    entry("cuGraphKernelNodeGetParams", &n.get);
    entry("cuGraphExecKernelNodeSetParams", &n.set);
    entry("cuGraphKernelNodeGetAttribute", &n.attribute);
    return n;
  }();
  return a;
}

uint64_t mix(uint64_t h, uint64_t v) { return (h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2))) * 0x100000001b3ull; }

std::vector<cudaGraphNode_t> nodes_of(cudaGraph_t g, bool* ok) {
  size_t n = 0;
  std::vector<cudaGraphNode_t> nodes;
  if (cudaGraphGetNodes(g, nullptr, &n) != cudaSuccess) {
    (void)cudaGetLastError();
    *ok = false;
    return nodes;
  }
  nodes.resize(n);
  if (n && cudaGraphGetNodes(g, nodes.data(), &n) != cudaSuccess) {
    (void)cudaGetLastError();
    *ok = false;
    nodes.clear();
  }
  nodes.resize(n);
  return nodes;
}

// The graph `stream` is capturing into, or nullptr.
cudaGraph_t capturing_graph(cudaStream_t stream) {
  cudaStreamCaptureStatus status{};
  cudaGraph_t graph = nullptr;
  if (cudaStreamGetCaptureInfo(stream, &status, nullptr, &graph, nullptr, nullptr, nullptr) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return status == cudaStreamCaptureStatusActive ? graph : nullptr;
}

}  // namespace

bool order_kernel_chain(std::vector<cudaGraphNode_t>& nodes) {
  if (nodes.empty()) return true;
  const std::unordered_set<cudaGraphNode_t> in(nodes.begin(), nodes.end());
  std::unordered_map<cudaGraphNode_t, cudaGraphNode_t> next;  // a node -> the one after it
  cudaGraphNode_t head = nullptr;
  std::vector<cudaGraphNode_t> deps;
  // Edge data asked for too: without it CUDA refuses to list a programmatic edge (a kernel
  // launched with PDL, kernels/cuda/pdl.hpp) rather than describe it as a plain one.
  std::vector<cudaGraphEdgeData> edges;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    size_t n = 0;
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess ||
        (type != cudaGraphNodeTypeKernel && type != cudaGraphNodeTypeMemcpy) ||
        cudaGraphNodeGetDependencies(node, nullptr, nullptr, &n) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    deps.resize(n);
    edges.resize(n);
    if (n && cudaGraphNodeGetDependencies(node, deps.data(), edges.data(), &n) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    cudaGraphNode_t prev = nullptr;
    int inside = 0;
    for (size_t i = 0; i < n; ++i)
      if (in.count(deps[i])) prev = deps[i], ++inside;
    if (inside > 1) return false;  // a join: not a chain
    if (inside == 0) {
      if (head) return false;  // two starts: a fork
      head = node;
    } else if (!next.emplace(prev, node).second) {
      return false;  // two nodes after one: a fork
    }
  }
  std::vector<cudaGraphNode_t> ordered;
  for (cudaGraphNode_t cur = head; cur && ordered.size() <= nodes.size();) {
    ordered.push_back(cur);
    const auto it = next.find(cur);
    cur = it == next.end() ? nullptr : it->second;
  }
  if (ordered.size() != nodes.size()) return false;
  nodes = std::move(ordered);
  return true;
}

uint64_t chain_shape(const std::vector<cudaGraphNode_t>& nodes, bool* ok) {
  uint64_t h = mix(0x5a7c, nodes.size());
  if (!api().ok()) {
    *ok = false;
    return h;
  }
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess) {
      (void)cudaGetLastError();
      *ok = false;
      return h;
    }
    h = mix(h, static_cast<uint64_t>(type));
    if (type == cudaGraphNodeTypeMemcpy) continue;  // a copy's operands and size may change
    CUDA_KERNEL_NODE_PARAMS kp{};
    if (api().get(reinterpret_cast<CUgraphNode>(node), &kp) != CUDA_SUCCESS) {
      *ok = false;
      return h;
    }
    h = mix(h, reinterpret_cast<uintptr_t>(kp.func));
    h = mix(mix(mix(h, kp.blockDimX), kp.blockDimY), kp.blockDimZ);
    CUkernelNodeAttrValue v{};
    if (api().attribute(reinterpret_cast<CUgraphNode>(node), CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                        &v) == CUDA_SUCCESS)
      h = mix(mix(mix(h, v.clusterDim.x), v.clusterDim.y), v.clusterDim.z);
  }
  return h;
}

KernelChain KernelChain::capture(cudaStream_t stream, const std::function<void()>& enqueue) {
  KernelChain c;
  c.graph_ = graphs::capture(stream, enqueue);
  bool ok = true;
  c.nodes_ = nodes_of(c.graph_.get(), &ok);
  ok = ok && order_kernel_chain(c.nodes_);
  if (ok) c.shape_ = chain_shape(c.nodes_, &ok);
  c.ok_ = ok;
  return c;
}

void RegionMarks::begin() {
  open_ = true;
  before_.clear();
  const cudaGraph_t graph = capturing_graph(stream_);
  bool ok = graph != nullptr;
  if (ok) before_ = nodes_of(graph, &ok);
  if (!ok) {
    g_->ok_ = false;
    open_ = false;
  }
  std::sort(before_.begin(), before_.end());
}

void RegionMarks::end() {
  if (!open_) return;
  open_ = false;
  const cudaGraph_t graph = capturing_graph(stream_);
  bool ok = graph != nullptr;
  std::vector<cudaGraphNode_t> now;
  if (ok) now = nodes_of(graph, &ok);
  std::vector<cudaGraphNode_t> made;
  for (cudaGraphNode_t n : now)
    if (!std::binary_search(before_.begin(), before_.end(), n)) made.push_back(n);
  if (!ok || !order_kernel_chain(made)) {
    g_->ok_ = false;
    return;
  }
  g_->nodes_.insert(g_->nodes_.end(), made.begin(), made.end());
}

std::unique_ptr<PatchableGraph> PatchableGraph::capture(
    cudaStream_t stream, const std::function<void(RegionMarks&)>& enqueue) {
  const trace::Scope span("graph", "capture_instantiate_patchable");
  const CaptureCharge charge;  // capture_budget.hpp
  std::unique_ptr<PatchableGraph> g(new PatchableGraph);
  RegionMarks marks(stream, g.get());
  g->graph_ = graphs::capture(stream, [&] { enqueue(marks); });
  if (g->ok_) g->shape_ = chain_shape(g->nodes_, &g->ok_);
  g->exec_ = CudaGraphExec(g->graph_);  // usable for this run even when it cannot be patched
  return g;
}

bool PatchableGraph::patch(const KernelChain& c) {
  if (!ok_ || !c.ok_ || c.shape_ != shape_ || c.nodes_.size() != nodes_.size()) return false;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    cudaGraphNodeType type{};
    if (cudaGraphNodeGetType(c.nodes_[i], &type) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    if (type == cudaGraphNodeTypeMemcpy) {
      // A captured cudaMemcpyAsync of contiguous bytes: one-dimensional, which is what an
      // instantiated memcpy node can be updated to (a different size included).
      cudaMemcpy3DParms mp{};
      if (cudaGraphMemcpyNodeGetParams(c.nodes_[i], &mp) != cudaSuccess ||
          cudaGraphExecMemcpyNodeSetParams(exec_.get(), nodes_[i], &mp) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
      }
      continue;
    }
    CUDA_KERNEL_NODE_PARAMS kp{};
    if (api().get(reinterpret_cast<CUgraphNode>(c.nodes_[i]), &kp) != CUDA_SUCCESS ||
        api().set(reinterpret_cast<CUgraphExec>(exec_.get()), reinterpret_cast<CUgraphNode>(nodes_[i]),
                  &kp) != CUDA_SUCCESS) {
      (void)cudaGetLastError();
      return false;
    }
  }
  return true;
}

bool KernelChain::recorded_by(const cuda::LaunchRecorder& r) const {
  const std::vector<cuda::RecordedLaunch>& ls = r.launches();
  if (!ok_ || ls.size() != nodes_.size() || !api().ok()) return false;
  for (size_t i = 0; i < ls.size(); ++i) {
    cudaGraphNodeType type{};
    if (cudaGraphNodeGetType(nodes_[i], &type) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    if (type != (ls[i].func ? cudaGraphNodeTypeKernel : cudaGraphNodeTypeMemcpy)) return false;
    if (!ls[i].func) continue;
    CUDA_KERNEL_NODE_PARAMS kp{};
    cudaFunction_t f = nullptr;
    if (api().get(reinterpret_cast<CUgraphNode>(nodes_[i]), &kp) != CUDA_SUCCESS ||
        cudaGetFuncBySymbol(&f, ls[i].func) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    if (reinterpret_cast<CUfunction>(f) != kp.func || kp.blockDimX != ls[i].block.x ||
        kp.blockDimY != ls[i].block.y || kp.blockDimZ != ls[i].block.z || kp.gridDimX != ls[i].grid.x ||
        kp.gridDimY != ls[i].grid.y || kp.gridDimZ != ls[i].grid.z || kp.sharedMemBytes != ls[i].smem)
      return false;
  }
  return true;
}

bool PatchableGraph::patch(const cuda::LaunchRecorder& r) {
  const std::vector<cuda::RecordedLaunch>& ls = r.launches();
  if (!ok_ || ls.size() != nodes_.size() || !api().ok()) return false;
  if (funcs_.empty()) {
    funcs_.assign(nodes_.size(), nullptr);
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (!ls[i].func) continue;
      CUDA_KERNEL_NODE_PARAMS kp{};
      if (api().get(reinterpret_cast<CUgraphNode>(nodes_[i]), &kp) != CUDA_SUCCESS) {
        funcs_.clear();
        return false;
      }
      funcs_[i] = kp.func;
    }
  }
  for (size_t i = 0; i < ls.size(); ++i) {
    const cuda::RecordedLaunch& l = ls[i];
    if (!l.func != !funcs_[i]) return false;  // a copy where a kernel was, or the reverse
    if (!l.func) {
      if (cudaGraphExecMemcpyNodeSetParams1D(exec_.get(), nodes_[i], l.dst, l.src, l.bytes,
                                             cudaMemcpyDeviceToDevice) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
      }
      continue;
    }
    CUDA_KERNEL_NODE_PARAMS kp{};
    kp.func = static_cast<CUfunction>(funcs_[i]);
    kp.gridDimX = l.grid.x, kp.gridDimY = l.grid.y, kp.gridDimZ = l.grid.z;
    kp.blockDimX = l.block.x, kp.blockDimY = l.block.y, kp.blockDimZ = l.block.z;
    kp.sharedMemBytes = l.smem;
    kp.kernelParams = const_cast<void**>(l.params.data());
    if (api().set(reinterpret_cast<CUgraphExec>(exec_.get()), reinterpret_cast<CUgraphNode>(nodes_[i]), &kp) !=
        CUDA_SUCCESS)
      return false;
  }
  return true;
}

}  // namespace livefuse::graphs
#endif
