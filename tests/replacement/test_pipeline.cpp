// The whole pipeline on the CPU: eager calls -> monitor -> planner -> PlanTable -> matcher.
#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "runtime/plan.hpp"
#include "test_util.hpp"

namespace lf = livefuse;

namespace {
lf::Tensor layer(const lf::Tensor& x, const lf::Tensor& w, const lf::Tensor& b,
                 const lf::Tensor& g) {
  lf::Tensor h = lf::add(lf::linear(x, w, b), x);
  return lf::gelu(lf::layer_norm(h, g, b, 1e-5));
}
}  // namespace

TEST_CASE("pipeline: a repeating layer becomes a plan that serves calls with eager results") {
  lf::Config c = lf::config();
  c.mode = lf::Mode::on;
  lf::set_config_for_testing(c);
  const lf::Device cpu = lf::Device::cpu();
  lf::Tensor x = lf::rand_uniform({16, 64}, 1, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({64, 64}, 2, -0.2, 0.2, lf::DType::f32, cpu);
  lf::Tensor b = lf::rand_uniform({64}, 3, -0.1, 0.1, lf::DType::f32, cpu);
  lf::Tensor g = lf::rand_uniform({64}, 4, 0.5, 1.5, lf::DType::f32, cpu);
  auto reference = [&] {
    lf::Config off = lf::config();
    off.mode = lf::Mode::off;
    lf::set_config_for_testing(off);
    lf::Tensor h = x;
    for (int l = 0; l < 4; ++l) h = layer(h, w, b, g);
    std::vector<double> r = h.to_doubles();
    lf::set_config_for_testing(c);
    return r;
  }();
  auto& mon = lf::monitor::Monitor::instance();
  for (int it = 0; it < 30; ++it) {
    lf::Tensor h = x;
    for (int l = 0; l < 4; ++l) h = layer(h, w, b, g);
    REQUIRE(lftest::allclose(h.to_doubles(), reference, 1e-4, 1e-5));
    if (it == 3) {
      CHECK(mon.drain());
      CHECK(lf::planner::wait_service_idle());
    }
  }
  auto snap = lf::PlanTable::get().snapshot();
  MESSAGE("plans: " << snap->plans.size() << ", candidates: " << mon.candidates().size()
                    << ", served: " << lf::matcher_counters().served);
  for (const auto& p : snap->plans)
    MESSAGE(p->name << " state=" << lf::plan_state_name(p->state) << " hits=" << p->hits << " "
                    << p->last_reason);
  REQUIRE(!snap->plans.empty());
  CHECK(lf::matcher_counters().served > 0);
}
