// Plans that share their first ops (planner/plan_returns.hpp): the matcher completes the
// shortest plan a window matches, so the planning service keeps one of the two serving.
#include "planner/plan_returns.hpp"
#include "runtime/plan.hpp"
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
