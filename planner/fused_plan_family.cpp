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
// the pool. A GPT-2 layer was then two graph launches and three direct ones (two concats and the
// attention) instead of nine direct launches (the concats have since joined the attention step:
// pass_attention).
//
// Better still, the whole run is one graph (graphs/patchable_graph.hpp, [ Note -- one graph for
// a step whose extents move ]): captured once with the varying steps' kernel nodes marked, then
// at each run the varying steps alone are captured -- nothing runs -- and their parameters copied
// into the marked nodes, and one launch runs the layer. That needs the varying steps to launch
// kernels and plain copies only (no memsets or allocations inside them); a plan whose do not
// goes back to the stretches above for good (patch_off_ says why). LIVEFUSE_FAMILY_GRAPH=0 keeps
// the stretches.
#include "planner/fused_plan.hpp"

#include <optional>

#include "livefuse/config.hpp"
#include "livefuse/error.hpp"
#include "livefuse/stream.hpp"
#include "planner/early_reads.hpp"
#include "planner/plan.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/memory_pool.hpp"
#if LIVEFUSE_HAS_CUDA
#include "graphs/patchable_graph.hpp"
#include "kernels/cuda/launch_record.hpp"
#endif

namespace livefuse::planner {
using detail::mix_key;

#if LIVEFUSE_HAS_CUDA
// Recorded shapes a plan remembers (each matched once to a captured chain): a decode step meets
// a few (the attention's key splits change with the length); more than this and the map starts
// over rather than grow.
constexpr size_t kMaxRecordedShapes = 64;
#endif

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
  // Recorded only where every varying step reaches launch sites that record: the copies of
  // concats and of views that need one (kernels/cuda/layout.cu), the attention kernels.
  varying_recordable_ = true;
  for (const FixedStretch& f : stretches_)
    for (size_t s = f.begin; f.varying && s < f.end; ++s) {
      const auto& b = planned_.steps[s].body;
      const auto* e = std::get_if<EagerStep>(&b);
      varying_recordable_ = varying_recordable_ && (std::holds_alternative<ViewStep>(b) ||
                                                    std::holds_alternative<AttentionStep>(b) ||
                                                    (e && seg.nodes[e->node].op == OpId::concat));
    }
}

// A stretch's steps on `stream`; a varying stretch of concats as one copy launch.
void FusedPlan::launch_stretch(const FixedStretch& f, std::span<const Tensor> values, void* stream,
                               bool follows) {
  const StepsRun run(follows);  // its own, unless the whole graph's capture holds one
  if (f.varying && launch_concats_cuda(planned_, f.begin, f.end, values, stream)) return;
  for (size_t s = f.begin; s < f.end; ++s) launch_step_cuda(planned_, planned_.steps[s], values, stream);
}

bool FusedPlan::run_cuda_family(std::vector<Tensor>& values, Window& w) {
#if LIVEFUSE_HAS_CUDA
  auto st = static_cast<cudaStream_t>(w.stream_handle);
  std::optional<trace::Scope> bind_span(std::in_place, "family", "bind");
  // The set holds the fixed values; the varying ones take fresh storage at every run.
  uint64_t fixed_key = 0x3c;
  for (size_t v = 0; v < values.size(); ++v) {
    if (varying_value_[v]) continue;
    const Shape& s = values[v].impl()->shape;
    for (int d = 0; d < s.rank; ++d) fixed_key = mix_key(fixed_key, static_cast<uint64_t>(s.v[d]));
  }
  const int set = bind_outputs(values, w, fixed_key, &varying_value_);
  for (size_t v = 0; v < values.size(); ++v) {
    if (needs_buffer(values, w, v)) give_storage(values, w, v, st);
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
  bind_span.reset();
  if (may_capture && patchable_ && config().family_graph &&
      run_family_patched(values, w, base, set, st, &cold)) {
    if (cold) w.cold_run = true;
    return true;
  }
  for (size_t k = 0; k < stretches_.size(); ++k) {
    const FixedStretch& f = stretches_[k];
    int kernels = 0;
    for (size_t s = f.begin; s < f.end; ++s) kernels += planned_.steps[s].launches();
    const uint64_t key = mix_key(base, k + 1);
    if (f.varying || kernels == 0 || !may_capture || runs_directly(key, true)) {
      launch_stretch(f, values, st);
      ++family_direct_;
      continue;
    }
    // A replay binds the views its steps would have bound: the steps after it read them.
    size_t nodes = 0;
    if (!replay(key, set, st, [&] { launch_stretch(f, values, st); }, values, w, &nodes))
      cold = true;  // a capture
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

bool FusedPlan::run_family_patched(std::vector<Tensor>& values, Window& w, uint64_t base, int set,
                                   void* stream, bool* cold) {
#if LIVEFUSE_HAS_CUDA
  auto st = static_cast<cudaStream_t>(stream);
  bool any_varying = false;
  for (const FixedStretch& f : stretches_) any_varying = any_varying || f.varying;
  if (!any_varying) return false;
  // A capture the steps' host code breaks (a call a capture forbids) ends this way for the plan,
  // not its runs: the stretches, launched directly, do not capture the varying steps. A kernel
  // still compiling is the run's matter, as everywhere (FusedPlan::run).
  const auto give_up = [&](const std::exception& e) {
    patchable_ = false;
    patch_off_ = std::string("capturing the steps failed: ") + e.what();
    return false;
  };
  // The views the varying steps read that fixed steps make: those steps do not run on the host
  // now (their kernels are in the graph).
  bind_written_views(values, w);
  // Launched (recorded or captured) alone, but bound for the whole graph: there a kernel of the
  // run may come first (StepsRun's `follows`).
  const auto launch_varying = [&] {
    bool kernel_before = false;
    for (const FixedStretch& f : stretches_) {
      if (f.varying) launch_stretch(f, values, st, kernel_before);
      for (size_t s = f.begin; s < f.end; ++s) kernel_before = kernel_before || planned_.steps[s].launches() > 0;
    }
  };
  // The whole graph of a chain shape, and its run once patched.
  const auto graph_key = [&](uint64_t chain_shape) { return mix_key(mix_key(base, 0x9a7c4), chain_shape); };
  const auto launch_patched = [&](const graphs::PatchableGraph& g) {
    ++patched_replays_;
    const trace::Scope span("family", "launch");
    g.launch(st);
    return true;
  };
  // Recorded first (nothing runs: kernels/cuda/launch_record.hpp, the Note): a recorded shape
  // already matched to a captured chain patches its graph straight from the recording.
  std::optional<cuda::LaunchRecorder> rec;
  if (varying_recordable_ && config().family_record) {
    rec.emplace();
    try {
      const trace::Scope span("family", "record_varying");
      const cuda::RecordingScope scope(&*rec);
      launch_varying();
    } catch (const KernelNotReady&) {
      throw;
    } catch (const std::exception&) {
      varying_recordable_ = false;  // the capture below says why, if it fails too
      rec.reset();
    }
    const auto known = rec ? recorded_shapes_.find(rec->shape()) : recorded_shapes_.end();
    if (known != recorded_shapes_.end())
      if (graphs::PatchableGraph* g = graphs_->find_patchable(graph_key(known->second))) {
        bool patched;
        {
          const trace::Scope span("family", "patch");
          patched = g->patch(*rec);
        }
        if (patched) {
          ++recorded_replays_;
          return launch_patched(*g);
        }
        // Refused by CUDA: the captured chain's parameters below are the check.
      }
  }
  graphs::KernelChain chain;
  try {
    const trace::Scope span("family", "capture_varying");
    chain = graphs::KernelChain::capture(st, launch_varying);
  } catch (const KernelNotReady&) {
    throw;
  } catch (const std::exception& e) {
    return give_up(e);
  }
  if (!chain.ok()) {
    patchable_ = false;
    patch_off_ = "the varying steps launch more than kernels and copies (a memset, an allocation)";
    return false;
  }
  if (rec && !recorded_shapes_.count(rec->shape()) && chain.recorded_by(*rec)) {
    if (recorded_shapes_.size() >= kMaxRecordedShapes) recorded_shapes_.clear();
    recorded_shapes_.emplace(rec->shape(), chain.shape());
  }
  const uint64_t key = graph_key(chain.shape());
  if (graphs::PatchableGraph* g = graphs_->find_patchable(key)) {
    bool patched;
    {
      const trace::Scope span("family", "patch");
      patched = g->patch(chain);
    }
    if (!patched) {
      graphs_->drop_patchable(key);
      patchable_ = false;
      patch_off_ = "CUDA refused the varying kernels' parameters";
      return false;
    }
    return launch_patched(*g);
  }
  if (runs_directly(key, true)) return false;  // first sight: stretch by stretch, as before
  std::unique_ptr<graphs::PatchableGraph> built;
  try {
    built = graphs::PatchableGraph::capture(st, [&](graphs::RegionMarks& marks) {
      const StepsRun run;  // one graph: every stretch's launches in order
      for (const FixedStretch& f : stretches_) {
        if (f.varying) marks.begin();
        launch_stretch(f, values, st);
        if (f.varying) marks.end();
      }
    });
  } catch (const KernelNotReady&) {
    throw;
  } catch (const std::exception& e) {
    return give_up(e);
  }
  ++patched_captures_;
  *cold = true;
  built->launch(st);  // this run's work, patchable or not
  if (!built->ok() || built->shape() != chain.shape()) {
    patchable_ = false;
    patch_off_ = "the varying steps' kernel nodes in the whole graph are not the chain captured alone";
    return true;
  }
  graphs_->put_patchable(key, static_cast<uint32_t>(set), std::move(built));
  return true;
#else
  (void)values, (void)w, (void)base, (void)set, (void)stream, (void)cold;
  return false;
#endif
}

}  // namespace livefuse::planner
