// FusedPlan::run_cuda_family: a CUDA plan with a shape family (runtime/plan.hpp) -- a decode
// step that meets a new KV length at every run.
//
// [ Note -- graphs that serve every length ]
// A graph bakes in every shape and address it was captured with, so a graph of the whole step
// would be captured once per length and never replayed. But in a decode step only a few steps
// touch a value whose extent moves with n (the concat that grows the cache, the attention that
// reads it); the layer norms, the projections and the MLP see the same shapes at every length.
// Those stretches of fixed steps are captured as graphs, keyed by the fixed values' shapes and
// addresses, over a binding set that holds the fixed values only -- so the same graphs replay at
// every length -- and the varying steps launch directly between them, into fresh storage from
// the pool. A GPT-2 layer is then two graph launches and three direct ones (two concats and the
// attention) instead of nine direct launches.
#include "planner/fused_plan.hpp"

#include "livefuse/error.hpp"
#include "livefuse/stream.hpp"
#include "planner/plan.hpp"
#include "runtime/memory_pool.hpp"

namespace livefuse::planner {
using detail::mix_key;

void FusedPlan::plan_family_segments() {
  const Segment& seg = planned_.segment;
  varying_value_.assign(planned_.values.size(), false);
  for (size_t v = 0; v < varying_value_.size() && v < seg.varying.size(); ++v)
    for (bool b : seg.varying[v]) varying_value_[v] = varying_value_[v] || b;
  stretches_.clear();
  for (size_t s = 0; s < planned_.steps.size(); ++s) {
    bool varies = false;
    for (int j : planned_.steps[s].nodes()) {
      const SegmentNode& n = seg.nodes[j];
      for (const ValueRef& r : n.inputs) varies = varies || varying_value_[seg.value_id(r)];
      for (size_t k = 0; k < n.outputs.size(); ++k)
        varies = varies || varying_value_[seg.value_id(ValueRef::of(j, static_cast<int>(k)))];
    }
    if (stretches_.empty() || stretches_.back().varying != varies) stretches_.push_back({s, s, varies});
    stretches_.back().end = s + 1;
  }
}

bool FusedPlan::run_cuda_family(std::vector<Tensor>& values, Window& w) {
#if LIVEFUSE_HAS_CUDA
  auto st = static_cast<cudaStream_t>(w.stream_handle);
  // The set holds the fixed values; the varying ones take fresh storage at every run.
  uint64_t fixed_key = 0x3c;
  for (size_t v = 0; v < values.size(); ++v) {
    if (varying_value_[v]) continue;
    const Shape& s = values[v].impl()->shape;
    for (int d = 0; d < s.rank; ++d) fixed_key = mix_key(fixed_key, static_cast<uint64_t>(s.v[d]));
  }
  const int set = bind_outputs(values, w, fixed_key, &varying_value_);
  for (size_t v = 0; v < values.size(); ++v) {
    TensorImpl& t = *values[v].impl();
    if (needs_buffer(values, w, v)) t.storage = allocate_storage(t.device, t.nbytes(), st);
  }
  const uint64_t weights = prepare_merged_weights(planned_, values, st);
  // What every graph of this run bakes in: the set, the stream, the fixed values' addresses.
  uint64_t base = mix_key(mix_key(mix_key(fixed_key, static_cast<uint64_t>(set + 1)), w.stream_id), weights);
  for (size_t v = 0; v < values.size(); ++v) {
    if (varying_value_[v]) continue;
    const TensorImpl& i = *values[v].impl();
    base = mix_key(base, reinterpret_cast<uintptr_t>(i.storage ? i.storage->ptr : nullptr) + i.offset);
  }
  // As run_cuda: a capture takes in whatever the stream gets meanwhile, so only the stream's own
  // thread captures; without a set (every one still held) the addresses never repeat.
  const bool may_capture = set >= 0 && Stream::current(w.device).handle() == w.stream_handle;
  bool cold = runs_ <= 2;
  for (size_t k = 0; k < stretches_.size(); ++k) {
    const FixedStretch& f = stretches_[k];
    auto launch = [&] {
      for (size_t s = f.begin; s < f.end; ++s) launch_step_cuda(planned_, planned_.steps[s], values, st);
    };
    int kernels = 0;
    for (size_t s = f.begin; s < f.end; ++s) kernels += planned_.steps[s].launches();
    const uint64_t key = mix_key(base, k + 1);
    if (f.varying || kernels == 0 || !may_capture || runs_directly(key, true)) {
      if (!f.varying || !launch_concats_cuda(planned_, f.begin, f.end, values, st)) launch();
      ++family_direct_;
      continue;
    }
    // A replay binds the views its steps would have bound: the steps after it read them.
    size_t nodes = 0;
    if (!replay(key, set, st, launch, values, w, &nodes)) cold = true;  // a capture
    ++family_replays_;
  }
  if (cold) w.cold_run = true;
  return true;
#else
  (void)values;
  (void)w;
  throw Error("[plan] CUDA plan on a build without CUDA");
#endif
}

}  // namespace livefuse::planner
