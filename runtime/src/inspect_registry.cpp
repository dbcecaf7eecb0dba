// The inspect registry (runtime/inspect_registry.hpp): providers, the decision log and plan
// histories. Everything is behind mutexes: none of it is on the hot path.
#include "runtime/inspect_registry.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include "livefuse/error.hpp"
#include "runtime/plan.hpp"

namespace livefuse {

namespace {

// The one clock of decisions, transitions and the timeline. Touched at load so that "process
// start" is when the library was loaded, not when something was first recorded.
std::chrono::steady_clock::time_point process_start() {
  static const auto t = std::chrono::steady_clock::now();
  return t;
}
[[maybe_unused]] const bool g_clock_started = (process_start(), true);

// Providers are called outside `mu`: a provider takes its component's lock, and components
// register while holding it (the planner did, in Service::start), so calling them under `mu`
// ordered the two locks both ways: a lock-order inversion that could deadlock the report thread
// against a starting component. An entry counts its running calls instead, and erase waits for
// them.
template <class Fn>
struct Providers {
  struct Entry {
    std::string name;
    Fn fn;
    int running = 0;  // calls in progress (guarded by mu)
    bool listed = true;
  };
  std::mutex mu;
  std::condition_variable idle;  // an entry's last running call returned
  std::vector<std::shared_ptr<Entry>> list;

  void set(std::string name, Fn fn) {
    auto e = std::make_shared<Entry>(Entry{std::move(name), std::move(fn)});
    std::lock_guard<std::mutex> g(mu);
    for (auto& old : list)
      if (old->name == e->name) {
        // A running call of the old provider finishes on its own copy of the entry.
        old->listed = false;
        return void(old = std::move(e));
      }
    list.push_back(std::move(e));
  }
  void erase(const std::string& name) {
    std::unique_lock<std::mutex> g(mu);
    for (auto it = list.begin(); it != list.end(); ++it) {
      if ((*it)->name != name) continue;
      std::shared_ptr<Entry> e = std::move(*it);
      list.erase(it);
      e->listed = false;
      idle.wait(g, [&] { return e->running == 0; });
      return;
    }
  }
  // Calls each provider listed when it starts, in registration order; a provider erased or
  // replaced meanwhile is skipped.
  template <class Call>
  void for_each(Call call) {
    std::vector<std::shared_ptr<Entry>> entries;
    {
      std::lock_guard<std::mutex> g(mu);
      entries = list;
    }
    for (const std::shared_ptr<Entry>& e : entries) {
      {
        std::lock_guard<std::mutex> g(mu);
        if (!e->listed) continue;
        ++e->running;
      }
      struct Done {
        Providers& p;
        Entry& e;
        ~Done() {
          std::lock_guard<std::mutex> g(p.mu);
          if (--e.running == 0) p.idle.notify_all();
        }
      } done{*this, *e};
      call(e->name, e->fn);
    }
  }
};

struct History {
  std::vector<Transition> entries;
  uint64_t dropped = 0;
  void push(Transition t) {
    if (entries.size() >= kPlanHistoryCapacity) {
      // Keep the first transition (when the plan appeared) and the most recent ones.
      entries.erase(entries.begin() + 1);
      ++dropped;
    }
    entries.push_back(std::move(t));
  }
};

// Beyond this many plan histories, those of plans no longer listed anywhere are forgotten.
constexpr size_t kMaxHistories = 1024;

struct Registry {
  Providers<CounterSource> counters;
  Providers<PlanSource> plans;
  std::atomic<uint64_t> provider_errors{0};

  std::mutex decisions_mu;
  std::deque<Decision> decisions;
  uint64_t decisions_dropped = 0;

  std::mutex history_mu;
  std::map<uint64_t, History> histories;
};

Registry& registry() {
  // Leaked on purpose: components record decisions from their threads during static
  // destruction, and the final report reads it from an atexit handler.
  static Registry* r = new Registry;
  return *r;
}

class VectorSink : public CounterSink {
 public:
  explicit VectorSink(CounterGroup& g) : g_(g) {}
  void add(std::string_view name, uint64_t value) override { g_.values.emplace_back(name, value); }

 private:
  CounterGroup& g_;
};

void apply_transition(Plan& p, PlanState to, std::string reason) {
  const std::string_view state = plan_state_name(to);
  p.state.store(to);
  {
    std::lock_guard<std::mutex> g(registry().history_mu);
    registry().histories[p.id].push(Transition{uptime_ms(), std::string(state), reason, false});
  }
  record_decision("plan", detail::concat("plan ", p.id, " (", p.name, ")"), state, reason);
  if (trace::enabled())
    trace::instant("plan", "transition",
                   detail::concat("plan ", p.id, " -> ", state, ": ", reason));
  p.last_reason = std::move(reason);
}

}  // namespace

double trace::now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                   process_start())
      .count();
}
double uptime_ms() { return trace::now_us() / 1000.0; }

void register_counter_source(std::string group, CounterSource fn) {
  registry().counters.set(std::move(group), std::move(fn));
}
void unregister_counter_source(const std::string& group) { registry().counters.erase(group); }
void register_plan_source(std::string name, PlanSource fn) {
  registry().plans.set(std::move(name), std::move(fn));
}
void unregister_plan_source(const std::string& name) { registry().plans.erase(name); }

void record_decision(std::string_view component, std::string_view subject, std::string_view what,
                     std::string_view reason) {
  Decision d{0, std::string(component), std::string(subject), std::string(what),
             std::string(reason)};
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.decisions_mu);
  d.t_ms = uptime_ms();  // under the lock: the log stays in time order
  if (r.decisions.size() >= kDecisionLogCapacity) {
    r.decisions.pop_front();
    ++r.decisions_dropped;
  }
  r.decisions.push_back(std::move(d));
}

void record_transition(Plan& p, PlanState to, std::string reason) {
  std::lock_guard<std::mutex> g(p.sample_mu);
  apply_transition(p, to, std::move(reason));
}

void record_transition_locked(Plan& p, PlanState to, std::string reason) {
  apply_transition(p, to, std::move(reason));
}

namespace inspect_detail {

void collect_counters(std::vector<CounterGroup>& out) {
  registry().counters.for_each([&](const std::string& name, const CounterSource& fn) {
    CounterGroup group{name, {}};
    VectorSink sink(group);
    try {
      fn(sink);
    } catch (...) {
      // A provider's failure must not cost the report: its group is left out and counted.
      registry().provider_errors.fetch_add(1);
      return;
    }
    out.push_back(std::move(group));
  });
}

void collect_plans(std::vector<PlanInfo>& out) {
  registry().plans.for_each([&](const std::string& name, const PlanSource& fn) {
    std::vector<PlanInfo> got;
    try {
      fn(got);
    } catch (...) {
      registry().provider_errors.fetch_add(1);
      return;
    }
    for (PlanInfo& p : got) {
      if (p.origin.empty()) p.origin = name;
      out.push_back(std::move(p));
    }
  });
}

uint64_t provider_errors() { return registry().provider_errors.load(); }

void copy_decisions(std::vector<Decision>& out, uint64_t* dropped) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.decisions_mu);
  out.assign(r.decisions.begin(), r.decisions.end());
  *dropped = r.decisions_dropped;
}

void plan_history(uint64_t id, std::string_view state, std::string_view last_reason,
                  std::vector<Transition>* out, uint64_t* dropped) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.history_mu);
  History& h = r.histories[id];
  if (h.entries.empty() || h.entries.back().state != state)
    h.push(Transition{uptime_ms(), std::string(state), std::string(last_reason), true});
  *out = h.entries;
  *dropped = h.dropped;
}

void prune_histories(const std::vector<uint64_t>& live) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.history_mu);
  if (r.histories.size() <= kMaxHistories) return;
  for (auto it = r.histories.begin(); it != r.histories.end();) {
    const bool keep = std::find(live.begin(), live.end(), it->first) != live.end();
    it = keep ? std::next(it) : r.histories.erase(it);
  }
}

}  // namespace inspect_detail

}  // namespace livefuse
