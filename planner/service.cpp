#include "planner/service.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "kernels/jit/kernel_compiler.hpp"
#include "livefuse/config.hpp"
#include "livefuse/device.hpp"
#include "livefuse/error.hpp"
#include "livefuse/stream.hpp"
#include "monitor/candidate.hpp"
#include "monitor/monitor.hpp"
#include "planner/counter_sources.hpp"
#include "planner/fused_plan.hpp"
#include "planner/gemm_tuning.hpp"
#include "planner/plan_returns.hpp"
#include "planner/planner.hpp"
#include "runtime/background.hpp"
#include "runtime/exit_hooks.hpp"
#include "runtime/faults.hpp"
#include "livefuse/inspect.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/plan.hpp"

#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime.h>
#endif

namespace livefuse::planner {

namespace {

// PlanOps (what the matcher compares) from the candidate's representative occurrence.
std::vector<PlanOp> plan_ops(const monitor::Candidate& c) {
  std::vector<PlanOp> ops;
  for (const monitor::CandidateOp& co : c.ops) {
    PlanOp p;
    p.op = co.op;
    p.attrs_hash = co.attrs_hash;
    for (size_t i = 0; i < co.inputs.size(); ++i) {
      p.in_dtypes.push_back(co.in_dtypes[i]);
      p.in_ranks.push_back(static_cast<int8_t>(co.in_ranks[i]));
      PlanInput in;
      if (co.inputs[i].kind == monitor::WireRef::Kind::internal) {
        in.op = co.inputs[i].index;
        in.out = co.inputs[i].output;
      } else {
        in.slot = co.inputs[i].index;
      }
      p.inputs.push_back(in);
    }
    ops.push_back(std::move(p));
  }
  return ops;
}

int device_arch(const Device& d) {
#if LIVEFUSE_HAS_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, d.index) == cudaSuccess) return prop.major * 10 + prop.minor;
#endif
  (void)d;
  return 90;
}

// Loads every compiled kernel's module on `d` here, on the planner thread. A module is loaded
// at its first launch otherwise: that is the plan's first run, on the program's thread, and a
// load costs a good fraction of a millisecond -- a stall just as the plan starts to serve. A
// failed load is left for that launch to report.
void preload_modules(PlannedSegment& p, const Device& d) {
#if LIVEFUSE_HAS_CUDA
  if (cudaSetDevice(d.index) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  for (Step& s : p.steps) {
    if (const FusedKernelStep* fk = s.generated_kernel(); fk && fk->compiled) {
      std::string error;
      (void)fk->compiled->module(&error);
    }
  }
#else
  (void)p;
  (void)d;
#endif
}

class Service;
Service& service();
void stop_at_exit();

class Service final : public monitor::CandidateConsumer {
 public:
  void on_candidate(const monitor::Candidate& c) override {
    std::lock_guard<std::mutex> g(mu_);
    if (stopping_) return;
    if (paused_) {
      ++ctr_.candidates;
      ++ctr_.skipped;
      return;
    }
    ++ctr_.candidates;
    queue_.push_back(c);
    cv_.notify_all();
  }
  void on_candidate_cold(uint64_t signature, uint32_t stream) override {
    std::lock_guard<std::mutex> g(mu_);
    cold_.emplace_back(signature, stream);
    cv_.notify_all();
  }

  void start() {
    std::lock_guard<std::mutex> g(mu_);
    if (started_) return;
    started_ = true;
    // Detached: at exit it is stopped between jobs (waiting a bounded time for the job in hand),
    // so it is not planning while static destructors run: from the main thread's exit, before
    // exit's handlers (runtime/exit_hooks.hpp), else from an atexit handler.
    exit_hooks::add(stop_at_exit);
    std::atexit(stop_at_exit);
    std::thread([this] {
      trace::set_thread_name("livefuse-planner");
      // On a GPU machine the first plan's compile would also pay NVRTC's first use and the op
      // library (LIVEFUSE_JIT=lto): started now, on the compile arena, while the monitor is
      // still counting repeats, so they are off the path from "hot" to "served". Asked here,
      // not on the program's thread: the first cuda_available() may initialise the driver.
      if (config().device != "cpu" && cuda_available())
        (void)jit::KernelCompiler::global().warm_up(jit::default_compile_options());
      loop();
    }).detach();
    register_counter_source("planner", [this](CounterSink& sink) {
      const ServiceCounters c = counters();
      sink.add("candidates", c.candidates);
      sink.add("planned", c.planned);
      sink.add("published", c.published);
      sink.add("skipped", c.skipped);
      sink.add("failed", c.failed);
      sink.add("retired", c.retired);
      sink.add("revived", c.revived);
      sink.add("rounds", c.rounds);
    });
    // Plans not yet in the PlanTable: hot candidates waiting (candidate) and the one being
    // planned and compiled (compiling).
    register_plan_source("planner", [this](std::vector<PlanInfo>& out) {
      std::lock_guard<std::mutex> g(mu_);
      auto info = [&](const monitor::Candidate& c, const char* state, uint64_t n) {
        PlanInfo p;
        p.id = (uint64_t(1) << 62) + n;  // ids apart from the PlanTable's
        p.name = monitor::describe(c).substr(0, 120);
        p.state = state;
        p.origin = "planner";
        char sig[20];
        std::snprintf(sig, sizeof sig, "%016llx", static_cast<unsigned long long>(c.signature));
        p.signature = sig;
        p.n_external = static_cast<int>(c.externals.size());
        p.last_reason = "hot: " + std::to_string(c.occurrences) + " occurrences";
        out.push_back(std::move(p));
      };
      uint64_t n = 0;
      if (busy_)
        for (const monitor::Candidate& c : current_) info(c, "compiling", n++);
      for (const monitor::Candidate& c : queue_) info(c, "candidate", n++);
    });
    register_kernel_cache_counters();
    register_gemm_tuning_counters();
    register_graph_counters();
  }

  bool wait_idle(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> g(mu_);
    return idle_cv_.wait_for(g, timeout, [&] { return queue_.empty() && cold_.empty() && !busy_; });
  }

  void stop(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> g(mu_);
    stopping_ = true;
    queue_.clear();
    cold_.clear();
    cv_.notify_all();
    idle_cv_.wait_for(g, timeout, [&] { return !busy_; });
  }

  void set_paused(bool p) {
    std::lock_guard<std::mutex> g(mu_);
    paused_ = p;
  }

  void set_held(bool h) {
    std::lock_guard<std::mutex> g(mu_);
    held_ = h;
    cv_.notify_all();
  }

  ServiceCounters counters() {
    std::lock_guard<std::mutex> g(mu_);
    return ctr_;
  }

  void reset() {
    std::lock_guard<std::mutex> g(mu_);
    planned_.clear();
    returns_.clear();
  }

 private:
  void loop() {
    for (;;) {
      std::vector<monitor::Candidate> batch;
      std::vector<std::pair<uint64_t, uint32_t>> cold;
      {
        std::unique_lock<std::mutex> g(mu_);
        busy_ = false;
        idle_cv_.notify_all();
        const auto work = [&] { return stopping_ || (!held_ && !queue_.empty()) || !cold_.empty(); };
        // Superseding plans still sampling are looked at again every 50 ms (restore_superseded).
        if (!returns_.watching()) cv_.wait(g, work);
        else cv_.wait_for(g, std::chrono::milliseconds(50), work);
        if (stopping_) return;
        busy_ = true;
        cold.swap(cold_);
        if (!held_ && !queue_.empty()) ++ctr_.rounds;
        // Every candidate queued by now is planned in this round: their kernels compile as one
        // batch (kernel_compiler.hpp), so NVRTC's fixed cost per program is paid once for them.
        while (!held_ && !queue_.empty() && batch.size() < kMaxBatch) {
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        current_ = batch;
      }
      for (auto [sig, stream] : cold) retire(sig, stream);
      restore_superseded();
      if (!batch.empty()) {
        const BackgroundWork busy;
        handle(batch);
      }
      // Statics first built by planning (op attributes, strategy tables, ...) are destroyed
      // before atexit handlers registered earlier run: register the stop once more after the
      // first job, so it runs before those destructors.
      static std::once_flag once;
      std::call_once(once, [] { std::atexit(stop_at_exit); });
      std::lock_guard<std::mutex> g(mu_);
      current_.clear();
    }
  }

  void retire(uint64_t sig, uint32_t stream) {
    uint64_t id = 0;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = planned_.find({sig, stream});
      if (it == planned_.end()) return;
      id = it->second.plan_id;
      planned_.erase(it);
      ++ctr_.retired;
    }
    if (!id) return;
    // A plan that served or lost stays in reach (plan_returns.hpp): its sequence coming back
    // revives it, or keeps it from being planned and sampled again only to lose again.
    const std::shared_ptr<Plan> plan = PlanTable::get().find(id);
    if (plan) returns_.went_cold({sig, stream}, *plan);
    if (plan && plan->state.load() != PlanState::rejected)
      PlanTable::get().retire(id, "retired: the sequence is no longer hot");
  }

  // Plans that `longer` starts with step aside for it (prefixes_of, plan_returns.hpp). Retired;
  // each comes back, in the state it left, if the longer plan is rejected or fails
  // (restore_superseded).
  void supersede_prefixes(const Plan& longer, uint64_t occurrences) {
    for (const auto& q : prefixes_of(longer, occurrences)) {
      const PlanState was = q->state.load();
      PlanTable::get().retire(q->id, "superseded by plan " + std::to_string(longer.id) +
                                         ", which starts with its ops");
      {
        std::lock_guard<std::mutex> g(mu_);
        planned_.erase({q->signature, q->stream});
      }
      returns_.superseded(longer.id, q, was);
    }
  }

  // The mirror, for a new plan that an active or sampling plan starts with (longer_plan_for): it
  // stands aside at once, and its structure stays planned until it goes cold or its shapes
  // change. Aside for a sampling plan, it comes back sampling if that plan loses.
  void set_aside_if_prefix(const Plan& shorter) {
    const std::shared_ptr<Plan> q = longer_plan_for(shorter);
    if (!q) return;
    const bool sampling = q->state.load() == PlanState::sampling;
    PlanTable::get().retire(shorter.id, "set aside: plan " + std::to_string(q->id) +
                                            ", which starts with its ops, " +
                                            (sampling ? "samples on its windows" : "serves its windows"));
    if (sampling)
      if (std::shared_ptr<Plan> s = PlanTable::get().find(shorter.id))
        returns_.superseded(q->id, std::move(s), PlanState::sampling);
  }

  // Superseded prefixes whose longer plan was rejected or failed serve again (plan_returns.hpp):
  // they served before it, and the detector, which now sees whole windows run eagerly, would not
  // cut them out again.
  void restore_superseded() {
    for (const std::shared_ptr<Plan>& prefix : returns_.restore()) {
      std::lock_guard<std::mutex> g(mu_);
      ++ctr_.revived;
      Planned back;  // its shape mix as planned: the same candidate again is not re-planned
      back.plan_id = prefix->id;
      back.shape_tuples = prefix->shape_tuples.size();
      back.family = prefix->family.defined();
      planned_[{prefix->signature, prefix->stream}] = back;
    }
  }

  // `c`'s structure had a plan that went cold: revived, or still rejected for these shapes --
  // either way nothing to plan (true). Not under mu_: reviving records a decision, and the
  // inspection that reads decisions also asks this service for its plans.
  bool returned(const monitor::Candidate& c) {
    uint64_t id = 0;
    const PlanReturns::Back b = returns_.returns(c, &id);
    if (b == PlanReturns::Back::none) return false;
    {
      std::lock_guard<std::mutex> g(mu_);
      ++(b == PlanReturns::Back::revived ? ctr_.revived : ctr_.skipped);
      planned_[{c.signature, c.stream}] = Planned::of(c, id);
    }
    // A revived plan takes its windows back from prefixes planned while it was away, as a new one
    // does (one ran Llama's layer as two plans after a prefill on the H200: 2.8 ms a token, not 1.4).
    if (b == PlanReturns::Back::revived)
      if (const std::shared_ptr<Plan> plan = PlanTable::get().find(id)) supersede_prefixes(*plan, c.occurrences);
    return true;
  }

  static const char* unservable(const PlannedSegment& p) {
    if (p.summary.ops == 0) return "nothing to compute: no value of the sequence is used";
    const Segment& seg = p.segment;
    if (seg.nodes.empty()) return "empty sequence";
    const int last = static_cast<int>(seg.nodes.size()) - 1;
    for (int k = 0; k < static_cast<int>(seg.nodes[last].outputs.size()); ++k) {
      const ValueKind v = p.values[seg.value_id(ValueRef::of(last, k))];
      if (v != ValueKind::Materialized && v != ValueKind::View)
        return "the last op's result is never used, and the program always receives it";
    }
    return nullptr;
  }

  // A candidate planned and waiting for its kernels.
  struct Pending {
    const monitor::Candidate* c = nullptr;  // nullptr once settled (failed)
    uint64_t old_plan = 0;
    Device device = Device::cpu();
    std::string subject;
    PlannedSegment planned;
  };

  void handle(const std::vector<monitor::Candidate>& batch) {
    // A structure queued twice (its shape mix changed again while it waited) is planned once,
    // from its latest candidate: one round publishes at most one plan per structure.
    std::vector<const monitor::Candidate*> latest;
    std::set<std::pair<uint64_t, uint32_t>> seen;
    for (auto it = batch.rbegin(); it != batch.rend(); ++it)
      if (seen.insert({it->signature, it->stream}).second) latest.insert(latest.begin(), &*it);
    {
      std::lock_guard<std::mutex> g(mu_);
      ctr_.skipped += batch.size() - latest.size();
    }
    std::vector<Pending> pending;
    for (const monitor::Candidate* c : latest)
      if (auto p = prepare(*c)) pending.push_back(std::move(*p));
    compile(pending);
    for (Pending& p : pending) publish(p);
  }

  void fail(const monitor::Candidate& c, const std::string& subject, const std::string& why) {
    record_decision("planner", subject, "failed to plan", why);
    std::lock_guard<std::mutex> g(mu_);
    ++ctr_.failed;
    planned_[{c.signature, c.stream}] = Planned::of(c, 0);
    last_error_ = why;
  }

  void skip(const monitor::Candidate& c, const std::string& subject, const char* why) {
    record_decision("planner", subject, "skip", why);
    std::lock_guard<std::mutex> g(mu_);
    ++ctr_.skipped;
    planned_[{c.signature, c.stream}] = Planned::of(c, 0);
  }

  // Plans one candidate; nothing when it needs no plan (or cannot have one: recorded here).
  std::optional<Pending> prepare(const monitor::Candidate& c) {
    // The mode is read per candidate: tests and tools switch it at run time.
    const Mode mode = config().mode;
    if (mode == Mode::off || mode == Mode::trace) {
      std::lock_guard<std::mutex> g(mu_);
      ++ctr_.skipped;
      return std::nullopt;
    }
    Pending p;
    p.c = &c;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = planned_.find({c.signature, c.stream});
      if (it != planned_.end()) {
        // Same structure again: re-plan only when its shape mix changed (a new version).
        if (it->second.version >= c.version || it->second.same_shape_mix(c)) {
          ++ctr_.skipped;
          return std::nullopt;
        }
        p.old_plan = it->second.plan_id;
      }
    }
    if (!p.old_plan && returned(c)) return std::nullopt;
    trace::Scope ts("compile", "plan_segment");
    p.subject = monitor::describe(c).substr(0, 120);
    try {
      p.device = stream_by_id(c.stream).device();
      if (faults::fire(faults::Point::plan)) throw Error("[planner] injected fault at plan");
      p.planned = plan_segment(from_candidate(c), default_planner_options(p.device));
      // The matcher hands the program the last call's results, so a plan that does not write
      // them (the monitor saw them never used) could never serve: its windows would always be
      // flushed eagerly, after paying the deferral.
      if (const char* why = unservable(p.planned)) {
        skip(c, p.subject, why);
        return std::nullopt;
      }
      if (faults::fire(faults::Point::compile)) throw Error("[planner] injected fault at compile");
      const PlanSummary& sum = p.planned.summary;
      if (sum.eager_launches <= 1 && sum.plan_launches >= sum.eager_launches) {
        // One kernel or none either way: no launch to save and nothing fused (a copy behind a
        // view, say a weight transposed at load time) -- a plan would only add a replay.
        skip(c, p.subject, "nothing to gain: eager runs it in one launch or none");
        return std::nullopt;
      }
      if (!p.device.is_cuda() && sum.fused_kernels == 0) {
        // On the CPU a plan only pays through fusion (there are no launches to save).
        skip(c, p.subject, "no fusion possible: on the CPU a plan only pays through fusion");
        return std::nullopt;
      }
    } catch (const std::exception& e) {
      fail(c, p.subject, e.what());
      return std::nullopt;
    }
    return p;
  }

  // The CUDA plans' kernels, all of them in one submission per architecture.
  void compile(std::vector<Pending>& pending) {
    std::map<int, std::vector<Pending*>> by_arch;
    for (Pending& p : pending)
      if (p.device.is_cuda()) by_arch[device_arch(p.device)].push_back(&p);
    for (auto& [arch, group] : by_arch) {
      trace::Scope ts("compile", "compile_plans");
      jit::CompileOptions co = jit::default_compile_options();  // the LIVEFUSE_* choices
      co.arch = arch;
      std::vector<PlannedSegment*> plans;
      for (Pending* p : group) plans.push_back(&p->planned);
      try {
        compile_plans(plans, jit::KernelCompiler::global(), co);
        for (Pending* p : group) preload_modules(p->planned, p->device);
        // Each GEMM shape's fastest cuBLASLt algorithm, timed here so the program's thread
        // only looks it up (gemm_tuning.hpp). Never throws: a failure leaves the heuristic's.
        for (Pending* p : group) tune_plan_gemms(p->planned, p->device);
      } catch (const std::exception& e) {
        for (Pending* p : group) {
          fail(*p->c, p->subject, e.what());
          p->c = nullptr;  // settled
        }
      }
    }
  }

  void publish(Pending& p) {
    if (!p.c) return;
    const monitor::Candidate& c = *p.c;
    const Mode mode = config().mode;
    try {
      auto plan = std::make_shared<FusedPlan>(std::move(p.planned), p.device.kind);
      plan->ops = plan_ops(c);
      plan->n_external = static_cast<int>(c.externals.size());
      plan->signature = c.signature;
      plan->stream = c.stream;
      plan->occurrences = c.occurrences;
      for (const monitor::ShapeTuple& t : c.shapes.tuples)
        plan->shape_tuples.push_back(ShapeTupleKey::of(t.dims));
      plan->family = c.shapes.family;
      plan->id = next_id_++;
      plan->name = monitor::describe(c);
      if (plan->name.size() > 120) plan->name = plan->name.substr(0, 117) + "...";
      plan->state = PlanState::sampling;
      plan->last_reason =
          std::string(mode == Mode::shadow ? "shadow (never replaces eager): " : "") +
          "planned: " + std::to_string(plan->planned().summary.ops) + " ops in " +
          std::to_string(plan->planned().summary.plan_launches) + " launches (eager " +
          std::to_string(plan->planned().summary.eager_launches) + ")";
      const uint64_t id = plan->id;
      record_decision("planner", p.subject, "publish plan " + std::to_string(id), plan->last_reason);
      const std::shared_ptr<const Plan> published = plan;
      PlanTable::get().publish(std::move(plan));
      if (p.old_plan) PlanTable::get().retire(p.old_plan, "replaced: the shape mix changed");
      supersede_prefixes(*published, c.occurrences);
      set_aside_if_prefix(*published);
      std::lock_guard<std::mutex> g(mu_);
      ++ctr_.planned;
      ++ctr_.published;
      planned_[{c.signature, c.stream}] = Planned::of(c, id);
    } catch (const std::exception& e) {
      fail(c, p.subject, e.what());
    }
  }

  struct Planned {
    uint64_t plan_id = 0;
    uint32_t version = 0;
    size_t shape_tuples = 0;
    bool family = false;  // planned with a shape family
    static Planned of(const monitor::Candidate& c, uint64_t id) {
      return {id, c.version, c.shapes.tuples.size(), c.shapes.family.defined()};
    }
    bool same_shape_mix(const monitor::Candidate& c) const {
      return shape_tuples == c.shapes.tuples.size() && family == c.shapes.family.defined();
    }
  };
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<monitor::Candidate> queue_;
  std::vector<std::pair<uint64_t, uint32_t>> cold_;
  std::map<std::pair<uint64_t, uint32_t>, Planned> planned_;
  PlanReturns returns_;  // plans gone cold or superseded that may serve again
  ServiceCounters ctr_;
  std::string last_error_;
  bool started_ = false, busy_ = false, stopping_ = false, paused_ = false, held_ = false;
  std::vector<monitor::Candidate> current_;  // being planned (inspection)
  static constexpr size_t kMaxBatch = 16;     // candidates planned and compiled together
  uint64_t next_id_ = 1;
};

Service& service() {
  static Service* s = new Service;  // leaked: its thread runs until the process ends
  return *s;
}

// Stops the planner between jobs, waiting a bounded time for the job in hand.
void stop_at_exit() { service().stop(std::chrono::seconds(5)); }

}  // namespace

bool ensure_service_started() {
  static std::atomic<bool> started{false};
  if (started.load(std::memory_order_acquire)) return true;
  const Mode m = config().mode;
  if (m == Mode::off || m == Mode::trace) return false;
  static std::mutex mu;
  std::lock_guard<std::mutex> g(mu);
  if (!started.load()) {
    service().start();
    monitor::Monitor::instance().set_consumer(&service());
    started.store(true, std::memory_order_release);
  }
  return true;
}

bool wait_service_idle(std::chrono::milliseconds timeout) { return service().wait_idle(timeout); }
ServiceCounters service_counters() { return service().counters(); }
void reset_service_for_testing() { service().reset(); }

void set_service_paused(bool paused) { service().set_paused(paused); }

void hold_service_for_testing(bool held) { service().set_held(held); }

}  // namespace livefuse::planner
