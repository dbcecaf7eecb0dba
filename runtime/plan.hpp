#pragma once
// A Plan as the hot path sees it: the op sequence it replaces (a structural pattern) and a way
// to run a completed window of deferred calls. What runs inside (fused kernels, GEMMs, a CUDA
// graph, the CPU interpreter) belongs to planner/ and graphs/; the matcher only matches and binds.
//
// [ Note -- what a PlanOp matches ]
//   op id, Attrs::hash() (which includes custom/opaque ids and scalars), the dtypes and ranks
//   of the inputs, and the wiring: each input is either "output k of op j of this window"
//   (must be that very pending value) or "external slot e" (any value that is not one of this
//   window's outputs; the same slot used twice must be the same value). Concrete shapes are
//   not part of the match: a plan accepts every shape its kernels support (can_run decides).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/op_call.hpp"

namespace livefuse {

struct PlanDetails;  // livefuse/inspect.hpp

struct PlanInput {
  int op = -1;  // >= 0: output `out` of window op `op`
  int out = 0;
  int slot = -1;  // >= 0: external slot
  bool internal() const { return op >= 0; }
};

struct PlanOp {
  OpId op = OpId::kCount;
  uint64_t attrs_hash = 0;
  boost::container::small_vector<DType, 4> in_dtypes;
  boost::container::small_vector<int8_t, 4> in_ranks;
  boost::container::small_vector<PlanInput, 4> inputs;
};

// Whether `longer` begins with every op of `shorter` (same op, attributes, dtypes, ranks and
// wiring) and has more: the matcher completes the shortest plan a window matches, so while
// `shorter` serves, `longer` never gets a window.
bool starts_with_ops(const std::vector<PlanOp>& longer, const std::vector<PlanOp>& shorter);

// A plan's graph launched at the first call of its window (Plan::launch_early): which of the
// plan's binding sets it writes and which graph it replayed, with the key of the shapes that
// graph was made for (checked again at completion). set < 0: nothing launched.
struct EarlyLaunch {
  int set = -1;
  uint64_t graph = 0, shapes = 0;
  bool launched() const { return set >= 0; }
};

// The deferred calls of one stream that (so far) follow a plan.
struct Window {
  std::vector<OpCall> calls;        // inputs are the real values (pending ones included)
  std::vector<TensorList> outputs;  // pending values handed to the user
  std::vector<Tensor> externals;    // by slot
  uint32_t stream_id = 0;
  void* stream_handle = nullptr;  // stream_id's cudaStream_t (no registry lookup per run)
  Device device;
  // The outputs' ids come from one block reserved when the window opens, in order, so output f
  // (ops in order, outputs in order) is ids_begin + f: the monitor can then hear of a served
  // window in one event (runtime/trace_sink.hpp). ids_begin is 0 once the block ran out.
  static constexpr uint64_t kIdBlock = 256;
  ValueId ids_begin = 0, ids_next = 0, ids_end = 0;
  // Bit f: output f was still referenced from outside the window when it completed (windows of
  // up to 64 outputs; set by the matcher before the sink hears of the window).
  uint64_t held = 0;
  // Set when the plan was launched at the window's first call; run() then only hands the
  // launched work's buffers to the outputs.
  EarlyLaunch early;
  // Set by Plan::run when this run paid a one-time cost (a graph capture, or the direct run of
  // a binding seen for the first time): live sampling ignores such runs, since steady state is
  // what decides whether the plan is faster. In the window, not the plan: threads that replay
  // one plan at once each have their own.
  bool cold_run = false;
};

// A concrete shape tuple as the monitor lays it out (monitor/candidate.hpp, ShapePattern: the
// external slots' dims, then every op's outputs' dims), one add() per dim. Taken per served
// window, so one multiply per dim; a collision only means a new shape goes unreported.
struct ShapeTupleKey {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(int64_t d) { h = (h ^ static_cast<uint64_t>(d)) * 0x100000001b3ull; }
  static uint64_t of(std::span<const int64_t> dims) {
    ShapeTupleKey k;
    for (int64_t d : dims) k.add(d);
    return k.h;
  }
};

// [ Note -- shape families: extents as parameters ]
// A decode loop runs the same structure at a new length every step: its shape tuples differ
// only in entries that move together with one integer n (the KV length). A family describes
// all of them at once: entry e of a tuple is base[e] + slope[e] * n, where n is the value of
// entry `param` (the first entry that varies, so slope[param] = 1 and base[param] = 0). The
// monitor fits one from the tuples it sees (monitor/structure_table.cpp); a plan carries it,
// so a window of any length of the family counts as a known shape -- one plan, planned once,
// serves every length -- and the monitor can rebuild the tuple of a served window from n.
struct ShapeFamily {
  int param = -1;                    // -1: no family
  std::vector<int64_t> base, slope;  // per tuple entry; slope 0: a fixed entry
  int64_t n_min = 0, n_max = 0;      // the values of n seen so far (inspection)
  void saw(int64_t n) {
    n_min = std::min(n_min, n);
    n_max = std::max(n_max, n);
  }

  bool defined() const { return param >= 0; }
  size_t size() const { return base.size(); }
  // n when `dims` (a whole tuple) belongs to the family, else nullopt.
  std::optional<int64_t> member(std::span<const int64_t> dims) const {
    if (!defined() || dims.size() != base.size()) return std::nullopt;
    const int64_t n = dims[static_cast<size_t>(param)];
    for (size_t e = 0; e < dims.size(); ++e)
      if (dims[e] != base[e] + slope[e] * n) return std::nullopt;
    return n;
  }
  void tuple(int64_t n, std::vector<int64_t>& out) const {
    out.resize(base.size());
    for (size_t e = 0; e < base.size(); ++e) out[e] = base[e] + slope[e] * n;
  }
  bool operator==(const ShapeFamily& o) const {
    return param == o.param && base == o.base && slope == o.slope;
  }
};

enum class PlanState : uint8_t { sampling, active, rejected, retired, failed };
std::string_view plan_state_name(PlanState s);

class Plan {
 public:
  virtual ~Plan() = default;

  // Executes a complete window: every value in `values_needed` (window outputs the user can
  // still observe) must have storage afterwards, with eager-equal contents. Returns false when
  // this window cannot be served (the matcher then runs it eagerly; nothing is lost).
  virtual bool run(Window& w, const std::vector<std::pair<int, int>>& values_needed) = 0;
  // Which window outputs the plan writes; others are intermediates kept in registers/tiles.
  virtual bool writes(int op, int out) const = 0;
  // Early launch. When the window's first call has bound every external slot, the inputs of
  // the whole window are known, and a plan that has replayed this very binding before can
  // launch its work at once: the GPU then runs it while the program issues the window's other
  // calls, instead of after them. The work writes only plan-owned buffers (a binding set that
  // stays reserved), so nothing the program can observe changes until completion hands them
  // out (run() with w.early set); a window that diverges instead is flushed eagerly as always
  // and cancel_early() frees the set (later users of it are ordered after the launched work
  // on the same stream). Only plans whose steps have no effect beyond their outputs take part
  // (no opaque user kernels). Returns what was launched; !launched(): nothing was.
  virtual EarlyLaunch launch_early(const std::vector<Tensor>& externals, const Window& w) {
    (void)externals;
    (void)w;
    return {};
  }
  virtual void cancel_early(const EarlyLaunch&) {}
  // Whether the first op's inputs bind every external slot: a window's inputs are then all
  // known at its first call, the condition of an early launch.
  bool first_op_binds_externals() const {
    if (ops.empty() || n_external > 64) return false;
    uint64_t bound = 0;
    for (const PlanInput& in : ops[0].inputs)
      if (!in.internal()) bound |= uint64_t{1} << in.slot;
    return bound == (n_external == 64 ? ~uint64_t{0} : (uint64_t{1} << n_external) - 1);
  }
  virtual std::string describe() const { return name; }
  // For inspect(): kernels (generated source, compile times), fusion groups, graphs per
  // shape, shape pattern. Called off the hot path, concurrently with run().
  virtual void details(PlanDetails&) const {}

  uint64_t id = 0;
  std::string name;
  DeviceKind device_kind = DeviceKind::cpu;
  std::vector<PlanOp> ops;
  int n_external = 0;
  uint64_t signature = 0;
  // What the monitor needs to count a served window without its calls (runtime/trace_sink.hpp):
  // the stream whose sequence the plan was made from, and the keys (ShapeTupleKey) of the shape
  // tuples seen by then. A window of any other tuple is reported call by call a few times, so
  // that the monitor learns the new shape.
  uint32_t stream = 0;
  uint64_t occurrences = 0;  // of its sequence, counted by the monitor when it was planned
  std::vector<uint64_t> shape_tuples;
  ShapeFamily family;  // tuples of every length of one family are known too (the note above)

  std::atomic<PlanState> state{PlanState::sampling};
  std::atomic<uint64_t> hits{0}, eager_fallbacks{0};
  std::atomic<int> verified_runs{0};  // LIVEFUSE_VERIFY: replays checked against eager so far
  // Completions to wait before the next early launch: set after a launch that a divergent
  // window wasted, so a plan whose windows often diverge stops launching early.
  std::atomic<int> early_cooldown{0};
  // Live sampling: alternate plan and eager on the first completions, keep the faster.
  std::mutex sample_mu;
  std::vector<double> sampled_plan_us, sampled_eager_us;
  // The stratum of each sample (matcher_window.hpp, "samples by stratum"), index for index.
  std::vector<uint64_t> sampled_plan_strata, sampled_eager_strata;
  // Plan runs minus eager runs chosen so far, per stratum of windows (sample_choice). Counted
  // at the choice, not read from the samples: a CUDA sample is recorded only once its events
  // are read, windows later, and the next windows of its stratum must already take the turn.
  struct SampleStratum {
    uint64_t key = 0;
    int balance = 0;
  };
  std::vector<SampleStratum> sample_strata;
  int sample_rounds = 0;  // verdicts reached so far (a rejection is sampled once more)
  int sample_retries = 0;  // times a rejection was sampled again later (retry_rejected)
  // Rejected: windows its first op opens before it is sampled again; 0: no retry left.
  std::atomic<int> retry_countdown{0};
  // Steady-clock ns of the first window that found livefuse's threads busy and put its sample
  // off (runtime/background.hpp); 0: none yet.
  std::atomic<int64_t> sample_put_off_since{0};
  // Sampled runs through the plan left untimed because they were cold (kColdUntimedAtMost).
  std::atomic<int> cold_untimed{0};
  std::string last_reason;
};

// The samples a verdict compares: per stratum, the first of each side, as many as the other side
// has of that stratum (matcher_window.hpp, "samples by stratum"). Under p.sample_mu.
void matched_samples(const Plan& p, std::vector<double>& plan_us, std::vector<double>& eager_us);

// Read-mostly table of installed plans. Publishing swaps an immutable snapshot; the hot path
// reads a version counter (one relaxed load) and refreshes its thread-local copy only when it
// changed, so no lock is taken per op.
class PlanTable {
 public:
  struct Snapshot {
    std::vector<std::shared_ptr<Plan>> plans;
  };
  static PlanTable& get();
  void publish(std::shared_ptr<Plan> p);  // adds; evicts the oldest inactive beyond the cap
  void retire(uint64_t plan_id, const std::string& reason);
  // A plan retired because its sequence went cold, active again when the sequence is hot again
  // with the same shapes (a prefill between generations): no re-plan, no compile, no new id.
  // `to`: sampling for a plan set aside before its verdict (planner/plan_returns.hpp). False
  // when the table has evicted it meanwhile, or it is not retired.
  bool revive(uint64_t plan_id, const std::string& reason, PlanState to = PlanState::active);
  // The plan of that id, or null when the table holds none (never had it, or evicted it).
  std::shared_ptr<Plan> find(uint64_t plan_id) const;
  std::shared_ptr<const Snapshot> snapshot() const;
  // The plans now, by value: what a range-for iterates. `for (p : snapshot()->plans)` dangles --
  // the temporary snapshot dies before the loop's first step (C++20 extends the life of the
  // range expression's result only, not of temporaries inside it), and a publish on the planner
  // thread then frees the vector being walked (TSan: users-threads-and-exits).
  std::vector<std::shared_ptr<Plan>> plans() const { return snapshot()->plans; }
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  void clear_for_testing();
  static constexpr size_t kMaxPlans = 256;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const Snapshot> snap_ = std::make_shared<Snapshot>();
  std::atomic<uint64_t> version_{0};
};

// Counters the matcher keeps (inspect() reports them).
struct MatcherCounters {
  std::atomic<uint64_t> calls{0}, deferred{0}, served{0}, completions{0}, flush_divergent{0},
      flush_sync{0}, flush_escaped{0}, flush_error{0}, plan_declined{0}, shadow_would_serve{0},
      verify_mismatches{0}, early_launches{0}, early_wasted{0},
      // Inputs of deferred calls the program could rewrite, copied at the call (matcher.cpp).
      snapshots{0}, snapshot_bytes{0},
      // Completions of sampling plans that gave no sample (matcher_checks.cpp): put off while
      // livefuse's threads worked, cold and so untimed, without a free CUDA event pair, or
      // timed but unreadable (an event query failed). A plan still sampling after many hits
      // says which here.
      samples_put_off{0}, samples_cold{0}, samples_no_slot{0}, samples_lost{0},
      // In-place writes held to share a launch, and the launches that took them
      // (runtime/write_batch.hpp).
      writes_held{0}, write_launches{0},
      // Concats whose result took the block of the cache they grow, copying only the new rows
      // (runtime/append.hpp).
      appends_in_place{0},
      // Deferred calls shaped from the window's memory of their position / inferred afresh
      // (runtime/infer_memo.hpp), added up once a window.
      infer_memo_hits{0}, infer_memo_misses{0};
};
MatcherCounters& matcher_counters();

}  // namespace livefuse
