// inspect(): plans from the PlanTable, the registry's providers, decisions and transitions.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "livefuse/inspect.hpp"
#include "livefuse/livefuse.hpp"
#include "runtime/inspect_registry.hpp"
#include "planner/service.hpp"
#include "runtime/plan.hpp"

namespace lf = livefuse;

namespace {

// A plan that is only looked at, never run (no op of these tests matches it: its ops take
// rank-5 inputs).
class ShownPlan : public lf::Plan {
 public:
  bool run(lf::Window&, const std::vector<std::pair<int, int>>&) override { return false; }
  bool writes(int, int) const override { return true; }
  std::string describe() const override {
    return "shown plan with " + std::to_string(ops.size()) + " ops";
  }
  void details(lf::PlanDetails& d) const override {
    if (throw_in_details) throw lf::Error("[test] details failed");
    d.shape_pattern = "[A,B,C,D,E] [E]";
    d.kernels.push_back({"k_test", "__global__ void k_test() {}", 12.5, "miss", "", {}});
    d.groups.push_back({"g0", "vertical", {0, 1}, "k_test", 3.5});
    d.graphs.push_back({"[1,2,3,4,5] [5]", 7, 2});
  }
  bool throw_in_details = false;
};

std::shared_ptr<ShownPlan> make_plan(uint64_t id) {
  auto p = std::make_shared<ShownPlan>();
  p->id = id;
  p->name = "mul+exp";
  p->signature = 0xabcdef;
  p->n_external = 2;
  lf::PlanOp a;
  a.op = lf::OpId::mul;
  a.in_dtypes = {lf::DType::f32, lf::DType::f16};
  a.in_ranks = {5, 1};
  a.inputs = {lf::PlanInput{-1, 0, 0}, lf::PlanInput{-1, 0, 1}};
  lf::PlanOp b;
  b.op = lf::OpId::exp;
  b.in_dtypes = {lf::DType::f32};
  b.in_ranks = {5};
  b.inputs = {lf::PlanInput{0, 0, -1}};
  b.attrs_hash = 0x1234;
  p->ops = {a, b};
  return p;
}

// A table of this test's plans only: a planner round still running for an earlier test's
// candidate would otherwise publish into it (the counts below would see it).
struct TableGuard {
  TableGuard() {
    lf::planner::wait_service_idle();
    lf::PlanTable::get().clear_for_testing();
  }
  ~TableGuard() { lf::PlanTable::get().clear_for_testing(); }
};

const lf::PlanInfo& find(const lf::Snapshot& s, uint64_t id) {
  const lf::PlanInfo* p = s.find_plan(id);
  REQUIRE_MESSAGE(p, "plan ", id, " missing from the snapshot");
  return *p;
}

}  // namespace

TEST_CASE("inspect: a published plan shows its ops, samples, details and state") {
  TableGuard g;
  auto p = make_plan(501);
  p->hits = 17;
  p->eager_fallbacks = 3;
  p->sampled_plan_us = {30, 10, 12, 11};
  p->sampled_eager_us = {40, 20, 22};
  p->last_reason = "sampling";
  lf::PlanTable::get().publish(p);
  const lf::Snapshot s = lf::inspect();
  const lf::PlanInfo& i = find(s, 501);
  CHECK(i.name == "mul+exp");
  CHECK(i.state == "sampling");
  CHECK(i.device == "cpu");
  CHECK(i.origin == "plan_table");
  CHECK(i.signature == "0x0000000000abcdef");
  CHECK(i.description == "shown plan with 2 ops");
  CHECK(i.n_external == 2);
  REQUIRE(i.ops.size() == 2);
  CHECK(i.ops[0].op == "mul");
  CHECK(i.ops[0].inputs == std::vector<std::string>{"$0", "$1"});
  CHECK(i.ops[0].dtypes == std::vector<std::string>{"f32", "f16"});
  CHECK(i.ops[0].ranks == std::vector<int>{5, 1});
  CHECK(i.ops[1].inputs == std::vector<std::string>{"%0.0"});
  CHECK(i.ops[1].attrs_hash == "0x0000000000001234");
  CHECK(i.hits == 17);
  CHECK(i.eager_fallbacks == 3);
  // The samples a verdict compares: as many of each side as the other has (the fourth plan
  // sample waits for its eager one), so the median of 30 10 12.
  CHECK(i.sampled_fused_us == std::vector<double>{30, 10, 12});
  CHECK(i.fused_us == doctest::Approx(12));
  CHECK(i.eager_us == doctest::Approx(22));
  CHECK(*i.speedup == doctest::Approx(22.0 / 12));
  CHECK(i.details.shape_pattern == "[A,B,C,D,E] [E]");
  REQUIRE(i.details.kernels.size() == 1);
  CHECK(i.details.kernels[0].compile_ms == 12.5);
  CHECK(i.details.graphs.at(0).replays == 7);
  REQUIRE(i.details.groups.size() == 1);
  CHECK(i.details.groups[0].gpu_us == 3.5);
  // ... and through the JSON report (gpu_us is additive to schema 1: older reports read null).
  const lf::Snapshot back = lf::snapshot_from_json(lf::snapshot_to_json(s));
  CHECK(find(back, 501).details.groups.at(0).gpu_us == 3.5);
  CHECK(s.counter("plans", "total") == 1u);
  CHECK(s.counter("plans", "sampling") == 1u);
  CHECK(s.counter("plans", "replays") == 17u);
}

TEST_CASE(
    "inspect: reported transitions keep their time and reason; unreported ones are observed") {
  TableGuard g;
  auto p = make_plan(502);
  lf::PlanTable::get().publish(p);
  const double t0 = lf::uptime_ms();
  lf::record_transition(*p, lf::PlanState::active, "sampled: fast");
  CHECK(p->state.load() == lf::PlanState::active);
  CHECK(p->last_reason == "sampled: fast");
  lf::Snapshot s = lf::inspect();
  {
    const lf::PlanInfo& i = find(s, 502);
    REQUIRE(i.history.size() == 1);
    CHECK(i.history[0].state == "active");
    CHECK(i.history[0].reason == "sampled: fast");
    CHECK_FALSE(i.history[0].observed);
    CHECK(i.history[0].t_ms >= t0);
    CHECK(i.last_reason == "sampled: fast");
  }
  bool decided = false;
  for (const auto& d : s.decisions)
    decided |= d.subject == "plan 502 (mul+exp)" && d.what == "active";
  CHECK(decided);
  // A component that sets the state directly: the next snapshot records what it sees.
  p->state = lf::PlanState::rejected;
  {
    std::lock_guard<std::mutex> l(p->sample_mu);
    p->last_reason = "slower";
  }
  s = lf::inspect();
  const lf::PlanInfo& i = find(s, 502);
  REQUIRE(i.history.size() == 2);
  CHECK(i.history[1].state == "rejected");
  CHECK(i.history[1].reason == "slower");
  CHECK(i.history[1].observed);
  // The same state again adds nothing.
  CHECK(find(lf::inspect(), 502).history.size() == 2);
}

TEST_CASE("inspect: a plan's history is bounded, keeping its first and latest transitions") {
  TableGuard g;
  auto p = make_plan(503);
  lf::PlanTable::get().publish(p);
  const size_t n = lf::kPlanHistoryCapacity + 5;
  for (size_t k = 0; k < n; ++k) {
    std::lock_guard<std::mutex> l(p->sample_mu);
    lf::record_transition_locked(*p, k % 2 ? lf::PlanState::active : lf::PlanState::sampling,
                                 "step " + std::to_string(k));
  }
  const lf::Snapshot s = lf::inspect();
  const lf::PlanInfo& i = find(s, 503);
  REQUIRE(i.history.size() == lf::kPlanHistoryCapacity);
  CHECK(i.history_dropped == 5);
  CHECK(i.history.front().reason == "step 0");
  CHECK(i.history.back().reason == "step " + std::to_string(n - 1));
}

TEST_CASE("inspect: a plan whose details throw still shows, with the error as a note") {
  TableGuard g;
  auto p = make_plan(504);
  p->throw_in_details = true;
  lf::PlanTable::get().publish(p);
  const lf::Snapshot s = lf::inspect();
  const lf::PlanInfo& i = find(s, 504);
  REQUIRE(i.details.notes.size() == 1);
  CHECK(i.details.notes[0].first == "details_error");
  CHECK(i.details.notes[0].second.find("details failed") != std::string::npos);
}

TEST_CASE("inspect: counter providers plug in, are replaced, fail safely and unregister") {
  lf::register_counter_source("test_component", [](lf::CounterSink& s) {
    s.add("events", 41);
    s.add("drops", 2);
  });
  lf::Snapshot s = lf::inspect();
  CHECK(s.counter("test_component", "events") == 41u);
  CHECK(s.counter("test_component", "drops") == 2u);
  // The runtime's own groups come first.
  REQUIRE(s.counters.size() >= 4);
  CHECK(s.counters[0].name == "matcher");
  CHECK(s.counters[1].name == "memory.cpu");

  lf::register_counter_source("test_component", [](lf::CounterSink& s) { s.add("events", 42); });
  s = lf::inspect();
  CHECK(s.counter("test_component", "events") == 42u);
  CHECK(!s.counter("test_component", "drops").has_value());

  const uint64_t errors0 = *s.counter("inspect", "provider_errors");
  lf::register_counter_source("test_component",
                              [](lf::CounterSink&) { throw std::runtime_error("boom"); });
  s = lf::inspect();
  CHECK(!s.counter("test_component", "events").has_value());
  CHECK(*s.counter("inspect", "provider_errors") == errors0 + 1);

  lf::unregister_counter_source("test_component");
  s = lf::inspect();
  for (const auto& grp : s.counters) CHECK(grp.name != "test_component");
  CHECK(*s.counter("inspect", "provider_errors") == errors0 + 1);
}

TEST_CASE("inspect: counters() gives the snapshot's counter groups without the plans") {
  lf::register_counter_source("test_component", [](lf::CounterSink& s) { s.add("events", 7); });
  TableGuard g;
  lf::PlanTable::get().publish(make_plan(610));
  const std::vector<lf::CounterGroup> c = lf::counters();
  const lf::Snapshot s = lf::inspect();
  lf::unregister_counter_source("test_component");
  auto names = [](const std::vector<lf::CounterGroup>& gs) {
    std::vector<std::string> n;
    for (const auto& grp : gs) n.push_back(grp.name);
    return n;
  };
  // Every group of the snapshot but the two that summarise its plans and decisions, in order.
  std::vector<std::string> want;
  for (const std::string& n : names(s.counters))
    if (n != "plans" && n != "inspect") want.push_back(n);
  CHECK(names(c) == want);
  REQUIRE(!c.empty());
  CHECK(c[0].name == "matcher");
  bool found = false;
  for (const auto& grp : c)
    if (grp.name == "test_component") {
      found = true;
      REQUIRE(grp.values.size() == 1);
      CHECK(grp.values[0].second == 7u);
    }
  CHECK(found);
}

TEST_CASE("inspect: plan providers list candidates; a published plan with the same id wins") {
  TableGuard g;
  lf::PlanTable::get().publish(make_plan(600));
  lf::register_plan_source("test_planner", [](std::vector<lf::PlanInfo>& out) {
    lf::PlanInfo c;
    c.id = 601;
    c.name = "candidate";
    c.state = "candidate";
    out.push_back(c);
    lf::PlanInfo dup;
    dup.id = 600;
    dup.state = "compiling";
    out.push_back(dup);
  });
  const lf::Snapshot s = lf::inspect();
  lf::unregister_plan_source("test_planner");
  CHECK(find(s, 601).state == "candidate");
  CHECK(find(s, 601).origin == "test_planner");
  CHECK(find(s, 600).state == "sampling");
  CHECK(find(s, 600).origin == "plan_table");
  CHECK(s.counter("plans", "candidate") == 1u);
  CHECK(!lf::inspect().find_plan(601));
}

TEST_CASE("inspect: the decision log is bounded, ordered, and counts what it dropped") {
  const uint64_t dropped0 = lf::inspect().decisions_dropped;
  const size_t n = lf::kDecisionLogCapacity + 40;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, n] {
      for (size_t k = 0; k < n / 4; ++k)
        lf::record_decision("test", "thread " + std::to_string(t), "step", std::to_string(k));
    });
  for (auto& th : threads) th.join();
  lf::record_decision("test", "last", "done", "the newest entry");
  const lf::Snapshot s = lf::inspect();
  REQUIRE(s.decisions.size() == lf::kDecisionLogCapacity);
  CHECK(s.decisions_dropped >= dropped0 + 41);
  CHECK(s.decisions.back().subject == "last");
  CHECK(s.decisions.back().reason == "the newest entry");
  for (size_t k = 1; k < s.decisions.size(); ++k)
    CHECK(s.decisions[k - 1].t_ms <= s.decisions[k].t_ms);
  CHECK(*s.counter("inspect", "decisions_dropped") == s.decisions_dropped);
}

TEST_CASE("inspect: config values and their sources; matcher counters move with ops") {
  lf::Config c = lf::config();
  const lf::Config saved = c;
  c.hot = 7;
  c.report_ms = 250;
  c.sources = {{"LIVEFUSE_HOT", "env"},
               {"LIVEFUSE_REPORT_MS", "env (invalid, default used)"},
               {"LIVEFUSE", "default"}};
  c.mode = lf::Mode::on;
  lf::set_config_for_testing(c);
  lf::Snapshot s = lf::inspect();
  REQUIRE(s.config.size() == 3);
  CHECK(s.config[0].name == "LIVEFUSE_HOT");
  CHECK(s.config[0].value == "7");
  CHECK(s.config[0].source == "env");
  CHECK(s.config[1].value == "250");
  CHECK(s.config[1].source == "env (invalid, default used)");
  CHECK(s.config[2].value == "on");
  CHECK(s.mode == "on");

  const uint64_t calls0 = *s.counter("matcher", "calls");
  const uint64_t allocs0 = *s.counter("memory.cpu", "allocations");
  lf::Tensor x = lf::rand_uniform({3, 5}, 11, -1, 1, lf::DType::f32, lf::Device::cpu());
  lf::Tensor y = lf::exp(lf::add(x, x));
  CHECK(y.to_floats().size() == 15);
  s = lf::inspect();
  CHECK(*s.counter("matcher", "calls") >= calls0 + 2);
  CHECK(*s.counter("memory.cpu", "allocations") > allocs0);
  lf::set_config_for_testing(saved);
  // Every variable config.cpp reads has its value listed ("?": a row inspect.cpp lacks).
  s = lf::inspect();
  CHECK(s.config.size() >= 20);
  for (const auto& e : s.config) {
    INFO(e.name);
    CHECK(e.value != "?");
  }
}

TEST_CASE("inspect: counters read while another thread publishes plans (each walk keeps its snapshot)") {
  // The planner's "graphs" counters walk the plan table. A range-for over
  // PlanTable::snapshot()->plans freed its snapshot before the first step -- the temporary
  // shared_ptr dies at the end of the range's initialiser -- so a publish meanwhile freed the
  // vector under the walk (ThreadSanitizer and AddressSanitizer report it here; a plain build
  // may read freed memory silently). PlanTable::plans() hands out a copy.
  TableGuard g;
  REQUIRE(lf::planner::ensure_service_started());
  std::atomic<bool> done{false};
  std::thread publisher([&] {
    for (uint64_t id = 1; id <= 20000; ++id) lf::PlanTable::get().publish(make_plan(100000 + id));
    done = true;
  });
  uint64_t reads = 0;
  while (!done.load()) {
    const auto groups = lf::counters();
    CHECK(lf::find_counter(groups, "graphs", "replays").has_value());
    ++reads;
  }
  publisher.join();
  CHECK(reads > 0);
  CHECK(lf::PlanTable::get().plans().size() == lf::PlanTable::kMaxPlans);
}
