// What the monitor hears of windows that plans serve (runtime/trace_sink.hpp, the note): one
// event per window, which it replays call by call, so the plan stays hot while it serves, a
// phase change still retires it, and a shape the plan was not made with is still learnt.
#include "livefuse/inspect.hpp"
#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/plan.hpp"
#include "served_loop.hpp"
#include "test_plan_util.hpp"

namespace lf = livefuse;
using lf::monitor::Monitor;

namespace {
const lf::Device cpu = lf::Device::cpu();
constexpr int kChainOps = 5;

lf::Tensor chain(const lf::Tensor& x) {
  lf::Tensor y = lf::mul(x, 1.5);
  y = lf::tanh(lf::add(y, 0.25));
  y = lf::mul(y, x);
  return lf::relu(y);
}

// The fixture with this file's chain.
struct Served : lftest::ServedLoop {
  std::shared_ptr<lf::Plan> until_served(const lf::Tensor& x) {
    auto plan = ServedLoop::until_served([&] { return chain(x); }, kChainOps);
    if (!plan) FAIL("the chain was never served");
    return plan;
  }
  static std::shared_ptr<lf::Plan> serving() { return ServedLoop::serving(kChainOps); }
};

}  // namespace

TEST_CASE("served windows: one event each; the plan that serves stays active, values eager") {
  Served s;
  const lf::Tensor x = lf::rand_uniform({256}, 7, -1, 1, lf::DType::f32, cpu);
  const std::vector<double> want = lftest::eager_values([&] { return chain(x); });
  const std::shared_ptr<lf::Plan> plan = s.until_served(x);
  REQUIRE(plan);
  REQUIRE(Monitor::instance().drain());
  const auto c0 = Monitor::instance().counters();
  const uint64_t served0 = lf::matcher_counters().served;
  // About 30 half-lives of the stream's clock: without the served events the chain's count
  // would decay to nothing and the planner would retire the plan.
  constexpr int kIters = 1500;
  for (int it = 0; it < kIters; ++it) {
    lf::Tensor y = chain(x);
    if (it % 100 == 0) REQUIRE(lftest::allclose(y.to_doubles(), want, 1e-5, 1e-6));
    lf::synchronize(cpu);
    if (it % 200 == 0) Monitor::instance().drain(std::chrono::seconds(60), false);
  }
  REQUIRE(Monitor::instance().drain());
  REQUIRE(lf::planner::wait_service_idle());
  const auto c1 = Monitor::instance().counters();
  CHECK(lf::matcher_counters().served - served0 == kIters * kChainOps);
  CHECK(c1.served - c0.served == kIters);
  // The monitor saw the calls of every served window it replayed, though none was reported one
  // by one; once the structure is well known (Detector::kReplayedServed occurrences) it replays
  // one served window in kReplayEvery and counts the others without replaying them.
  const uint64_t unreplayed = c1.served_unreplayed - c0.served_unreplayed;
  CHECK(unreplayed > 0);
  CHECK(unreplayed < kIters);
  CHECK(c1.replayed - c0.replayed == (kIters - unreplayed) * kChainOps);
  CHECK(c1.events - c0.events == (kIters - unreplayed) * kChainOps);
  // Per iteration the program pushed: the window's opening, the served window, the release of
  // the chain's result (the one value the program held) and the sync (and the checks' host
  // copies, every 100 iterations); op by op it would have been 5 calls and 5 releases more.
  CHECK(c1.produced - c0.produced <= 4 * kIters + kIters / 50);
  // The intermediates of the replayed windows, and the held result of the others.
  CHECK(c1.releases - c0.releases == (kIters - unreplayed) * kChainOps + unreplayed);
  CHECK(c1.candidates_cooled == c0.candidates_cooled);
  CHECK(plan->state == lf::PlanState::active);
  CHECK(Served::serving() == plan);
}

TEST_CASE("served windows: a phase change retires the plan that no longer matches; its return revives it") {
  Served s;
  const lf::Tensor x = lf::rand_uniform({256}, 8, -1, 1, lf::DType::f32, cpu);
  const std::shared_ptr<lf::Plan> plan = s.until_served(x);
  REQUIRE(plan);
  for (int it = 0; it < 200; ++it) {
    lf::Tensor y = chain(x);
    lf::synchronize(cpu);
  }
  // Phase 2: other ops.
  CHECK(Served::other_ops_until(x, [&] { return plan->state == lf::PlanState::retired; }));
  // Phase 3: the chain comes back with its shapes: the same plan serves again (revived), with
  // no new plan, compile or sampling.
  const lf::planner::ServiceCounters before = lf::planner::service_counters();
  const std::shared_ptr<lf::Plan> again = s.until_served(x);
  REQUIRE(again);
  CHECK(again == plan);
  CHECK(plan->state == lf::PlanState::active);
  const lf::planner::ServiceCounters after = lf::planner::service_counters();
  CHECK(after.published == before.published);
  CHECK(after.revived == before.revived + 1);
  // Other shapes are not what it was planned for: a new plan, not a revival.
  const lf::Tensor z = lf::rand_uniform({96}, 18, -1, 1, lf::DType::f32, cpu);
  REQUIRE(Served::other_ops_until(x, [&] { return plan->state == lf::PlanState::retired; }));
  const std::shared_ptr<lf::Plan> other = s.until_served(z);
  REQUIRE(other);
  CHECK(other != plan);
  CHECK(lf::planner::service_counters().revived == after.revived);
}

TEST_CASE("served windows: a rejected plan's sequence coming back with its shapes is not planned again") {
  Served s;
  const lf::Tensor x = lf::rand_uniform({256}, 23, -1, 1, lf::DType::f32, cpu);
  const std::shared_ptr<lf::Plan> plan = s.until_served(x);
  REQUIRE(plan);
  // As if sampling had found it slower than eager.
  lf::record_transition(*plan, lf::PlanState::rejected, "sampled: slower (test)");
  const uint64_t cooled0 = Monitor::instance().counters().candidates_cooled;
  REQUIRE(Served::other_ops_until(x, [&] { return Monitor::instance().counters().candidates_cooled > cooled0; }));
  const uint64_t published = lf::planner::service_counters().published;
  const uint64_t served0 = lf::matcher_counters().served;
  for (int it = 0; it < 600; ++it) {
    lf::Tensor y = chain(x);
    lf::synchronize(cpu);
    if (it % 100 == 99) {
      REQUIRE(Monitor::instance().drain());
      REQUIRE(lf::planner::wait_service_idle());
    }
  }
  CHECK(lf::planner::service_counters().published == published);  // planned anew would publish
  CHECK(plan->state == lf::PlanState::rejected);
  CHECK(lf::matcher_counters().served == served0);
}

TEST_CASE("plans: starts_with_ops compares ops, attributes and wiring") {
  auto op = [](lf::OpId id, uint64_t attrs, std::vector<lf::PlanInput> in) {
    lf::PlanOp o;
    o.op = id;
    o.attrs_hash = attrs;
    for (const lf::PlanInput& i : in) {
      o.inputs.push_back(i);
      o.in_dtypes.push_back(lf::DType::f32);
      o.in_ranks.push_back(1);
    }
    return o;
  };
  const lf::PlanInput ext0{-1, 0, 0}, ext1{-1, 0, 1}, op0{0, 0, -1};
  const std::vector<lf::PlanOp> a = {op(lf::OpId::exp, 1, {ext0}), op(lf::OpId::add, 2, {op0, ext1})};
  std::vector<lf::PlanOp> b = a;
  b.push_back(op(lf::OpId::relu, 3, {lf::PlanInput{1, 0, -1}}));
  CHECK(lf::starts_with_ops(b, a));
  CHECK(!lf::starts_with_ops(a, b));
  CHECK(!lf::starts_with_ops(a, a));  // not longer
  std::vector<lf::PlanOp> c = b;
  c[1].inputs[1] = ext0;  // other wiring
  CHECK(!lf::starts_with_ops(c, a));
  c = b;
  c[0].attrs_hash = 9;
  CHECK(!lf::starts_with_ops(c, a));
}

TEST_CASE("served windows: a shape the plan was not made with is reported call by call") {
  Served s;
  const lf::Tensor a = lf::rand_uniform({256}, 9, -1, 1, lf::DType::f32, cpu);
  const lf::Tensor b = lf::rand_uniform({96}, 10, -1, 1, lf::DType::f32, cpu);
  const std::vector<double> want_b = lftest::eager_values([&] { return chain(b); });
  const std::shared_ptr<lf::Plan> plan = s.until_served(a);
  REQUIRE(plan);
  REQUIRE(plan->shape_tuples.size() == 1);
  REQUIRE(Monitor::instance().drain());
  const auto c0 = Monitor::instance().counters();
  // The plan serves the new shape too; the monitor hears its first windows call by call
  // (once the shape mix changed the planner replaces the plan: that one knows both shapes).
  for (int it = 0; it < 60; ++it) {
    lf::Tensor y = chain(b);
    if (it % 10 == 0) REQUIRE(lftest::allclose(y.to_doubles(), want_b, 1e-5, 1e-6));
    lf::synchronize(cpu);
    if (it % 10 == 9) {
      REQUIRE(Monitor::instance().drain());
      REQUIRE(lf::planner::wait_service_idle());
    }
  }
  REQUIRE(Monitor::instance().drain());
  const auto c1 = Monitor::instance().counters();
  const uint64_t one_by_one = (c1.events - c1.replayed) - (c0.events - c0.replayed);
  CHECK(one_by_one > 0);
  // A few windows per plan and tuple, not every one.
  CHECK(one_by_one <= 2 * Monitor::kReportsOfNewShape * kChainOps);
  bool learnt = false;
  for (const auto& c : Monitor::instance().candidates())
    if (c.signature == plan->signature) learnt = c.shapes.tuples.size() == 2;
  CHECK(learnt);
  const std::shared_ptr<lf::Plan> now = Served::serving();
  REQUIRE(now);
  CHECK(now->shape_tuples.size() == 2);
}
