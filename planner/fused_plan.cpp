#include "planner/fused_plan.hpp"

#include <algorithm>
#include <chrono>

#include "kernels/cpu/gemm_pack_cache.hpp"
#include "livefuse/config.hpp"
#include "livefuse/error.hpp"
#include "livefuse/inspect.hpp"
#include "livefuse/stream.hpp"
#include "planner/merged_weights.hpp"
#include "planner/plan_siblings.hpp"
#include "runtime/executor.hpp"
#include "runtime/faults.hpp"
#include "runtime/memory_pool.hpp"
#if LIVEFUSE_HAS_CUDA
#include <atomic>
#include <thread>

#include "graphs/capture_budget.hpp"
#include "runtime/cuda_check.hpp"
#endif

namespace livefuse::planner {

namespace {
using detail::mix_key;
// A plan whose bindings never repeat stops capturing graphs (a capture per run costs more host
// time than direct launches); judged per window of this many CUDA runs.
constexpr uint64_t kGraphProbation = 64;
}  // namespace

FusedPlan::FusedPlan(PlannedSegment planned, DeviceKind kind) : planned_(std::move(planned)) {
  device_kind = kind;
  const Segment& seg = planned_.segment;
  // Values with memory that a step may leave unwritten (the memory is its fallback's): a norm
  // run inside a GEMV's prologue, a gated pair's own outputs. The program must not hold them
  // when the plan runs (the window is then served eagerly: matcher_end.cpp, complete()).
  std::vector<bool> unwritten(planned_.values.size(), false);
  for (const Step& s : planned_.steps)
    if (const auto* gs = std::get_if<GemmStep>(&s.body)) {
      for (int j : gs->prologue_nodes()) unwritten[seg.value_id(ValueRef::of(j))] = true;
      if (gs->epilogue == GemmEpilogue::Gated)
        for (int j : gs->siblings) unwritten[seg.value_id(ValueRef::of(j))] = true;
    }
  written_.assign(planned_.values.size(), false);
  for (int v = 0; v < static_cast<int>(planned_.values.size()); ++v) {
    const ValueKind k = planned_.values[v];
    if (k == ValueKind::External || (k == ValueKind::Materialized && !unwritten[v])) {
      written_[v] = true;
    } else if (k == ValueKind::View) {
      const ValueRef r = seg.value_ref(v);
      const ValueRef src = seg.nodes[r.node].inputs[0];
      written_[v] = written_[seg.value_id(src)];  // sources precede their views
    }
  }
  use_graphs_ = config().graphs;
  early_ok_ = kind == DeviceKind::cuda;
  for (const Step& s : planned_.steps) {
    early_ok_ &= !std::holds_alternative<OpaqueStep>(s.body);
    // An early launch replays before the window's calls are seen, so nothing would bring a
    // merged GEMM's concatenated weights up to date first (prepare_merged_weights).
    const auto* gs = std::get_if<GemmStep>(&s.body);
    early_ok_ &= !(gs && !gs->siblings.empty());
  }
  if (kind == DeviceKind::cuda) output_runs_ = detail::sibling_output_runs(planned_);
  plan_family_segments();  // from the segment's varying dims; used once the plan has a family
#if LIVEFUSE_HAS_CUDA
  if (kind == DeviceKind::cuda) graphs_ = std::make_unique<graphs::GraphCache>(64);
#endif
}

void FusedPlan::graph_counters(uint64_t out[6]) const {
  std::lock_guard<std::mutex> lock(run_mu_);
  out[0] = graph_hits_, out[1] = graph_misses_, out[2] = out[3] = out[4] = 0;
  out[5] = captures_deferred_;
#if LIVEFUSE_HAS_CUDA
  if (graphs_) {
    const auto& c = graphs_->counters();
    out[2] = c.instantiations, out[3] = c.updates, out[4] = c.evictions;
  }
#endif
}

bool FusedPlan::writes(int op, int out) const {
  return written_[planned_.segment.value_id(ValueRef::of(op, out))];
}

std::string FusedPlan::describe() const { return planned_.describe(); }

// "n = e1[2] in [33, 96] (64 lengths run, last 96): e1[2] = n, #4.0[2] = n + 1, ...": the
// tuple's entries are the values' dims in value id order (externals, then outputs).
std::string FusedPlan::describe_family() const {
  const Segment& seg = planned_.segment;
  std::vector<std::string> names;
  for (int v = 0; v < seg.num_values(); ++v) {
    const ValueRef r = seg.value_ref(v);
    std::string base = r.is_external() ? "e" : "#";
    base += std::to_string(r.is_external() ? r.external : r.node);
    if (!r.is_external()) base.append(".").append(std::to_string(r.output));
    for (int a = 0; a < seg.shape(r).rank; ++a) names.push_back(base + '[' + std::to_string(a) + ']');
  }
  auto name = [&](size_t e) { return e < names.size() ? names[e] : "?" + std::to_string(e); };
  std::string out = "n = " + name(static_cast<size_t>(family.param)) + " in [" +
                    std::to_string(family.n_min) + ", " + std::to_string(family.n_max) +
                    "] when planned; runs bound n in [" + std::to_string(n_seen_lo_) + ", " +
                    std::to_string(n_seen_hi_) + "], last " + std::to_string(n_last_) + ":";
  for (size_t e = 0; e < family.size(); ++e) {
    if (family.slope[e] == 0) continue;
    // Appended piece by piece here and above: GCC 12 warns (-Wrestrict, a false positive) on a
    // string literal + std::string inlined into this function in builds without CUDA.
    out += ' ';
    out += name(e);
    out += " = ";
    if (family.slope[e] != 1) out += std::to_string(family.slope[e]);
    out += 'n';
    if (family.base[e] != 0) {
      out += family.base[e] > 0 ? " + " : " - ";
      out += std::to_string(std::llabs(family.base[e]));
    }
    out += ',';
  }
  out.pop_back();
  return out;
}

void FusedPlan::details(PlanDetails& d) const {
  std::lock_guard<std::mutex> lock(run_mu_);
  const Segment& seg = planned_.segment;
  for (size_t e = 0; e < seg.externals.size(); ++e)
    d.shape_pattern += (e ? " " : "") + seg.externals[e].shape.str();
  if (!seg.escapes.empty()) d.notes.emplace_back("escaping values", seg.escapes);
  if (family.defined()) {
    d.notes.emplace_back("shape family", describe_family());
    // The stretches a CUDA run replays as graphs and launches directly (fused_plan_family.cpp).
    std::string s;
    for (const FixedStretch& f : stretches_)
      s += std::string(s.empty() ? "" : " | ") + (f.varying ? "direct" : "graph") + " steps " +
           std::to_string(f.begin) + ".." + std::to_string(f.end - 1);
    d.notes.emplace_back("family stretches", s + "; stretches replayed " + std::to_string(family_replays_) +
                                                 ", launched directly " + std::to_string(family_direct_));
    if (device_kind == DeviceKind::cuda)
      d.notes.emplace_back("family graph",
                           "runs as one graph with the varying kernels patched " +
                               std::to_string(patched_replays_) + " (from recorded launches " +
                               std::to_string(recorded_replays_) + "), captured " +
                               std::to_string(patched_captures_) +
                               (patchable_ ? std::string() : "; off: " + patch_off_));
  }
  int g = 0;
  auto kernel_info = [&](const FusedKernelStep& f) {
    KernelInfo k;
    k.name = f.spec->name;
    if (f.compiled) {
      k.source = f.compiled->rendered.source;
      k.compile_ms = f.compiled->compile_ms;
      k.cache = f.compiled->from_disk ? "disk" : "miss";
      k.log = f.compiled->log;
      for (const auto& b : f.compiled->row_body_choices()) k.bodies.push_back(b.describe());
    } else {
      k.source = jit::to_string(*f.spec);  // the CPU interpreter runs this program
      if (!f.compile_error.empty()) k.log = f.compile_error;
    }
    d.kernels.push_back(std::move(k));
    return f.spec->name;
  };
  for (const Step& s : planned_.steps) {
    FusionGroupInfo gi;
    if (profiled_runs_ > 0 && static_cast<size_t>(g) < step_us_.size())
      gi.gpu_us = step_us_[g] / static_cast<double>(profiled_runs_);
    gi.name = "g" + std::to_string(g++);
    if (const auto* f = std::get_if<FusedKernelStep>(&s.body)) {
      gi.kind = f->spec->parts.size() > 1 ? "horizontal" : "vertical";
      gi.ops = f->nodes;
      gi.kernel = kernel_info(*f);
    } else if (const auto* m = std::get_if<GemmStep>(&s.body)) {
      gi.kind = !m->siblings.empty() ? "gemm_siblings" : m->tail ? "gemm_epilogue" : "gemm";
      for (int j : m->prologue_nodes()) gi.ops.push_back(j);
      if (m->siblings.empty()) gi.ops.push_back(m->node);
      else gi.ops.insert(gi.ops.end(), m->siblings.begin(), m->siblings.end());
      if (m->merged) {
        // How the concatenated weight copies fare (merged_weights.hpp): served as they were,
        // copied again because a source may have changed, made for a new binding, evicted.
        const MergedWeights::Counters c = m->merged->counters();
        d.notes.emplace_back("merged_weights " + gi.name,
                             "hits " + std::to_string(c.hits) + ", refreshes " + std::to_string(c.refreshes) +
                                 ", builds " + std::to_string(c.builds) + ", evictions " + std::to_string(c.evictions) +
                                 ", declined " + std::to_string(c.declined));
      }
      if (m->tail) {
        gi.ops.insert(gi.ops.end(), m->tail->nodes.begin(), m->tail->nodes.end());
        gi.kernel = kernel_info(*m->tail);
      }
      if (!m->rotary.parts.empty()) {  // applied as the GEMV writes q and k
        gi.kind = "gemm_siblings_rotary";
        gi.ops.insert(gi.ops.end(), m->rotary.nodes.begin(), m->rotary.nodes.end());
      }
    } else if (const auto* e = std::get_if<EagerStep>(&s.body)) {
      gi.kind = "unfused";
      gi.ops.push_back(e->node);
    } else if (const auto* v = std::get_if<ViewStep>(&s.body)) {
      gi.kind = "view";
      gi.ops.push_back(v->node);
    } else if (const auto* o = std::get_if<OpaqueStep>(&s.body)) {
      gi.kind = "opaque";
      gi.ops.push_back(o->node);
    } else if (const auto* a = std::get_if<AttentionStep>(&s.body)) {
      gi.kind = "attention";
      gi.ops = a->nodes;
      gi.kernel = "attention";
    } else if (const auto* r = std::get_if<RotaryStep>(&s.body)) {
      gi.kind = "rotary";
      gi.ops = r->nodes;
      gi.kernel = "rotary";
    }
    d.groups.push_back(std::move(gi));
  }
  for (const Decision& dec : planned_.decisions) d.decisions.emplace_back(dec.what, dec.reason);
  d.notes.emplace_back("launches", std::to_string(planned_.summary.plan_launches) + " (eager " +
                                       std::to_string(planned_.summary.eager_launches) + ")");
  for (const auto& [key, sg] : graphs_by_shape_)
    d.graphs.push_back({sg.shapes, sg.replays, static_cast<int>(sg.nodes)});
  d.notes.emplace_back("graphs", use_graphs_            ? "on"
                                 : graphs_off_.empty() ? "off"
                                                       : "off: " + graphs_off_);
  d.notes.emplace_back("graph_hits", std::to_string(graph_hits_));
  d.notes.emplace_back("graph_misses", std::to_string(graph_misses_));
  d.notes.emplace_back("captures_deferred", std::to_string(captures_deferred_));
  size_t live_sets = 0;
  for (const BindingSet& b : sets_) live_sets += !b.bufs.empty();
  d.notes.emplace_back("binding_sets", std::to_string(live_sets));
  d.notes.emplace_back("binding_set_evictions", std::to_string(set_evictions_));
}

bool FusedPlan::run(Window& w, const std::vector<std::pair<int, int>>&) {
  std::lock_guard<std::mutex> g(run_mu_);
  // The plan's own vector, kept between runs (under run_mu_): no allocation per run.
  std::vector<Tensor>& values = values_;
  struct Drop {  // the window's values are not held past the run
    std::vector<Tensor>& v;
    ~Drop() { v.clear(); }
  } drop{values};
  for (const Tensor& e : w.externals) values.push_back(e);
  for (const TensorList& outs : w.outputs)
    for (const Tensor& t : outs) values.push_back(t);
  LF_ASSERT(values.size() == planned_.values.size(), "window has ", values.size(), " values, plan ",
            planned_.values.size());
  ++runs_;
  if (family.defined()) note_family_n(values);
  if (faults::fire(faults::Point::run)) throw Error("[plan] injected fault at run");
  // A run that stops part-way -- a kernel still compiling for these shapes, an error -- has
  // bound some outputs: to a binding set's buffers, views to their sources. The window then
  // runs eagerly into the program's handles, so they go back to what its calls made them first:
  // eager execution binds them as it would have, and nothing the program keeps points into a set
  // the plan hands out again (the encoder fuzz's GPU case: a layer plan whose capture a kernel
  // still compiling for a new shape ended left its outputs bound, and the eager layer after it
  // gave wrong values).
  unbound_at_entry_.clear();
  for (size_t v = w.externals.size(); v < values.size(); ++v) {
    const TensorImpl& t = *values[v].impl();
    if (!t.storage)
      unbound_at_entry_.push_back({v, t.offset, t.strides, t.pending.load(std::memory_order_relaxed)});
  }
  try {
    if (device_kind == DeviceKind::cpu) {
      // A run that filled a cache (a GEMM weight packed, sibling weights concatenated) is not
      // what a run costs, so live sampling skips it, as it skips a CUDA binding's first,
      // uncaptured run. A plan that serves every layer of a model meets new weights in each of
      // its first runs: timed, those made the CPU demo's layer plan look 28% slower than eager
      // (1.60 against 1.25 ms) where it ran as fast. Only early runs: a plan whose caches refill
      // on every run (weights the program rewrites) must still be timed.
      const bool early = runs_ <= kColdRunsAtMost;  // later runs skip the counters' locks
      const uint64_t fills = early ? cache_fills() : 0;
      if (config().profile) run_profiled_cpu(values);
      else run_plan(planned_, values, nullptr);
      if (early && cache_fills() != fills) w.cold_run = true;
      return true;
    }
    return run_cuda(values, w);
  } catch (const KernelNotReady&) {
    restore_unbound(values);
    return false;  // a kernel for these shapes is compiling: this window runs eagerly
  } catch (...) {
    restore_unbound(values);
    throw;
  }
}

void FusedPlan::restore_unbound(std::vector<Tensor>& values) const {
  for (const Unbound& u : unbound_at_entry_) {
    TensorImpl& t = *values[u.value].impl();
    t.storage.reset();
    t.offset = u.offset;
    t.strides = u.strides;
    t.pending.store(u.pending, std::memory_order_relaxed);
  }
}

// The n this run binds: the dim of the value that tuple entry `family.param` is.
void FusedPlan::note_family_n(const std::vector<Tensor>& values) {
  size_t e = static_cast<size_t>(family.param);
  for (const Tensor& t : values) {
    const Shape& s = t.impl()->shape;
    if (e < static_cast<size_t>(s.rank)) {
      n_last_ = s.v[e];
      n_seen_lo_ = n_seen_lo_ < 0 ? n_last_ : std::min(n_seen_lo_, n_last_);
      n_seen_hi_ = std::max(n_seen_hi_, n_last_);
      return;
    }
    e -= static_cast<size_t>(s.rank);
  }
}

uint64_t FusedPlan::cache_fills() const {
  uint64_t n = cpu::pack_cache().counters().admitted;
  for (const Step& st : planned_.steps)
    if (const auto* g = std::get_if<GemmStep>(&st.body); g && g->merged) n += g->merged->counters().builds;
  return n;
}

// A replay skips the steps, so views must still be bound to their sources (copying views were
// bound to the set's buffers, which the graph wrote). Host work only.
void FusedPlan::bind_written_views(const std::vector<Tensor>& values, const Window& w) const {
  for (size_t v = 0; v < values.size(); ++v) {
    if (planned_.values[v] != ValueKind::View || !written_[v] || values[v].impl()->storage)
      continue;
    const ValueRef r = planned_.segment.value_ref(static_cast<int>(v));
    Executor::run_eager_into(w.calls[r.node], w.outputs[r.node], stream_by_id(w.stream_id));
  }
}

uint64_t FusedPlan::externals_key(const std::vector<Tensor>& externals, uint32_t stream) {
  uint64_t k = mix_key(0x5eed, stream);
  for (const Tensor& t : externals) {
    const TensorImpl& i = *t.impl();
    k = mix_key(k, reinterpret_cast<uintptr_t>(i.storage ? i.storage->ptr : nullptr) + i.offset);
    k = mix_key(k, static_cast<uint64_t>(i.dtype));
    for (int d = 0; d < i.shape.rank; ++d)
      k = mix_key(mix_key(k, static_cast<uint64_t>(i.shape.v[d])), static_cast<uint64_t>(i.strides.v[d]));
  }
  return k;
}

EarlyLaunch FusedPlan::launch_early(const std::vector<Tensor>& externals, const Window& w) {
#if LIVEFUSE_HAS_CUDA
  if (!early_ok_ || config().profile) return {};
  const uint64_t k = externals_key(externals, w.stream_id);
  std::lock_guard<std::mutex> g(run_mu_);
  if (!use_graphs_) return {};
  auto it = early_.find(k);
  if (it == early_.end()) return {};
  for (const EarlyLaunch& e : it->second) {
    BindingSet& set = sets_[e.set];
    if (!set.free()) continue;
    const graphs::CudaGraphExec* exec = graphs_->find(e.graph);
    if (!exec) continue;
    exec->launch(static_cast<cudaStream_t>(w.stream_handle));
    set.reserved = true;
    return e;
  }
#else
  (void)externals;
  (void)w;
#endif
  return {};
}

void FusedPlan::cancel_early(const EarlyLaunch& e) {
  std::lock_guard<std::mutex> g(run_mu_);
  sets_[e.set].reserved = false;
}

bool FusedPlan::run_cuda(std::vector<Tensor>& values, Window& w) {
#if LIVEFUSE_HAS_CUDA
  auto st = static_cast<cudaStream_t>(w.stream_handle);
  uint64_t shape_key = 0x3b;
  for (const Tensor& t : values)
    for (int d = 0; d < t.impl()->shape.rank; ++d)
      shape_key = mix_key(shape_key, static_cast<uint64_t>(t.impl()->shape.v[d]));
  tick_sets();
  if (family.defined() && use_graphs_ && !config().profile) return run_cuda_family(values, w);
  if (const EarlyLaunch e = w.early; e.launched()) {
    // Launched at the window's first call: hand its set's buffers to the outputs. (Shapes
    // follow from the externals, so they match; if not, the usual path below recomputes
    // everything, ordered after the early work on this stream.)
    w.early = {};
    sets_[e.set].reserved = false;
    mark_used(e.set);
    if (e.shapes == shape_key) {
      use_set(values, e.set);
      bind_written_views(values, w);
      ++graph_hits_;
      if (auto it = graphs_by_shape_.find(shape_key); it != graphs_by_shape_.end()) ++it->second.replays;
      return true;
    }
  }
  // Every written value gets its storage before any capture: an allocation inside a capture
  // would become graph-owned memory.
  const int set = bind_outputs(values, w, shape_key);
  if (set < 0) {
    ++unbound_runs_;
    for (size_t v = 0; v < values.size(); ++v) {
      if (needs_buffer(values, w, v)) give_storage(values, w, v, st);
    }
  }
  if (config().profile) {
    run_profiled(values, st);
    return true;
  }
  if (!use_graphs_) {
    run_plan(planned_, values, st);
    return true;
  }
  // A graph bakes in every pointer and shape it was captured with: that is its key.
  // (shape_key already holds every shape; the addresses are added here.)
  // The stream too: a capture on a stream is always preceded by a direct run of the same key
  // on it, which creates what a first use on that stream needs (a cuBLASLt workspace, say)
  // outside the capture, where such calls are legal.
  // Merged sibling GEMMs read plan-owned weight copies: brought up to date on the stream before
  // the capture or replay (a replay runs no host code), and their addresses are part of the key.
  uint64_t key = mix_key(mix_key(shape_key, static_cast<uint64_t>(set + 1)), w.stream_id);
  key = mix_key(key, prepare_merged_weights(planned_, values, st));
  for (const Tensor& t : values) {
    const TensorImpl& i = *t.impl();
    key = mix_key(key, reinterpret_cast<uintptr_t>(i.storage ? i.storage->ptr : nullptr) + i.offset);
  }
  // A binding seen for the first time runs directly: it also warms every kernel module and
  // library handle, and a one-off binding never pays for a capture. The second time it is
  // captured; from then on it replays.
  // A capture also takes in whatever any thread enqueues on the stream meanwhile. A window
  // settled from another thread (a pending value handed over, a storage exposed there) can run
  // while the stream's own thread launches eager work on it, so it never captures.
  const bool may_capture = Stream::current(w.device).handle() == w.stream_handle;
  if (runs_directly(key, may_capture)) {
    run_plan(planned_, values, st);
    // Launch by launch: not what a replay costs, so live sampling skips it -- except in a plan
    // with a shape family (a decode step at a new length nearly every run), where a binding is
    // seen once and the direct run is the steady state (after its first runs: module loads).
    w.cold_run = !family.defined() || runs_ <= 2;
    return true;
  }
  if (faults::fire(faults::Point::instantiate))
    throw Error("[plan] injected fault at graph instantiate");
  size_t nodes = 0;
  // Views get their storage when their step runs; during capture that is host-side only.
  const bool hit = replay(key, set, st, [&] { run_plan(planned_, values, st); }, values, w, &nodes);
  if (!hit) w.cold_run = true;
  // A binding that replays can be launched early next time (bounded; set >= 0: a set, not
  // one-off storage, holds the outputs). Only plans that can launch early keep the record.
  if (early_ok_ && hit && set >= 0 && first_op_binds_externals()) {
    if (early_.size() > 1024) early_.clear();
    std::vector<EarlyLaunch>& es = early_[externals_key(w.externals, w.stream_id)];
    const EarlyLaunch e{set, key, shape_key};
    auto same = std::find_if(es.begin(), es.end(), [&](const EarlyLaunch& x) { return x.set == set; });
    if (same == es.end()) es.push_back(e);
    else *same = e;
  }
  if (graphs_by_shape_.size() < 256 || graphs_by_shape_.count(shape_key)) {
    ShapeGraphs& sg = graphs_by_shape_[shape_key];
    if (sg.shapes.empty())
      for (const Tensor& e : w.externals)
        sg.shapes.append(sg.shapes.empty() ? "" : " ").append(e.shape().str());
    ++sg.replays;
    sg.nodes = nodes;
  }
  // Probation, over windows of kGraphProbation runs: while captures outnumber replays the
  // bindings are not repeating (a model with many layers needs a few windows to warm up, so
  // only a window with no replay at all after warm-up turns graphs off).
  if (runs_ % kGraphProbation == 0) {
    const uint64_t hits = graph_hits_ - window_hits_, misses = graph_misses_ - window_misses_;
    if (runs_ >= 4 * kGraphProbation && hits == 0 && misses > 0) use_graphs_ = false;
    window_hits_ = graph_hits_, window_misses_ = graph_misses_;
  }
  return true;
#else
  (void)values;
  (void)w;
  throw Error("[plan] CUDA plan on a build without CUDA");
#endif
}

#if LIVEFUSE_HAS_CUDA
bool FusedPlan::runs_directly(uint64_t key, bool may_capture) {
  if (graphs_->contains(key)) return false;
  if (may_capture && !seen_once_.insert(key).second) {
    // The second sight captures -- unless this thread spent its share of time on captures
    // lately: then step by step again, and a later sight captures (graphs/capture_budget.hpp).
    graphs::CaptureBudget& budget = graphs::thread_capture_budget();
    if (budget.allow(graphs::CaptureBudget::Clock::now())) return false;
    budget.deny();
    ++captures_deferred_;
    return true;
  }
  if (seen_once_.size() > 4096) seen_once_.clear();  // bounded
  return true;
}

bool FusedPlan::replay(uint64_t key, int set, void* stream, const std::function<void()>& enqueue,
                       const std::vector<Tensor>& values, const Window& w, size_t* nodes) {
  const auto st = static_cast<cudaStream_t>(stream);
  const uint64_t misses_before = graphs_->counters().misses;
  const graphs::CudaGraphExec* found = nullptr;
  try {
    found = &graphs_->get_or_build(key, static_cast<uint32_t>(set), st, enqueue, nodes);
  } catch (const graphs::CaptureHeldMemory& e) {
    // A step allocates memory the program then holds (a value no binding set covers): such a
    // graph cannot run twice. The plan launches its steps directly from now on; this run's
    // work, which the capture did not do, too.
    use_graphs_ = false;
    graphs_off_ = e.what();
    ++graph_misses_;
    enqueue();
    return false;
  }
  const graphs::CudaGraphExec& exec = *found;
  const bool hit = graphs_->counters().misses == misses_before;
  if (hit) {
    ++graph_hits_;
    bind_written_views(values, w);  // the replay skipped the steps that bind views
  } else {
    ++graph_misses_;
  }
  exec.launch(st);
  return hit;
}
#endif

void FusedPlan::run_profiled_cpu(std::span<const Tensor> values) {
  const size_t n = planned_.steps.size();
  if (step_us_.size() != n) step_us_.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run_step_cpu(planned_, planned_.steps[i], values);
    step_us_[i] += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  // The first run packs weights and fills caches: not what a run costs.
  if (runs_ == 1) step_us_.assign(n, 0.0);
  else ++profiled_runs_;
}

void FusedPlan::run_profiled(std::span<const Tensor> values, void* stream) {
#if LIVEFUSE_HAS_CUDA
  auto st = static_cast<cudaStream_t>(stream);
  const size_t n = planned_.steps.size();
  if (step_events_.size() != n + 1) {
    step_events_.resize(n + 1);
    for (void*& e : step_events_) {
      cudaEvent_t ev = nullptr;
      LF_CUDA_CHECK(cudaEventCreate(&ev));
      e = ev;
    }
    step_us_.assign(n, 0.0);
  }
  const auto ev = [&](size_t i) { return static_cast<cudaEvent_t>(step_events_[i]); };
  // The stream is held at a gate until every step is enqueued: the device then runs them back
  // to back, and each interval is the step's GPU time, not the host's launch cost. (The first,
  // cold run -- module loads, cuBLASLt setup -- goes ungated and is not counted.)
  struct Gate {
    std::atomic<bool> open{false};
    static void CUDART_CB wait(void* p) {
      const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      auto* g = static_cast<Gate*>(p);
      while (!g->open.load() && std::chrono::steady_clock::now() < limit)
        std::this_thread::yield();
    }
  } gate;
  struct Release {  // the gate opens and has been passed before `gate` goes out of scope
    Gate& g;
    cudaStream_t s;
    ~Release() {
      g.open = true;
      (void)cudaStreamSynchronize(s);
    }
  } release{gate, st};
  if (runs_ > 1) LF_CUDA_CHECK(cudaLaunchHostFunc(st, &Gate::wait, &gate));
  LF_CUDA_CHECK(cudaEventRecord(ev(0), st));
  for (size_t i = 0; i < n; ++i) {
    launch_step_cuda(planned_, planned_.steps[i], values, st);
    LF_CUDA_CHECK(cudaEventRecord(ev(i + 1), st));
  }
  gate.open = true;
  LF_CUDA_CHECK(cudaEventSynchronize(ev(n)));
  if (runs_ == 1) return;  // cold: module loads, first cuBLASLt heuristics
  for (size_t i = 0; i < n; ++i) {
    float ms = 0;
    LF_CUDA_CHECK(cudaEventElapsedTime(&ms, ev(i), ev(i + 1)));
    step_us_[i] += 1e3 * ms;
  }
  ++profiled_runs_;
#else
  (void)values;
  (void)stream;
#endif
}

}  // namespace livefuse::planner
