#include "examples/demo_stats.hpp"

#include <cstdio>

#include "livefuse/inspect.hpp"

namespace demo {

namespace {
struct Counts {
  size_t plans = 0, active = 0;
  double served = 0;
};
// From the public snapshot, as any program would read it.
Counts counts() {
  const livefuse::Snapshot s = livefuse::inspect();
  Counts c;
  for (const livefuse::PlanInfo& p : s.plans) {
    if (p.origin != "plan_table") continue;  // planned ones only, not candidates in the queue
    ++c.plans;
    c.active += p.state == "active";
  }
  const double calls = static_cast<double>(s.counter("matcher", "calls").value_or(0));
  c.served =
      calls > 0 ? static_cast<double>(s.counter("matcher", "served").value_or(0)) / calls : 0.0;
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
