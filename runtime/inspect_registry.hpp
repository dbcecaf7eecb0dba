#pragma once
// What components report to inspection (livefuse/inspect.hpp), without runtime/ depending on
// them: counter and plan providers, Decisions, plan state transitions, and the timeline.
//
// Everything here is off the hot path except the timeline, whose disabled cost is one relaxed
// atomic load per call site. All functions are thread-safe.
//
// Lifetime rule for providers: a provider is called from the report thread, also during
// process exit (the final report). A component whose provider captures an object that can be
// destroyed must unregister it first (unregister_* waits for a running call to finish).
// Providers run outside the registry's locks, so a provider may take its component's lock and a
// component may register while holding it; only unregistering while holding a lock that the
// provider takes would wait for ever.
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "livefuse/inspect.hpp"

namespace livefuse {

class Plan;
enum class PlanState : uint8_t;

// ---- counters ----------------------------------------------------------------------------
class CounterSink {
 public:
  virtual ~CounterSink() = default;
  virtual void add(std::string_view name, uint64_t value) = 0;
};
using CounterSource = std::function<void(CounterSink&)>;
// `group` names the component ("monitor", "kernel_cache"); registering a name again replaces
// the earlier provider. The snapshot lists groups in registration order, after the runtime's.
void register_counter_source(std::string group, CounterSource fn);
void unregister_counter_source(const std::string& group);

// ---- plans not (yet) in the PlanTable ------------------------------------------------------
// The planner lists its candidates / compiling plans (state "candidate" or "compiling") so
// they show before they are published. Entries must use ids that do not clash with published
// plans (the same id as a published plan: the published one wins).
using PlanSource = std::function<void(std::vector<PlanInfo>&)>;
void register_plan_source(std::string name, PlanSource fn);
void unregister_plan_source(const std::string& name);

// ---- decisions ---------------------------------------------------------------------------
// Appends to the bounded log of recent decisions (oldest dropped and counted). Takes a lock:
// call it where a decision is made (a plan compiled, rejected, a segment found hot), never
// per op.
void record_decision(std::string_view component, std::string_view subject, std::string_view what,
                     std::string_view reason);
inline constexpr size_t kDecisionLogCapacity = 512;

// ---- plan state transitions ----------------------------------------------------------------
// Sets p.state and p.last_reason, appends to the plan's bounded history (timestamped) and
// records a Decision. Takes p.sample_mu (it guards last_reason); use the _locked form when
// the caller already holds it. A change made without these still shows, as an "observed"
// transition timestamped when a snapshot first saw it.
void record_transition(Plan& p, PlanState to, std::string reason);
void record_transition_locked(Plan& p, PlanState to, std::string reason);
inline constexpr size_t kPlanHistoryCapacity = 16;

// Milliseconds since process start: the clock of Decision/Transition t_ms and the timeline.
double uptime_ms();

// ---- timeline (LIVEFUSE_TRACE) -------------------------------------------------------------
// Chrome trace events, collected in a bounded buffer (the first kTraceCapacity events are
// kept; later ones are counted as dropped) and written at exit / by write_trace().
// `cat` and `name` must be string literals or otherwise outlive the process (op_name() is);
// dynamic text goes in `detail`. Build `detail` only when trace::enabled().
namespace trace {
namespace detail {
extern std::atomic<bool> g_enabled;
}
inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }
inline constexpr size_t kTraceCapacity = size_t(1) << 18;

double now_us();  // the trace clock (same origin as uptime_ms)

// Complete event ("X") covering the scope, on the calling thread's track.
class Scope {
 public:
  Scope(std::string_view cat, std::string_view name)
      : on_(enabled()), cat_(cat), name_(name), t0_(on_ ? now_us() : 0) {}
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  explicit operator bool() const { return on_; }
  void detail(std::string d) { detail_ = std::move(d); }

 private:
  bool on_;
  std::string_view cat_, name_;
  double t0_;
  std::string detail_;
};

// A span measured elsewhere (e.g. a compile job timed on its worker thread).
void complete(std::string_view cat, std::string_view name, double ts_us, double dur_us,
              std::string detail = {});
// A point in time on the calling thread's track ("i").
void instant(std::string_view cat, std::string_view name, std::string detail = {});
// A span that may start and end in different calls, e.g. a deferred window ("b"/"e", its own
// track per `id`).
void async_begin(std::string_view cat, std::string_view name, uint64_t id, std::string detail = {});
void async_end(std::string_view cat, std::string_view name, uint64_t id, std::string detail = {});
// A counter track ("C").
void counter(std::string_view name, double value);
// Names the calling thread's track ("livefuse-monitor", "livefuse-compile-0").
void set_thread_name(std::string name);

struct Stats {
  uint64_t events = 0, dropped = 0;
};
Stats stats();
// Tests: turn collection on/off and empty the buffer (capacity 0: kTraceCapacity).
void reset_for_testing(bool enable, size_t capacity = 0);
}  // namespace trace

// ---- for inspect() itself (runtime/src/inspect*.cpp) ---------------------------------------
namespace inspect_detail {
void collect_counters(std::vector<CounterGroup>& out);  // registered providers, in order
void collect_plans(std::vector<PlanInfo>& out);         // registered plan providers
uint64_t provider_errors();
void copy_decisions(std::vector<Decision>& out, uint64_t* dropped);
// The history of plan `id`; appends an observed transition first when `state` differs from
// the last one recorded (or none was).
void plan_history(uint64_t id, std::string_view state, std::string_view last_reason,
                  std::vector<Transition>* out, uint64_t* dropped);
// Forgets histories of plans not in `live` once more than a bound are kept.
void prune_histories(const std::vector<uint64_t>& live);
}  // namespace inspect_detail

}  // namespace livefuse
