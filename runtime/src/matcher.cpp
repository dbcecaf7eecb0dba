// The Matcher (runtime/matcher.hpp). State is thread-local: one window per stream the thread
// uses, so the hot path shares no lock with other threads' calls -- each call takes only its own
// window's mutex, uncontended unless another thread syncs on one of the window's values
// (StreamWindow::mu) -- and the PlanTable is read through a version counter. The
// window type is runtime/matcher_window.hpp; how a window ends (through its plan, or eagerly)
// is matcher_end.cpp; live sampling and LIVEFUSE_VERIFY are in matcher_checks.cpp.
#include "runtime/matcher.hpp"
#include "runtime/matcher_window.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_set>

#include "livefuse/config.hpp"
#include "livefuse/error.hpp"
#include "livefuse/stream.hpp"
#include "kernels/backend.hpp"
#include "monitor/detector.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/executor.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/plan.hpp"
#include "runtime/trace_sink.hpp"

namespace livefuse::matcher {

using detail::Candidate;
using detail::StreamWindow;
using detail::clear;
using detail::complete;
using detail::flush;
using detail::window_refs;
using detail::snapshot_reachable;

namespace {

void settle_quietly(StreamWindow& sw);

struct ThreadState {
  // The kernels' per-thread buffers are made first, so they outlive this state at thread exit
  // (its destructor runs eager kernels; cpu::prepare_thread).
  ThreadState() { cpu::prepare_thread(); }
  uint64_t version = ~0ull;
  std::shared_ptr<const PlanTable::Snapshot> snap;
  std::vector<std::unique_ptr<StreamWindow>> windows;
  std::vector<std::unique_ptr<StreamWindow>> shadow_windows;  // LIVEFUSE=shadow
  // A thread that ends with deferred work (handed to another thread, say) completes it first.
  // The windows themselves are leaked (a few per thread): another thread that saw a pending
  // tag a moment earlier may still lock one.
  // It runs among the thread's other thread_local destructors, in no order we control (a
  // backend's per-thread cache may already be gone), so it never runs a plan (a graph capture
  // or launch at teardown): deferred calls are flushed eagerly.
  ~ThreadState();
};
thread_local ThreadState t_state;
// t_state without its initialisation check: a thread_local with a constructor is reached through
// a wrapper that tests whether it was made yet, and every op call reaches it, some twice. Set at
// its first use on the thread; cleared, for good, when it is destroyed.
thread_local ThreadState* t_fast = nullptr;
thread_local bool t_state_gone = false;

ThreadState& state() {
  if (ThreadState* s = t_fast) return *s;
  ThreadState& s = t_state;
  if (!t_state_gone) t_fast = &s;
  return s;
}

ThreadState::~ThreadState() {
  t_fast = nullptr;
  t_state_gone = true;
  for (auto& w : windows) {
    settle_quietly(*w);
    w->memo = InferMemo();  // owner-only, unlike the window: a thread pool's threads leak none
    (void)w.release();
  }
}

// Every window ever made, so a sync point on another thread can tell a window's tag from any
// other use of TensorImpl::pending. Windows are never freed (see ~ThreadState).
std::mutex g_registry_mu;
std::unordered_set<const void*>& registry() {
  static auto* r = new std::unordered_set<const void*>;
  return *r;
}

StreamWindow& window_for(ThreadState& ts, const Stream& s) {
  for (auto& w : ts.windows)
    if (w->stream.id() == s.id()) return *w;
  ts.windows.push_back(std::make_unique<StreamWindow>());
  ts.windows.back()->stream = s;
  std::lock_guard<std::mutex> g(g_registry_mu);
  registry().insert(ts.windows.back().get());
  return *ts.windows.back();
}

// Per candidate per deferred call: reads the inputs' fields directly (they are defined: the
// call's inputs were checked by infer_outputs) instead of through Tensor's checked accessors.
bool op_matches(const PlanOp& p, const OpCall& c, uint64_t attrs_hash) {
  if (p.op != c.op || p.attrs_hash != attrs_hash || p.inputs.size() != c.inputs.size())
    return false;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const TensorImpl& t = *c.inputs[i].impl();
    if (p.in_dtypes[i] != t.dtype || p.in_ranks[i] != t.shape.rank) return false;
  }
  return true;
}

bool is_window_output(const StreamWindow& sw, const TensorImpl* t) {
  for (const TensorList& outs : sw.w.outputs)
    for (const Tensor& o : outs)
      if (o.impl() == t) return true;
  return false;
}

// `shadow`: the window's outputs are real (LIVEFUSE=shadow observes, never defers).
bool wiring_matches(const PlanOp& p, const OpCall& c, const StreamWindow& sw, Candidate& cand,
                    bool shadow = false) {
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const PlanInput& in = p.inputs[i];
    const TensorImpl* t = c.inputs[i].impl();
    if (in.internal()) {
      if (static_cast<size_t>(in.op) >= sw.w.outputs.size() ||
          sw.w.outputs[in.op][in.out].impl() != t)
        return false;
    } else {
      // An internal value where the plan expects an input.
      if (shadow ? is_window_output(sw, t) : t->pending == &sw) return false;
      Tensor& slot = cand.externals[in.slot];
      if (slot.defined() && slot.impl() != t) return false;
    }
  }
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (!p.inputs[i].internal())
      if (Tensor& slot = cand.externals[p.inputs[i].slot]; !slot.defined()) slot = c.inputs[i];
  return true;
}

// A window that ends without its plan taking the early launch (divergence, a flush, an escaped
// intermediate, a failed run): the launched work is dropped and the plan waits a while before
// launching early again.
void drop_early(StreamWindow& sw) {
  if (!sw.w.early.launched()) return;
  // Completions before the next early launch: long enough that a plan whose windows keep
  // diverging stops paying a launch per window, short enough to recover from one odd window.
  constexpr int kCooldown = 64;
  sw.early_plan->cancel_early(sw.w.early);
  sw.early_plan->early_cooldown.store(kCooldown, std::memory_order_relaxed);
  matcher_counters().early_wasted.fetch_add(1, std::memory_order_relaxed);
  sw.w.early = {};
}

}  // namespace

void detail::clear(StreamWindow& sw) {
  drop_early(sw);
  sw.early_plan = nullptr;
  if (sw.active) trace::async_end("matcher", "deferred_window", reinterpret_cast<uintptr_t>(&sw));
  // A deferred call is counted when its window ends: no shared counter is touched per call.
  if (const size_t n = sw.w.calls.size()) {
    auto& ctr = matcher_counters();
    ctr.calls.fetch_add(n, std::memory_order_relaxed);
    ctr.deferred.fetch_add(n, std::memory_order_relaxed);
  }
  for (auto& outs : sw.w.outputs)
    // Release: a thread that sees the tag gone sees the storage bound before it.
    for (auto& t : outs)
      if (t.defined()) t.impl()->pending.store(nullptr, std::memory_order_release);
  sw.w.calls.clear();
  sw.w.outputs.clear();
  sw.w.externals.clear();
  sw.w.ids_begin = sw.w.ids_next = sw.w.ids_end = 0;
  sw.w.held = 0;
  sw.candidates.clear();
  sw.snapshots.clear();
  sw.ready.reset();
  sw.keep.reset();
  sw.active = false;
  sw.open.store(false, std::memory_order_release);
}

namespace {

bool usable(const Plan& p, DeviceKind kind) {
  const PlanState s = p.state.load(std::memory_order_relaxed);
  return p.device_kind == kind && (s == PlanState::active || s == PlanState::sampling) &&
         !p.ops.empty();
}

// Returns the thread's state, its plan snapshot current.
ThreadState& refresh_snapshot() {
  ThreadState& ts = state();
  PlanTable& table = PlanTable::get();
  if (const uint64_t v = table.version(); v != ts.version) {
    ts.snap = table.snapshot();
    ts.version = v;
  }
  return ts;
}

// The plans whose op 0 `call` can be (the window is empty, so an input the plan expects from
// inside the window cannot match).
void open_candidates(StreamWindow& sw, const OpCall& call, uint64_t h, bool shadow) {
  const DeviceKind kind = sw.stream.device().kind;
  for (const auto& p : state().snap->plans) {
    // A rejected plan's first op counts the windows toward its retry (retry_rejected).
    const bool use = usable(*p, kind);
    if (!use && (p->ops.empty() || p->device_kind != kind ||
                 p->state.load(std::memory_order_relaxed) != PlanState::rejected))
      continue;
    if (!op_matches(p->ops[0], call, h)) continue;
    if (!use && !detail::retry_rejected(*p)) continue;
    Candidate c{p.get(), std::vector<Tensor>(p->n_external)};
    if (wiring_matches(p->ops[0], call, sw, c, shadow)) sw.candidates.push_back(std::move(c));
  }
}

// Keeps the candidates whose op at the window's next position is `call`; false when none is left.
// Filters in place: wiring_matches binds a candidate's slots only once the whole op matched, so
// a rejected candidate is left untouched and no copy is needed (this runs for every deferred
// call).
bool advance_candidates(StreamWindow& sw, const OpCall& call, uint64_t h, bool shadow) {
  const size_t pos = sw.w.outputs.size();
  const DeviceKind kind = sw.stream.device().kind;
  size_t kept = 0;
  for (size_t i = 0; i < sw.candidates.size(); ++i) {
    Candidate& c = sw.candidates[i];
    const bool ok = pos < c.plan->ops.size() && usable(*c.plan, kind) &&
                    op_matches(c.plan->ops[pos], call, h) &&
                    wiring_matches(c.plan->ops[pos], call, sw, c, shadow);
    if (!ok) continue;
    if (kept != i) sw.candidates[kept] = std::move(c);
    ++kept;
  }
  sw.candidates.resize(kept);
  return kept != 0;
}

// After the window's first call: launches the plan early (Plan::launch_early) when exactly one
// plan can complete this window, it is past sampling and verification, and the first call has
// bound all of its external slots.
void maybe_launch_early(StreamWindow& sw) {
  if (sw.candidates.size() != 1) return;
  const Candidate& c = sw.candidates[0];
  Plan& p = *c.plan;
  if (p.ops.size() < 2 || p.state.load(std::memory_order_relaxed) != PlanState::active ||
      p.early_cooldown.load(std::memory_order_relaxed) > 0 ||
      p.verified_runs.load(std::memory_order_relaxed) < config().verify || !p.first_op_binds_externals())
    return;
  try {
    sw.w.early = p.launch_early(c.externals, sw.w);
  } catch (const std::exception&) {
    sw.w.early = {};  // not launched: the window completes the usual way (and reports a failure)
  }
  if (!sw.w.early.launched()) return;
  sw.early_plan = &p;
  matcher_counters().early_launches.fetch_add(1, std::memory_order_relaxed);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  // Compared on the CPU only: on a GPU it would need a sync (the copies are in stream order).
  if (!a.device().is_cpu() || a.impl()->storage->bytes != b.impl()->storage->bytes) return false;
  return std::memcmp(a.impl()->storage->ptr, b.impl()->storage->ptr, a.impl()->storage->bytes) == 0;
}

// A call taken by the window reads memory the program can write behind livefuse's back from a
// snapshot taken now (reachable.cpp, the note). Checked under the window's lock, like
// settle_readers looks: a storage exposed after this look is settled by it. A second read of
// the same value in one window gets the first snapshot when the bytes have not changed since
// (the plan binds one tensor per external); else the new snapshot, and the wiring diverges.
// Before a call extends the window (its wiring then compares snapshots), or after it started
// one (the candidates' slots bound to the program's value are moved to the snapshot).
void protect_reachable(StreamWindow& sw, OpCall& call) {
  for (Tensor& in : call.inputs) {
    const Storage* s = in.impl()->storage.get();
    if (!s || !s->may_change()) continue;
    Tensor snap = snapshot_reachable(in, sw.stream);
    bool reused = false;
    for (const auto& [orig, copy] : sw.snapshots)
      if (orig.impl() == in.impl() && same_bytes(copy, snap)) {
        snap = copy;
        reused = true;
        break;
      }
    for (Candidate& c : sw.candidates)
      for (Tensor& slot : c.externals)
        if (slot.impl() == in.impl()) slot = snap;
    if (!reused) sw.snapshots.emplace_back(in, snap);  // listed once, however often it is read
    in = std::move(snap);
  }
}

// Starts a window when `call` can be op 0 of some plan.
bool start(StreamWindow& sw, const OpCall& call, uint64_t h) {
  open_candidates(sw, call, h, false);
  if (sw.candidates.empty()) return false;
  sw.active = true;
  sw.open.store(true, std::memory_order_relaxed);
  trace::async_begin("matcher", "deferred_window", reinterpret_cast<uintptr_t>(&sw));
  if (TraceSink* sink = trace_sink()) sink->on_window_open(sw.stream.id());
  sw.keep = state().snap;
  sw.defer_us = 0;
  sw.timing_defer = false;
  if (sw.stream.device().is_cpu())
    for (const Candidate& c : sw.candidates)
      sw.timing_defer |= c.plan->state.load(std::memory_order_relaxed) == PlanState::sampling;
  sw.w.stream_id = sw.stream.id();
  sw.w.stream_handle = sw.stream.handle();
  sw.w.device = sw.stream.device();
  sw.w.ids_begin = sw.w.ids_next = reserve_value_ids(Window::kIdBlock);
  sw.w.ids_end = sw.w.ids_begin + Window::kIdBlock;
  return true;
}

}  // namespace

InferMemo& infer_memo(const Stream& stream) {
  ThreadState& ts = state();
  // Most calls of a thread go to one stream: its window first (window_for walks them all).
  if (!ts.windows.empty() && ts.windows.front()->stream.id() == stream.id())
    return ts.windows.front()->memo;
  return window_for(ts, stream).memo;
}

std::optional<TensorList> try_defer(OpCall& call, const OutputInfos& infos, const Stream& stream,
                                    const std::recursive_mutex* held, uint64_t attrs_hash) {
  ThreadState& ts = refresh_snapshot();
  auto& ctr = matcher_counters();
  const bool any_plan = ts.snap && !ts.snap->plans.empty();
  if (!any_plan) {
    // Nothing can be deferred: only a window still open (its plan just went away) needs this
    // call, to be flushed. Checked without its lock (see StreamWindow::open).
    bool open = false;
    for (const auto& w : ts.windows) open |= w->open.load(std::memory_order_acquire);
    if (!open) {
      ctr.calls.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
  }
  StreamWindow& sw = window_for(ts, stream);
  // Inputs pending in other windows are settled first, before this window's lock is taken:
  // two threads handing each other pending values must not wait on each other's windows.
  for (const Tensor& in : call.inputs)
    if (in.impl()->pending && in.impl()->pending != &sw) flush_for(*in.impl());
  // A call reading the window's own pending values holds its lock already (hold_inputs).
  std::unique_lock<std::recursive_mutex> lock(sw.mu, std::defer_lock);
  if (held != &sw.mu) lock.lock();
  if (sw.ready) complete(sw);
  // The deferral's host time, while a candidate samples (StreamWindow::defer_us): from here, or
  // from the start of the window this call opens. No clock read otherwise.
  std::chrono::steady_clock::time_point t_defer{};
  if (sw.active && sw.timing_defer) t_defer = std::chrono::steady_clock::now();
  // A wrapped kernel of the program's own runs at its call, never deferred nor captured: an
  // error its launch raises comes out of this call, and its launch function runs once per call
  // (the monitor never puts one into a sequence: monitor/detector.cpp).
  if (call.op == OpId::opaque) {
    if (sw.active) flush(sw, ctr.flush_divergent);
    ctr.calls.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  const uint64_t h = attrs_hash ? attrs_hash : monitor::structural_attrs_hash(call.op, call.attrs);
  if (sw.active) {
    protect_reachable(sw, call);
    if (!advance_candidates(sw, call, h, false)) flush(sw, ctr.flush_divergent);
  }
  if (!sw.active) {
    if (!any_plan || !start(sw, call, h)) {
      ctr.calls.fetch_add(1, std::memory_order_relaxed);  // runs eagerly; deferred ones: clear()
      return std::nullopt;
    }
    if (sw.timing_defer) t_defer = std::chrono::steady_clock::now();
    protect_reachable(sw, call);
  }
  TensorList outs = Executor::make_outputs(call, infos, stream.device(), &sw, &sw.w);
  sw.w.calls.push_back(std::move(call));
  sw.w.outputs.push_back(outs);
  const size_t len = sw.w.calls.size();
  if (len == 1) maybe_launch_early(sw);
  for (Candidate& c : sw.candidates) {
    if (c.plan->ops.size() == len) {
      sw.ready = std::move(c);  // the window ends at the next call, candidates with it
      break;
    }
  }
  sw.memo.set_position(sw.ready ? 0 : len);
  if (sw.ready) {
    const auto [hits, misses] = sw.memo.take_counts();
    ctr.infer_memo_hits.fetch_add(hits, std::memory_order_relaxed);
    ctr.infer_memo_misses.fetch_add(misses, std::memory_order_relaxed);
  }
  if (sw.active && sw.timing_defer)
    sw.defer_us += detail::us_since(t_defer);
  return outs;
}

void shadow_observe(const OpCall& call, const TensorList& outs, const Stream& stream) {
  ThreadState& ts = refresh_snapshot();
  if (!ts.snap || ts.snap->plans.empty()) return;
  StreamWindow* found = nullptr;
  for (auto& w : ts.shadow_windows)
    if (w->stream.id() == stream.id()) found = w.get();
  if (!found) {
    ts.shadow_windows.push_back(std::make_unique<StreamWindow>());
    found = ts.shadow_windows.back().get();
    found->stream = stream;
  }
  StreamWindow& sw = *found;
  auto reset = [&] {
    sw.w.outputs.clear();
    sw.candidates.clear();
    sw.active = false;
  };
  const uint64_t h = monitor::structural_attrs_hash(call.op, call.attrs);
  if (sw.active && !advance_candidates(sw, call, h, true)) reset();
  if (!sw.active) {
    open_candidates(sw, call, h, true);
    if (sw.candidates.empty()) return;
    sw.active = true;
    sw.keep = ts.snap;
  }
  sw.w.outputs.push_back(outs);
  for (const Candidate& c : sw.candidates) {
    if (c.plan->ops.size() == sw.w.outputs.size()) {
      matcher_counters().shadow_would_serve.fetch_add(sw.w.outputs.size(),
                                                      std::memory_order_relaxed);
      reset();
      break;
    }
  }
}

// A sync point: a complete window runs its plan; an incomplete one is flushed eagerly.
void settle(StreamWindow& sw) {
  std::lock_guard<std::recursive_mutex> lock(sw.mu);
  if (sw.ready) complete(sw);
  if (sw.active) flush(sw, matcher_counters().flush_sync);
}

namespace {
void settle_quietly(StreamWindow& sw) {
  try {
    std::lock_guard<std::recursive_mutex> lock(sw.mu);
    if (!sw.active) return;
    // Values nobody else holds can never be observed: dropped without running anything.
    std::vector<long>& refs = sw.own_refs;
    window_refs(sw, refs);
    bool held = false;
    size_t f = 0;
    for (const TensorList& outs : sw.w.outputs)
      for (const Tensor& t : outs) held |= t.impl_ptr().use_count() > refs[f++];
    if (!held) return clear(sw);
    sw.ready.reset();  // the window stays active: flushed eagerly below
    flush(sw, matcher_counters().flush_sync);
  } catch (...) {
    // Thread exit: nowhere to report; the values stay without storage and any later use
    // of them fails loudly instead of reading garbage.
  }
}
}  // namespace

void flush_for(const TensorImpl& t) {
  void* tag = t.pending.load();
  if (!tag) return;
  for (auto& w : state().windows)
    if (tag == w.get()) return settle(*w);
  // A value deferred on another thread.
  {
    std::lock_guard<std::mutex> g(g_registry_mu);
    if (!registry().count(tag)) return;
  }
  StreamWindow& other = *static_cast<StreamWindow*>(tag);
  std::lock_guard<std::recursive_mutex> lock(other.mu);
  if (t.pending.load() == tag) settle(other);
}

void flush_all() {
  for (auto& w : state().windows) settle(*w);
}

namespace {
bool window_reads(const StreamWindow& sw, const Storage& s) {
  for (const OpCall& c : sw.w.calls)
    for (const Tensor& in : c.inputs)
      if (in.impl()->storage.get() == &s) return true;
  return false;
}
}  // namespace

std::unique_lock<std::recursive_mutex> hold_inputs(const OpCall& call) {
  StreamWindow* own = nullptr;
  for (const Tensor& in : call.inputs) {
    if (!in.defined()) continue;  // infer_outputs reports it, naming the op
    void* tag = in.impl()->pending.load(std::memory_order_acquire);
    if (!tag) continue;
    StreamWindow* mine = nullptr;
    for (auto& w : state().windows)
      if (w.get() == tag) mine = w.get();
    if (!mine)
      flush_for(*in.impl());
    else if (!own)
      own = mine;  // a call reading two of this thread's windows (two streams) holds the first
  }
  if (!own) return {};
  return std::unique_lock<std::recursive_mutex>(own->mu);
}

void settle_readers(const Storage& s) {
  std::vector<StreamWindow*> all;
  {
    std::lock_guard<std::mutex> g(g_registry_mu);
    for (const void* w : registry()) all.push_back(static_cast<StreamWindow*>(const_cast<void*>(w)));
  }
  for (StreamWindow* w : all) {
    if (!w->open.load(std::memory_order_acquire)) continue;
    std::lock_guard<std::recursive_mutex> lock(w->mu);
    if (w->active && window_reads(*w, s)) settle(*w);
  }
}

}  // namespace livefuse::matcher
