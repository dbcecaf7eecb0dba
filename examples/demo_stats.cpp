#include "examples/demo_stats.hpp"

#include <cstdio>

#include "runtime/plan.hpp"

namespace demo {

namespace {
struct Counts {
  size_t plans = 0, active = 0;
  double served = 0;
};
Counts counts() {
  Counts c;
  auto snap = livefuse::PlanTable::get().snapshot();
  for (const auto& p : snap->plans) {
    ++c.plans;
    c.active += p->state.load() == livefuse::PlanState::active;
  }
  const auto& m = livefuse::matcher_counters();
  const double calls = static_cast<double>(m.calls.load());
  c.served = calls > 0 ? static_cast<double>(m.served.load()) / calls : 0.0;
  return c;
}
}  // namespace

std::string progress_note() {
  const Counts c = counts();
  char buf[96];
  std::snprintf(buf, sizeof buf, "plans=%zu active=%zu served=%.0f%%", c.plans, c.active,
                100.0 * c.served);
  return buf;
}

std::string summary_fields() {
  const Counts c = counts();
  char buf[96];
  std::snprintf(buf, sizeof buf, "plans=%zu active=%zu served_by_plans=%.3f", c.plans, c.active,
                c.served);
  return buf;
}

}  // namespace demo
