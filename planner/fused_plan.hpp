#pragma once
// FusedPlan: a PlannedSegment as the runtime's matcher runs it (runtime/plan.hpp).
// CPU: the steps run in order (fused groups through the tiled interpreter).
// CUDA: the steps are captured once per binding as a CUDA graph and replayed (graphs/);
// with LIVEFUSE_GRAPHS=0, or when bindings never repeat, they are launched directly.
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "planner/plan.hpp"
#include "runtime/plan.hpp"

#if LIVEFUSE_HAS_CUDA
#include "graphs/cuda_graph.hpp"
#endif

namespace livefuse::planner {

namespace detail {
// One value into a 64-bit key (graph and binding-set keys of fused_plan*.cpp).
inline uint64_t mix_key(uint64_t h, uint64_t v) {
  v *= 0x9e3779b97f4a7c15ull;
  v ^= v >> 29;
  return (h ^ v) * 0xbf58476d1ce4e5b9ull;
}
}  // namespace detail

class FusedPlan final : public Plan {
 public:
  FusedPlan(PlannedSegment planned, DeviceKind kind);
  bool run(Window& w, const std::vector<std::pair<int, int>>& values_needed) override;
  bool writes(int op, int out) const override;
  EarlyLaunch launch_early(const std::vector<Tensor>& externals, const Window& w) override;
  void cancel_early(const EarlyLaunch& e) override;
  std::string describe() const override;
  void details(PlanDetails& d) const override;

  const PlannedSegment& planned() const { return planned_; }
  uint64_t graph_hits() const { return graph_hits_; }
  uint64_t graph_misses() const { return graph_misses_; }
  bool uses_graphs() const { return use_graphs_; }
  // Graph cache figures of this plan: hits, misses, instantiations, updates, evictions.
  // replays, captures, instantiations, updates, evictions, captures deferred (capture_budget.hpp)
  void graph_counters(uint64_t out[6]) const;

 private:
  bool run_cuda(std::vector<Tensor>& values, Window& w);
  // Shape family (runtime/plan.hpp): the n of each run, for inspection.
  void note_family_n(const std::vector<Tensor>& values);
  // CUDA, a plan with a shape family (fused_plan_family.cpp): the steps that touch no varying
  // value replay as graphs, one per stretch of such steps, over a binding set keyed by the fixed
  // values alone; the steps that do (a KV cache's concat, the attention over it) launch
  // directly, into fresh storage. A decode step then replays the same graphs at every length.
  bool run_cuda_family(std::vector<Tensor>& values, Window& w);
  // The stretches below, from the segment's varying dims (made at construction: the family
  // itself is set later, when the plan is published).
  void plan_family_segments();
  // A graph key seen for the first time (or one that may not be captured here) runs directly:
  // seen_once_ remembers it, so the second sight captures.
  bool runs_directly(uint64_t key, bool may_capture);
  // The graph of `key`, captured from `enqueue` on a miss, launched on `stream`; true on a hit
  // (counted in graph_hits_ / graph_misses_; on a hit the skipped steps' views are bound).
  bool replay(uint64_t key, int set, void* stream, const std::function<void()>& enqueue,
              const std::vector<Tensor>& values, const Window& w, size_t* nodes);
  std::vector<bool> varying_value_;  // per value id: a dim of it varies within the family
  struct FixedStretch {
    size_t begin = 0, end = 0;  // steps [begin, end), none of them varying
    bool varying = false;       // true: steps that launch directly
  };
  std::vector<FixedStretch> stretches_;
  // follows: a kernel of the run comes before the stretch in the graph its launches are bound for
  // (StepsRun).
  void launch_stretch(const FixedStretch& f, std::span<const Tensor> values, void* stream, bool follows = false);
  uint64_t family_replays_ = 0, family_direct_ = 0;  // stretches replayed / launched directly
  // The whole run as one graph whose varying steps' kernel nodes take each run's parameters
  // (fused_plan_family.cpp). False: nothing was launched, the stretches run one by one.
  bool run_family_patched(std::vector<Tensor>& values, Window& w, uint64_t base, int set,
                          void* stream, bool* cold);
  bool patchable_ = true;     // cleared once a run's varying steps were not a kernel chain
  std::string patch_off_;     // why it was cleared
  uint64_t patched_replays_ = 0, patched_captures_ = 0;
  // The varying steps' parameters without a capture (kernels/cuda/launch_record.hpp): only when
  // every varying step reaches instrumented launch sites alone (concats, views, attention); a
  // recorded shape patches once it was seen to match a captured chain's (recorded shape ->
  // chain shape, bounded).
  bool varying_recordable_ = false;
  std::unordered_map<uint64_t, uint64_t> recorded_shapes_;
  uint64_t recorded_replays_ = 0;
  std::string describe_family() const;
  int64_t n_last_ = -1, n_seen_lo_ = -1, n_seen_hi_ = -1;
  // LIVEFUSE_PROFILE: the steps one by one between events; adds each step's GPU time.
  void run_profiled(std::span<const Tensor> values, void* stream);
  // LIVEFUSE_PROFILE on the CPU: each step's host time (the steps run on this thread's TBB).
  void run_profiled_cpu(std::span<const Tensor> values);
  // Plan-owned buffers for every value the plan writes, for one tuple of shapes. The user's
  // tensors share them (zero copy); a set is reused only once every tensor sharing it is gone
  // (no overwritten outputs), so in a loop the same few sets rotate and the graphs captured
  // with their addresses replay instead of being captured again.
  // A set belongs to one stream: every write to its buffers (replays, early launches, even
  // dropped ones) is then ordered on that stream, and reuse never races a pending write.
  //
  // Bounded (DESIGN, "Bounded everything"): at most kMaxSets per plan. When all are made, a new
  // tuple of shapes takes over the least recently used free one not bound in the last kMaxSets
  // runs, and a free set unused for kIdleRuns runs is freed: under shape churn the sets, and the
  // graphs written into them, follow the shapes in use instead of keeping the first ones seen. A
  // set is freed only while free(), so no value handed to the program loses its memory. An empty
  // slot keeps its index (early launches and graphs name sets by index).
  struct BindingSet {
    uint64_t shape_key = 0;
    uint32_t stream = 0;
    bool reserved = false;  // an early launch writes it; completion hands it out
    uint64_t last_run = 0;  // runs_ when it was last bound
    uint64_t last_clock = 0;  // the CUDA plans' run clock then (release_idle_sets)
    // Per value id; null where not written. Empty: a freed slot.
    std::vector<std::shared_ptr<Storage>> bufs;
    bool free() const;      // reusable: no tensor outside the set holds a buffer
  };
  static constexpr size_t kMaxSets = 12;
  static constexpr uint64_t kIdleRuns = 256;
  // `skip`: values left out of the set (a family plan's varying values), or null.
  int bind_outputs(std::vector<Tensor>& values, const Window& w, uint64_t shape_key,
                   const std::vector<bool>* skip = nullptr);
  void free_idle_sets();
  // A CUDA run's upkeep of the sets: this plan's idle ones every few runs, other plans' on the
  // shared run clock (fused_plan_sets.cpp).
  void tick_sets();
  void mark_used(size_t s);  // set `s` served this run (the idle clocks start again)
  // Frees the free sets no run of any CUDA plan has used for a long while: a plan that stopped
  // running (its shapes went away, another plan serves them) never reaches free_idle_sets.
  // Called by other plans' runs now and then; skips a plan that is running (try_lock).
  void release_idle_sets(uint64_t now);
  void sweep_other_plans(uint64_t now);
  // Frees set `s`'s buffers, its graphs and the early launches into it.
  void evict_set(size_t s);
  void use_set(std::vector<Tensor>& values, int set) const;
  void bind_written_views(const std::vector<Tensor>& values, const Window& w) const;
  // Early launches (Plan::launch_early), by a key of the externals' binding and the stream:
  // the set and graph a completed replay of that binding used, and its shapes.
  static uint64_t externals_key(const std::vector<Tensor>& externals, uint32_t stream);
  // CPU: packs admitted + sibling weights concatenated so far (a run that moved it was cold).
  uint64_t cache_fills() const;
  static constexpr uint64_t kColdRunsAtMost = 64;
  std::unordered_map<uint64_t, std::vector<EarlyLaunch>> early_;
  bool early_ok_ = false;  // every step's only effect is its outputs (no opaque kernels)
  bool needs_buffer(const std::vector<Tensor>& values, const Window& w, size_t v) const;
  // Storage for value v that needs_buffer: fresh, or the block of the cache a concat grows.
  void give_storage(std::vector<Tensor>& values, const Window& w, size_t v, void* stream) const;
  PlannedSegment planned_;
  // CUDA: value ids whose buffers a set allocates back to back, one list per merged GEMM that
  // writes its siblings' outputs in place (plan_siblings.hpp, sibling_output_runs).
  std::vector<std::vector<int>> output_runs_;
  std::vector<BindingSet> sets_;
  uint64_t set_evictions_ = 0;              // sets freed (idle) or taken over by other shapes
  std::unordered_set<uint64_t> seen_once_;  // graph keys run directly once (bounded)
  uint64_t captures_deferred_ = 0;          // second sights run directly: no capture budget
  struct ShapeGraphs {
    std::string shapes;  // the externals' concrete shapes
    uint64_t replays = 0;
    size_t nodes = 0;
  };
  std::unordered_map<uint64_t, ShapeGraphs> graphs_by_shape_;  // by shape key (bounded)
  std::vector<bool> written_;  // per value id
  bool use_graphs_ = true;
  std::string graphs_off_;  // why a capture turned them off (empty: on, or off by config / probation)
  uint64_t graph_hits_ = 0, graph_misses_ = 0, runs_ = 0, unbound_runs_ = 0;
  uint64_t window_hits_ = 0, window_misses_ = 0;  // at the start of the probation window
  std::vector<double> step_us_;                   // LIVEFUSE_PROFILE: time per step (GPU; CPU: host), summed
  uint64_t profiled_runs_ = 0;                    // ... over this many runs (the first, cold, not counted)
  std::vector<void*> step_events_;                // cudaEvent_t, steps + 1, made once
  std::vector<Tensor> values_;                    // run()'s binding of the window, empty between runs
  // A run's outputs that had no storage when it began, as they were (run(): a run that stops
  // part-way puts them back before the window runs eagerly). Kept between runs: no allocation
  // per run.
  struct Unbound {
    size_t value;
    int64_t offset;
    Strides strides;
    void* pending;
  };
  std::vector<Unbound> unbound_at_entry_;
  void restore_unbound(std::vector<Tensor>& values) const;
  // A plan may be completed by two threads at once, and inspected by the report thread while
  // a run compiles a missing kernel variant into a step.
  mutable std::mutex run_mu_;
#if LIVEFUSE_HAS_CUDA
  std::unique_ptr<graphs::GraphCache> graphs_;
#endif
};

}  // namespace livefuse::planner
