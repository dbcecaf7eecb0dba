// graph_binding (part of livefuse-bench-replacement, CUDA only): what it costs to replay a
// plan's CUDA graph on a new buffer binding, for the four ways a runtime can do it:
//   graph_per_binding  livefuse's way: one instantiated graph per binding (the plan's outputs
//                      live in rotating binding sets, so bindings repeat); a replay hashes the
//                      binding, finds its exec and launches it
//   node_params        one exec; each kernel node gets the binding's arguments through
//                      cudaGraphExecKernelNodeSetParams, then launch (arguments prepared
//                      outside the timing: a lower bound; impossible for cuBLASLt nodes,
//                      whose arguments are opaque)
//   recapture_update   one exec; the steps are captured again on the new binding and
//                      cudaGraphExecUpdate patches the exec, then launch
//   staging            one exec over plan-owned input buffers; each external input is copied
//                      in (cudaMemcpyAsync), then launch
// Each replay changes binding (4 rotate). Figures: host time per replay (`median_us`, the
// calls alone) and `replay_sync_us`, a replay followed by a synchronize.
#include "bench/graph_binding.hpp"

#if LIVEFUSE_HAS_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <functional>

#include "graphs/cuda_graph.hpp"
#include "kernels/jit/kernel_compiler.hpp"
#include "livefuse/livefuse.hpp"
#include "planner/planner.hpp"

namespace lfbench {

namespace {
using namespace livefuse;
using namespace livefuse::planner;
using Clock = std::chrono::steady_clock;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("[bench] ") + what + ": " + cudaGetErrorString(e));
}

// Kernel nodes of generated kernels hold driver functions (CUfunction), which the runtime API's
// node-parameter calls refuse: the driver's calls, reached without linking libcuda.
template <class F>
F driver_fn(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  check(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q), name);
  if (!p || q != cudaDriverEntryPointSuccess) throw Error(std::string("[bench] no driver entry ") + name);
  return reinterpret_cast<F>(p);
}
using NodeGetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
using ExecNodeSetParams = CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS*);

uint64_t binding_key(const std::vector<Tensor>& values) {
  uint64_t k = 0x9e37;
  for (const Tensor& t : values) {
    const TensorImpl& i = *t.impl();
    k = (k ^ (reinterpret_cast<uintptr_t>(i.storage ? i.storage->ptr : nullptr) + i.offset)) * 0x100000001b3ull;
    for (int d = 0; d < i.shape.rank; ++d) k = (k ^ static_cast<uint64_t>(i.shape.v[d])) * 0x100000001b3ull;
  }
  return k;
}

struct Timing {
  double host_us, sync_us;
};

// Host time per replay (median of single replays; a synchronize every 32, outside the timing,
// keeps the queue short), and replay + synchronize.
Timing time_replays(cudaStream_t s, const std::function<void(int)>& replay) {
  for (int i = 0; i < 64; ++i) replay(i);
  check(cudaStreamSynchronize(s), "sync");
  std::vector<double> host, sync;
  for (int i = 0; i < 2048; ++i) {
    const auto t0 = Clock::now();
    replay(i);
    host.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (i % 32 == 31) check(cudaStreamSynchronize(s), "sync");
  }
  for (int i = 0; i < 1024; ++i) {
    const auto t0 = Clock::now();
    replay(i);
    check(cudaStreamSynchronize(s), "sync");
    sync.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return {median(host), median(sync)};
}

struct Case {
  std::string name;
  Segment seg;
  std::vector<std::vector<Tensor>> externals;  // per binding
};

void run_case(const Case& c, std::vector<Record>& out) {
  const Device dev = Device::cuda(0);
  const auto s = static_cast<cudaStream_t>(Stream::current(dev).handle());
  PlannedSegment p = plan_segment(c.seg, default_planner_options(dev));
  if (int failed = compile_plan(p, jit::KernelCompiler::global(), jit::default_compile_options()))
    throw Error("[bench] graph_binding: " + std::to_string(failed) + " kernels failed to compile");
  const int nb = static_cast<int>(c.externals.size());
  std::vector<std::vector<Tensor>> vals;
  for (const auto& ext : c.externals) vals.push_back(bind_values(p, ext));
  for (auto& v : vals) run_plan(p, v, s);  // warm: modules, cuBLASLt
  check(cudaStreamSynchronize(s), "sync");

  std::vector<graphs::CudaGraph> captured;
  for (int b = 0; b < nb; ++b) captured.push_back(graphs::capture(s, [&] { run_plan(p, vals[b], s); }));
  auto record = [&](const std::string& variant, const Timing& t, std::string note = "") {
    Record r{"graph_binding", c.name + "/" + variant, std::to_string(nb) + " bindings", t.host_us,
             {{"replay_sync_us", t.sync_us}}};
    if (!note.empty()) r.tags.emplace_back("note", note);
    out.push_back(r);
  };

  {  // livefuse: a graph per binding in the plan's graph cache, found by the binding's key
    graphs::GraphCache cache(64);
    for (int b = 0; b < nb; ++b) cache.get_or_build(binding_key(vals[b]), 0, s, [&] { run_plan(p, vals[b], s); }, nullptr);
    record("graph_per_binding",
           time_replays(s, [&](int i) { cache.find(binding_key(vals[i % nb]))->launch(s); }));
  }
  graphs::CudaGraphExec one(captured[0]);  // the other three patch one exec
  {  // node parameters, when every node is one of our kernels
    std::vector<std::vector<cudaGraphNode_t>> nodes(nb);
    bool all_kernels = true;
    for (int b = 0; b < nb; ++b) {
      size_t n = 0;
      check(cudaGraphGetNodes(captured[b].get(), nullptr, &n), "nodes");
      nodes[b].resize(n);
      check(cudaGraphGetNodes(captured[b].get(), nodes[b].data(), &n), "nodes");
      for (cudaGraphNode_t node : nodes[b]) {
        cudaGraphNodeType t;
        check(cudaGraphNodeGetType(node, &t), "node type");
        all_kernels &= t == cudaGraphNodeTypeKernel;
      }
    }
    // Nodes of a graph made by cuBLASLt carry arguments we cannot rebuild: no such variant.
    for (const Step& st : p.steps) all_kernels &= !std::holds_alternative<GemmStep>(st.body);
    if (all_kernels) {
      const auto get = driver_fn<NodeGetParams>("cuGraphKernelNodeGetParams");
      const auto set = driver_fn<ExecNodeSetParams>("cuGraphExecKernelNodeSetParams");
      std::vector<std::vector<CUDA_KERNEL_NODE_PARAMS>> params(nb);
      for (int b = 0; b < nb; ++b)
        for (cudaGraphNode_t node : nodes[b]) {
          CUDA_KERNEL_NODE_PARAMS kp{};
          if (get(node, &kp) != CUDA_SUCCESS) throw Error("[bench] kernel node parameters");
          params[b].push_back(kp);
        }
      record("node_params", time_replays(s, [&](int i) {
               const int b = i % nb;
               for (size_t k = 0; k < nodes[0].size(); ++k)
                 if (set(one.get(), nodes[0][k], &params[b][k]) != CUDA_SUCCESS)
                   throw Error("[bench] set kernel node parameters");
               one.launch(s);
             }), "arguments prepared outside the timing");
    }
  }
  record("recapture_update", time_replays(s, [&](int i) {
           if (!one.update(graphs::capture(s, [&] { run_plan(p, vals[i % nb], s); })))
             throw Error("[bench] cudaGraphExecUpdate refused the re-captured graph");
           one.launch(s);
         }));
  {  // staging: one graph over plan-owned copies of the externals; the inputs whose buffer
     // changes between bindings are copied in (the weights here stay)
    const size_t ne = c.externals[0].size();
    std::vector<Tensor> staged;
    std::vector<bool> changes(ne, false);
    for (size_t e = 0; e < ne; ++e) {
      const Tensor& t = c.externals[0][e];
      for (int b = 1; b < nb; ++b) changes[e] = changes[e] || c.externals[b][e].impl() != t.impl();
      staged.push_back(changes[e] ? empty(t.shape(), t.dtype(), dev) : t);
    }
    std::vector<Tensor> vs = bind_values(p, staged);
    run_plan(p, vs, s);
    const graphs::CudaGraphExec ge(graphs::capture(s, [&] { run_plan(p, vs, s); }));
    record("staging", time_replays(s, [&](int i) {
             const std::vector<Tensor>& src = c.externals[i % nb];
             for (size_t e = 0; e < ne; ++e)
               if (changes[e])
                 check(cudaMemcpyAsync(staged[e].impl()->data(), src[e].impl()->data(), src[e].nbytes(),
                                       cudaMemcpyDeviceToDevice, s),
                       "copy in");
             ge.launch(s);
           }));
  }
}
}  // namespace

void bench_graph_binding(std::vector<Record>& out, int64_t n) {
  const Device dev = Device::cuda(0);
  constexpr int kBindings = 4;
  {  // the replacement bench's 10-op chain: one generated kernel
    SegmentBuilder b;
    const ValueRef x = b.input({n});
    ValueRef v = b.scalar_op(OpId::mul, x, 1.5);
    v = b.scalar_op(OpId::add, v, 0.25);
    v = b.add(OpId::tanh, {v});
    v = b.add(OpId::mul, {v, x});
    v = b.add(OpId::sigmoid, {v});
    v = b.add(OpId::add, {v, x});
    v = b.add(OpId::gelu, {v});
    v = b.scalar_op(OpId::mul, v, 0.5);
    v = b.add(OpId::sub, {v, x});
    b.output(b.add(OpId::relu, {v}));
    Case c{"chain10", b.build(), {}};
    for (int k = 0; k < kBindings; ++k) c.externals.push_back({rand_uniform({n}, 40 + k, -1, 1, DType::f32, dev)});
    run_case(c, out);
  }
  {  // a BERT-sized projection with its epilogue: a cuBLASLt GEMM, then bias + gelu + residual
    SegmentBuilder b;
    const ValueRef x = b.input({128, 768}, DType::f16), w = b.input({768, 768}, DType::f16),
                   bias = b.input({768}, DType::f16);
    Attrs a;
    a.push_int(1);
    a.push_int(0);
    const ValueRef y = b.add(OpId::linear, {x, w, bias}, a);
    b.output(b.add(OpId::add, {b.add(OpId::gelu, {y}), x}));
    Case c{"linear_gelu_residual", b.build(), {}};
    const Tensor w0 = rand_uniform({768, 768}, 50, -0.05, 0.05, DType::f16, dev);
    const Tensor b0 = rand_uniform({768}, 51, -0.1, 0.1, DType::f16, dev);
    for (int k = 0; k < kBindings; ++k)
      c.externals.push_back({rand_uniform({128, 768}, 52 + k, -1, 1, DType::f16, dev), w0, b0});
    run_case(c, out);
  }
}

}  // namespace lfbench
#endif
