#pragma once
// inspect(): what the runtime decided and why, while the program runs.
//
// A Snapshot is a plain value (copyable, comparable) built on demand: the configuration in
// force with where each value came from, counters of every component, every plan with its
// state, ops, timings and history, and a bounded log of recent Decisions. It serialises to a
// versioned JSON document (the "report"; schema in tools/inspect/SCHEMA.md) that
// LIVEFUSE_REPORT writes periodically and that `livefuse-inspect` reads.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace livefuse {

// Bumped when a field is removed, renamed or changes meaning. Adding a field does not bump
// it: readers ignore fields they do not know.
inline constexpr int kReportSchemaVersion = 1;

struct ConfigEntry {
  std::string name;    // the variable, e.g. "LIVEFUSE_HOT"
  std::string value;   // the value in force, as text
  std::string source;  // "default" | "env" | "env (invalid, default used)"
  bool operator==(const ConfigEntry&) const = default;
};

struct CounterGroup {
  std::string name;  // "matcher", "memory.cpu", "monitor", "kernel_cache", ...
  std::vector<std::pair<std::string, uint64_t>> values;  // in the order the component gives
  bool operator==(const CounterGroup&) const = default;
};

// One op of a plan's sequence. Inputs are "%j.k" (output k of op j of the window) or "$e"
// (external slot e).
struct PlanOpInfo {
  std::string op;
  std::vector<std::string> inputs;
  std::vector<std::string> dtypes;  // per input
  std::vector<int> ranks;           // per input
  std::string attrs_hash;           // hex
  bool operator==(const PlanOpInfo&) const = default;
};

struct FusionGroupInfo {
  std::string name;      // "g0"
  std::string kind;      // "vertical", "horizontal", "gemm_epilogue", "template", "unfused", ...
  std::vector<int> ops;  // indices into the plan's ops
  std::string kernel;    // name of the kernel that runs it ("" when none: eager step)
  std::optional<double> gpu_us;  // mean GPU time per replay (LIVEFUSE_PROFILE=1 only)
  bool operator==(const FusionGroupInfo&) const = default;
};

struct KernelInfo {
  std::string name;
  std::string source;  // generated CUDA source (or the CPU interpreter's program text)
  std::optional<double> compile_ms;
  std::string cache;  // "miss" (compiled), "memory", "disk", "" (unknown)
  std::string log;    // compiler log, when not empty
  // Row kernels with two bodies: per launch shape, the body it runs and the timings that chose
  // it, e.g. "rows < 2^17, 32x8 threads: pipelined, timed 77.5 us against plain 87.9 us".
  std::vector<std::string> bodies;
  bool operator==(const KernelInfo&) const = default;
};

struct GraphInfo {
  std::string shape;  // concrete shapes of the external inputs, e.g. "[2,64,256] [256]"
  uint64_t replays = 0;
  int nodes = 0;
  bool operator==(const GraphInfo&) const = default;
};

// What a Plan can say about itself beyond the matcher's view (Plan::details fills it).
struct PlanDetails {
  std::string shape_pattern;  // e.g. "[B,S,256] [256] [256]"
  std::vector<FusionGroupInfo> groups;
  std::vector<KernelInfo> kernels;
  std::vector<GraphInfo> graphs;     // graphs per shape
  std::optional<double> compile_ms;  // whole plan, wall time
  // The planner's choices for this plan and why ("fuse #2..#5 into one pointwise kernel",
  // "saves 3 launches"), in the order made.
  std::vector<std::pair<std::string, std::string>> decisions;
  std::vector<std::pair<std::string, std::string>> notes;  // anything else worth showing
  bool operator==(const PlanDetails&) const = default;
};

struct Transition {
  double t_ms = 0;  // since process start (same clock as Decision::t_ms and the trace)
  std::string state;
  std::string reason;
  // true: the runtime saw the state change when building a snapshot, not when it happened
  // (the component did not report it); t_ms is then the time it was first seen.
  bool observed = false;
  bool operator==(const Transition&) const = default;
};

// The states a plan goes through. candidate / compiling come from the planner (plans not yet
// in the PlanTable); the rest are runtime::PlanState.
inline constexpr std::string_view kPlanStates[] = {"candidate", "compiling", "sampling", "active",
                                                   "rejected",  "retired",   "failed"};
bool is_valid_plan_state(std::string_view s);

struct PlanInfo {
  uint64_t id = 0;
  std::string name;
  std::string state;
  std::string device;       // "cpu" | "cuda"
  std::string origin;       // "plan_table" or the name of the component that listed it
  std::string signature;    // hex
  std::string description;  // Plan::describe()
  int n_external = 0;
  std::vector<PlanOpInfo> ops;
  uint64_t hits = 0, eager_fallbacks = 0;
  std::vector<double> sampled_fused_us, sampled_eager_us;
  std::optional<double> fused_us, eager_us, speedup;  // medians; speedup = eager / fused
  std::string last_reason;
  std::vector<Transition> history;  // oldest first, bounded
  uint64_t history_dropped = 0;
  PlanDetails details;
  bool operator==(const PlanInfo&) const = default;
};

struct Decision {
  double t_ms = 0;        // since process start
  std::string component;  // "monitor", "planner", "jit", "matcher", ...
  std::string subject;    // "plan 3", "segment 0x1f2e", "kernel k_ln_gelu_f32"
  std::string what;       // "hot", "compiled", "active", "rejected", ...
  std::string reason;
  bool operator==(const Decision&) const = default;
};

struct Snapshot {
  int schema_version = kReportSchemaVersion;
  std::string livefuse_version;
  std::string program;  // the process name
  int64_t pid = 0;
  int64_t time_unix_ms = 0;  // wall clock when the snapshot was taken
  double uptime_ms = 0;      // since process start, the clock of every t_ms
  bool final = false;        // the last report, written at exit
  std::string mode;          // "off" | "trace" | "shadow" | "on"
  std::vector<ConfigEntry> config;
  std::vector<CounterGroup> counters;
  std::vector<PlanInfo> plans;
  std::vector<Decision> decisions;  // oldest first
  uint64_t decisions_dropped = 0;   // recorded but no longer in the bounded log
  bool operator==(const Snapshot&) const = default;

  const PlanInfo* find_plan(uint64_t id) const;
  // nullopt when the group or the counter is absent.
  std::optional<uint64_t> counter(std::string_view group, std::string_view name) const;
};

// Builds a snapshot now. Thread-safe; takes locks off the hot path only (the PlanTable's,
// each plan's sample lock, the registry's) and never blocks op calls for long.
Snapshot inspect();

// The counter groups alone, as in inspect() but for "plans" and "inspect" (which summarise the
// plans and the decisions): a few microseconds, where inspect() describes every plan -- for a
// program that polls, e.g. how many calls plans served so far ("matcher", "served").
std::vector<CounterGroup> counters();
// One counter of `groups` (counters() or a snapshot's); nullopt when the group or the counter
// is absent.
std::optional<uint64_t> find_counter(const std::vector<CounterGroup>& groups,
                                     std::string_view group, std::string_view name);

// The report: JSON text (indent < 0: one line) and back. snapshot_from_json throws
// livefuse::Error naming what is wrong: not JSON (e.g. a partial file), a newer schema
// version, a missing or mistyped field.
std::string snapshot_to_json(const Snapshot& s, int indent = 2);
Snapshot snapshot_from_json(std::string_view text);

// Writes inspect() as a report to `path` atomically (a temp file in the same folder, then
// rename), so a reader never sees a partial file. Throws livefuse::Error when it cannot.
void write_report(const std::string& path, bool final = false);

// LIVEFUSE_REPORT / LIVEFUSE_TRACE: the report thread and the timeline. Idempotent; after the
// first call it costs one relaxed atomic load, so the executor calls it on every op. Stops
// (final report, trace written) at process exit, or on stop_background_services().
void start_background_services();
void stop_background_services();

// Writes the timeline collected so far to `path` (Chrome trace JSON, loads in Perfetto and
// chrome://tracing). Returns the number of events written. Throws livefuse::Error on failure.
size_t write_trace(const std::string& path);

}  // namespace livefuse
