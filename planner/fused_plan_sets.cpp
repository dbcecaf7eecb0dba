// FusedPlan's binding sets (fused_plan.hpp): plan-owned buffers for the values a run writes,
// one set per tuple of shapes, reused once nobody holds a tensor sharing them, freed when idle.
#include <algorithm>
#include <atomic>

#include "planner/fused_plan.hpp"
#include "runtime/append.hpp"
#include "runtime/executor.hpp"
#include "runtime/memory_pool.hpp"

namespace livefuse::planner {

// Values a run writes into fresh storage: materialized ones, and views that copy (a reshape
// of a non-contiguous source). Both must be bound before a capture.
bool FusedPlan::needs_buffer(const std::vector<Tensor>& values, const Window& w, size_t v) const {
  const TensorImpl& t = *values[v].impl();
  if (t.storage) return false;
  if (planned_.values[v] == ValueKind::Materialized) return true;
  if (planned_.values[v] != ValueKind::View || !written_[v]) return false;
  const ValueRef r = planned_.segment.value_ref(static_cast<int>(v));
  return Executor::is_copying_view(w.calls[r.node]);
}

void FusedPlan::give_storage(std::vector<Tensor>& values, const Window& w, size_t v, void* stream) const {
  // A concat growing a cache may take the block of the cache it grows (runtime/append.hpp).
  const ValueRef r = planned_.segment.value_ref(static_cast<int>(v));
  append::give_storage(r.is_external() ? nullptr : &w.calls[r.node], *values[v].impl(), stream);
}

bool FusedPlan::BindingSet::free() const {
  if (bufs.empty()) return false;  // a freed slot
  for (const auto& b : bufs)
    if (b && b.use_count() != 1) return false;
  return !reserved;
}

namespace {
// Runs of every CUDA plan, in order: the clock that idle sets of plans no longer running are
// measured by. Sweeps every kSweepEvery runs; a set unused for kIdleClock runs of any plan goes.
std::atomic<uint64_t> g_run_clock{0};
constexpr uint64_t kSweepEvery = 256, kIdleClock = 4096;
}  // namespace

int FusedPlan::bind_outputs(std::vector<Tensor>& values, const Window& w, uint64_t shape_key,
                            const std::vector<bool>* skip) {
  int chosen = -1, empty = -1, lru = -1;
  for (size_t s = 0; s < sets_.size(); ++s) {
    BindingSet& set = sets_[s];
    if (set.bufs.empty()) {
      if (empty < 0) empty = static_cast<int>(s);
      continue;
    }
    if (!set.free()) continue;
    if (chosen < 0 && set.shape_key == shape_key && set.stream == w.stream_id) {
      chosen = static_cast<int>(s);
    } else if (lru < 0 || set.last_run < sets_[lru].last_run) {
      lru = static_cast<int>(s);
    }
  }
  if (chosen < 0) {
    if (empty < 0 && sets_.size() < kMaxSets) {
      empty = static_cast<int>(sets_.size());
      sets_.emplace_back();
    }
    // Full: the least recently used free set changes shapes, unless it is still in rotation
    // (bound within the last kMaxSets runs): a steady loop that needs more sets than the cap
    // would otherwise trade sets, and their graphs, at every run; it takes one-off storage.
    if (empty < 0 && lru >= 0 && runs_ - sets_[lru].last_run >= kMaxSets) {
      evict_set(static_cast<size_t>(lru));
      empty = lru;
    }
    if (empty < 0) return -1;  // every set still held: the caller allocates
    BindingSet& set = sets_[empty];
    set.shape_key = shape_key;
    set.stream = w.stream_id;
    set.bufs.resize(values.size());
    const auto wanted = [&](size_t v) { return needs_buffer(values, w, v) && !(skip && (*skip)[v]); };
    for (const std::vector<int>& run : output_runs_) {
      if (!std::all_of(run.begin(), run.end(), [&](int v) { return wanted(static_cast<size_t>(v)); }))
        continue;
      const TensorImpl& t = *values[run[0]].impl();
      auto bufs = allocate_storage_run(t.device, t.nbytes(), static_cast<int>(run.size()), w.stream_handle);
      for (size_t i = 0; i < run.size(); ++i) set.bufs[run[i]] = std::move(bufs[i]);
    }
    for (size_t v = 0; v < values.size(); ++v) {
      const TensorImpl& t = *values[v].impl();
      // A split GEMM's value holds its f32 partial products (plan.hpp, PlannedSegment::partials).
      const int parts = v < planned_.partials.size() ? planned_.partials[v] : 0;
      const size_t bytes = parts > 1 ? PlannedSegment::partials_bytes(t.shape, parts) : append::storage_bytes(t);
      if (!set.bufs[v] && wanted(v)) set.bufs[v] = allocate_storage(t.device, bytes, w.stream_handle);
    }
    chosen = empty;
  }
  mark_used(static_cast<size_t>(chosen));
  // A free set is held by no tensor of the program's: an address it took with data_ptr() from an
  // earlier output is as dead as any freed tensor's, so the buffers are the plan's alone again
  // (else every later window reading them would copy them: runtime/src/reachable.cpp).
  for (const std::shared_ptr<Storage>& b : sets_[chosen].bufs)
    if (b) b->exposed.store(false, std::memory_order_relaxed);
  use_set(values, chosen);
  return chosen;
}

void FusedPlan::release_idle_sets(uint64_t now) {
  std::unique_lock<std::mutex> lock(run_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  // A plan that no longer serves (retired, rejected, failed) never binds a set again: all of
  // its free sets go now, not after kIdleClock (under churn, the plans the monitor replaced
  // would otherwise hold their sets for thousands of runs).
  const PlanState st = state.load(std::memory_order_relaxed);
  const bool serving = st == PlanState::active || st == PlanState::sampling;
  for (size_t s = 0; s < sets_.size(); ++s)
    if (!sets_[s].bufs.empty() && sets_[s].free() &&
        (!serving || now - sets_[s].last_clock > kIdleClock))
      evict_set(s);
}

void FusedPlan::sweep_other_plans(uint64_t now) {
  const auto snap = PlanTable::get().snapshot();
  if (!snap) return;
  for (const auto& p : snap->plans)
    if (p.get() != this)
      if (auto* f = dynamic_cast<FusedPlan*>(p.get())) f->release_idle_sets(now);
}

void FusedPlan::free_idle_sets() {
  for (size_t s = 0; s < sets_.size(); ++s)
    if (sets_[s].free() && runs_ - sets_[s].last_run > kIdleRuns) evict_set(s);
}

void FusedPlan::evict_set(size_t s) {
  ++set_evictions_;
  sets_[s].bufs.clear();
#if LIVEFUSE_HAS_CUDA
  // The graphs bake in the set's addresses, which the pool may hand to someone else now.
  if (graphs_) graphs_->drop_owned(static_cast<uint32_t>(s));
  for (auto it = early_.begin(); it != early_.end();) {
    std::erase_if(it->second, [&](const EarlyLaunch& e) { return e.set == static_cast<int>(s); });
    it = it->second.empty() ? early_.erase(it) : std::next(it);
  }
#endif
}

void FusedPlan::use_set(std::vector<Tensor>& values, int set) const {
  for (size_t v = 0; v < values.size(); ++v)
    if (sets_[set].bufs[v]) values[v].impl()->storage = sets_[set].bufs[v];
}

void FusedPlan::mark_used(size_t s) {
  sets_[s].last_run = runs_;
  sets_[s].last_clock = g_run_clock.load(std::memory_order_relaxed);
}

void FusedPlan::tick_sets() {
  // Every few runs, not per run: a replay costs about a microsecond of host time.
  if (runs_ % 32 == 0) free_idle_sets();
  if (const uint64_t now = g_run_clock.fetch_add(1, std::memory_order_relaxed) + 1; now % kSweepEvery == 0)
    sweep_other_plans(now);
}

}  // namespace livefuse::planner
