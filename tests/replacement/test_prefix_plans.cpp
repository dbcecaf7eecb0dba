// Plans that share their first ops (planner/plan_returns.hpp): the matcher completes the
// shortest plan a window matches, so the planning service keeps one of the two serving -- the
// rules alone, then the service applying them to plans it made from a program's loops.
#include <chrono>
#include <thread>

#include "planner/plan_returns.hpp"
#include "planner/service.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/plan.hpp"
#include "served_loop.hpp"
#include "test_plan_util.hpp"

namespace lf = livefuse;

namespace {
const lf::Device cpu = lf::Device::cpu();

lf::Tensor head(const lf::Tensor& x, const lf::Tensor& w) { return lf::tanh(lf::mul(x, w)); }
lf::Tensor whole(const lf::Tensor& x, const lf::Tensor& w) { return lf::add(head(x, w), x); }
}  // namespace

TEST_CASE("prefix plans: a plan that another starts with takes its windows, on one stream only") {
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({4, 8}, 21, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({8}, 22, -1, 1, lf::DType::f32, cpu);
  auto longer = lftest::record_plan([&] { (void)whole(x, w); });
  auto prefix = lftest::record_plan([&] { (void)head(x, w); });
  auto other = lftest::record_plan([&] { (void)lf::tanh(lf::add(x, w)); });
  REQUIRE(longer->ops.size() == 3);
  REQUIRE(prefix->ops.size() == 2);
  CHECK(lf::planner::takes_windows_of(*prefix, *longer));
  CHECK_FALSE(lf::planner::takes_windows_of(*longer, *prefix));  // the other way round
  CHECK_FALSE(lf::planner::takes_windows_of(*longer, *longer));  // not itself
  CHECK_FALSE(lf::planner::takes_windows_of(*other, *longer));   // other first ops
  prefix->stream = longer->stream + 1;
  CHECK_FALSE(lf::planner::takes_windows_of(*prefix, *longer));  // another stream's windows
  prefix->stream = longer->stream;
  prefix->device_kind = longer->device_kind == lf::DeviceKind::cpu ? lf::DeviceKind::cuda : lf::DeviceKind::cpu;
  CHECK_FALSE(lf::planner::takes_windows_of(*prefix, *longer));
}

TEST_CASE("prefix plans: the matcher completes the shorter plan first, which is why only one may serve") {
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({4, 8}, 23, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({8}, 24, -1, 1, lf::DType::f32, cpu);
  auto longer = lftest::record_plan([&] { (void)whole(x, w); });
  auto prefix = lftest::record_plan([&] { (void)head(x, w); });
  longer->state = lf::PlanState::active;
  prefix->state = lf::PlanState::active;
  lf::PlanTable::get().publish(longer);
  lf::PlanTable::get().publish(prefix);
  for (int i = 0; i < 4; ++i) (void)whole(x, w).to_doubles();
  CHECK(prefix->runs == 4);  // every window ended at the prefix
  CHECK(longer->runs == 0);
  lf::PlanTable::get().retire(prefix->id, "set aside (test)");
  for (int i = 0; i < 4; ++i) (void)whole(x, w).to_doubles();
  CHECK(longer->runs == 4);  // with the prefix aside, the whole sequence is one plan's
  CHECK(prefix->runs == 4);
}

TEST_CASE("prefix plans: a shorter sequence that occurs over 4x as often runs elsewhere too") {
  CHECK(lf::planner::runs_elsewhere(12 * 100, 100));  // 12 layers a token against the last + head
  CHECK(lf::planner::runs_elsewhere(401, 100));
  CHECK_FALSE(lf::planner::runs_elsewhere(400, 100));
  CHECK_FALSE(lf::planner::runs_elsewhere(48, 2948));  // a prefix cut once from a prefill
}

namespace {
// A chain and the sequence of its first three calls (the same ops, attributes and wiring).
constexpr size_t kChainOps = 5, kPrefixOps = 3;
lf::Tensor chain_head(const lf::Tensor& x) { return lf::tanh(lf::add(lf::mul(x, 1.5), 0.25)); }
lf::Tensor chain(const lf::Tensor& x) { return lf::relu(lf::mul(chain_head(x), x)); }

// The newest plan of `ops` ops in any state, or null.
std::shared_ptr<lf::Plan> newest(size_t ops) {
  std::shared_ptr<lf::Plan> best;
  for (const auto& p : lf::PlanTable::get().plans())
    if (p->ops.size() == ops && (!best || p->id > best->id)) best = p;
  return best;
}

// Runs the chain's head alone until a plan of it is published; that plan.
std::shared_ptr<lf::Plan> plan_the_head(const lf::Tensor& x) {
  const uint64_t published = lf::planner::service_counters().published;
  const bool planned = lftest::ServedLoop::run_until([&] { return chain_head(x); }, [&] {
    return lf::planner::service_counters().published > published && newest(kPrefixOps);
  });
  return planned ? newest(kPrefixOps) : nullptr;
}
}  // namespace

TEST_CASE("prefix plans: the service sets a new plan aside when an active plan it starts with serves its windows") {
  lftest::ServedLoop s;
  const lf::Tensor x = lf::rand_uniform({256}, 25, -1, 1, lf::DType::f32, cpu);
  const auto whole_loop = [&] { return chain(x); };
  const std::shared_ptr<lf::Plan> longer = s.until_served(whole_loop, kChainOps);
  REQUIRE(longer);
  for (int it = 0; it < 200; ++it) {
    lf::Tensor y = chain(x);
    lf::synchronize(cpu);
  }
  // The head alone, a few dozen times: hot, planned -- and set aside at once, since the whole
  // chain's plan served ~200 windows (a prefix occurring over 4x as often would serve too).
  const std::shared_ptr<lf::Plan> prefix = plan_the_head(x);
  REQUIRE(prefix);
  CHECK(prefix->state == lf::PlanState::retired);
  CHECK(prefix->last_reason.find("set aside: plan " + std::to_string(longer->id)) != std::string::npos);
  CHECK(longer->state == lf::PlanState::active);
  // The whole chain is still one plan's: a prefix serving would end each window after 3 calls.
  CHECK(s.until_served(whole_loop, kChainOps, 20) == longer);
}

TEST_CASE("prefix plans: a plan revived when its sequence comes back takes its windows from a prefix planned meanwhile") {
  lftest::ServedLoop s;
  const lf::Tensor x = lf::rand_uniform({256}, 26, -1, 1, lf::DType::f32, cpu);
  const auto whole_loop = [&] { return chain(x); };
  const std::shared_ptr<lf::Plan> longer = s.until_served(whole_loop, kChainOps);
  REQUIRE(longer);
  // Other ops until the chain went cold: its plan retired, revivable.
  REQUIRE(lftest::ServedLoop::other_ops_until(x, [&] { return longer->state == lf::PlanState::retired; }));
  // The head alone: planned and serving (nothing active starts with it now).
  const std::shared_ptr<lf::Plan> prefix = plan_the_head(x);
  REQUIRE(prefix);
  REQUIRE(s.until_served([&] { return chain_head(x); }, kPrefixOps) == prefix);
  // The whole chain again: the prefix serves its first three calls, the monitor still hears
  // all five, the chain's plan comes back -- and supersedes the prefix, or it would never serve.
  const uint64_t revived = lf::planner::service_counters().revived;
  REQUIRE(lftest::ServedLoop::run_until(whole_loop, [&] { return lf::planner::service_counters().revived > revived; }));
  CHECK(lf::planner::service_counters().revived == revived + 1);
  // At once: left to itself the prefix would serve until its own sequence went cold.
  CHECK(s.until_served(whole_loop, kChainOps, 16) == longer);
  CHECK(longer->state == lf::PlanState::active);
  CHECK(prefix->state == lf::PlanState::retired);
  CHECK(prefix->last_reason.find("superseded by plan " + std::to_string(longer->id)) != std::string::npos);
}

namespace {
// The service looks at the plans prefixes stepped aside for every 50 ms (service.cpp, loop):
// longer than the loops below take on the CPU.
void wait_for_restore() { std::this_thread::sleep_for(std::chrono::milliseconds(150)); }

// The whole chain's plan made by hand and published sampling, as hot as the head will be, then
// the head run alone until its own plan is published (returned): the chain's plan sees no window
// (only the head runs), so it stays sampling, and the head's plan steps aside for it.
std::shared_ptr<lf::Plan> head_aside_for_sampling(const lf::Tensor& x, std::shared_ptr<lf::Plan>* longer_out) {
  auto longer = lftest::record_plan([&] { (void)chain(x); });
  REQUIRE(longer->ops.size() == kChainOps);
  longer->state = lf::PlanState::sampling;
  longer->occurrences = 1000;
  lf::PlanTable::get().publish(longer);
  *longer_out = longer;
  const std::shared_ptr<lf::Plan> prefix = plan_the_head(x);
  REQUIRE(prefix);
  INFO(prefix->last_reason);
  CHECK(prefix->state == lf::PlanState::retired);
  CHECK(prefix->last_reason.find("set aside: plan " + std::to_string(longer->id) +
                                 ", which starts with its ops, samples on its windows") != std::string::npos);
  CHECK(longer->state == lf::PlanState::sampling);
  return prefix;
}
}  // namespace

TEST_CASE("prefix plans: a new plan steps aside while a plan it starts with samples, and comes back if that plan loses") {
  // A layer's plan that took long to make (GEMM tuning) was still waiting for its samples when
  // a plan of its first ops was published; the matcher ends a window at the shorter plan, so
  // the layer's plan never sampled (plan_returns.hpp, longer_plan_for).
  lftest::ServedLoop s;
  const lf::Tensor x = lf::rand_uniform({256}, 27, -1, 1, lf::DType::f32, cpu);
  std::shared_ptr<lf::Plan> longer;
  const std::shared_ptr<lf::Plan> prefix = head_aside_for_sampling(x, &longer);
  // The chain's plan loses: the head's plan comes back sampling (and, unsampled here, serves).
  lf::record_transition(*longer, lf::PlanState::rejected, "rejected (test)");
  wait_for_restore();
  REQUIRE(lftest::ServedLoop::run_until([&] { return chain_head(x); },
                                        [&] { return prefix->state.load() != lf::PlanState::retired; }));
  CHECK(s.until_served([&] { return chain_head(x); }, kPrefixOps) == prefix);
}

TEST_CASE("prefix plans: a plan set aside for one that goes cold without a window comes back") {
  // The longer plan was made from windows that never came back (a prefill's): it took none of
  // the prefix's windows, so its going cold gives them back.
  lftest::ServedLoop s;
  const lf::Tensor x = lf::rand_uniform({256}, 28, -1, 1, lf::DType::f32, cpu);
  std::shared_ptr<lf::Plan> longer;
  const std::shared_ptr<lf::Plan> prefix = head_aside_for_sampling(x, &longer);
  REQUIRE(longer->hits.load() == 0);
  lf::PlanTable::get().retire(longer->id, "retired: the sequence is no longer hot (test)");
  wait_for_restore();
  REQUIRE(lftest::ServedLoop::run_until([&] { return chain_head(x); },
                                        [&] { return prefix->state.load() != lf::PlanState::retired; }));
  // (Its reason now may be a later transition's: the decisions say why it came back.)
  std::vector<lf::Decision> ds;
  uint64_t dropped = 0;
  lf::inspect_detail::copy_decisions(ds, &dropped);
  bool why = false;
  for (const lf::Decision& d : ds) why |= d.reason.find("went cold without a window") != std::string::npos;
  CHECK(why);
  CHECK(s.until_served([&] { return chain_head(x); }, kPrefixOps) == prefix);
}
