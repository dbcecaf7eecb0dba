// The samples a plan's verdict compares (runtime/matcher_window.hpp, "samples by stratum").
#include <algorithm>

#include "runtime/plan.hpp"

namespace livefuse {

void matched_samples(const Plan& p, std::vector<double>& plan_us, std::vector<double>& eager_us) {
  struct Count {
    uint64_t key = 0;
    size_t plan = 0, eager = 0, took_plan = 0, took_eager = 0;
  };
  std::vector<Count> counts;
  auto of = [&](uint64_t k) -> Count& {
    for (Count& c : counts)
      if (c.key == k) return c;
    return counts.emplace_back(Count{k});
  };
  // A sample without a stratum (set by hand) is of stratum 0.
  auto key = [](const std::vector<uint64_t>& strata, size_t i) {
    return i < strata.size() ? strata[i] : 0;
  };
  for (size_t i = 0; i < p.sampled_plan_us.size(); ++i) ++of(key(p.sampled_plan_strata, i)).plan;
  for (size_t i = 0; i < p.sampled_eager_us.size(); ++i) ++of(key(p.sampled_eager_strata, i)).eager;
  auto take = [&](const std::vector<double>& us, const std::vector<uint64_t>& strata,
                  bool plan_side, std::vector<double>& out) {
    for (size_t i = 0; i < us.size(); ++i) {
      Count& c = of(key(strata, i));
      size_t& took = plan_side ? c.took_plan : c.took_eager;
      if (took < std::min(c.plan, c.eager)) {
        out.push_back(us[i]);
        ++took;
      }
    }
  };
  take(p.sampled_plan_us, p.sampled_plan_strata, true, plan_us);
  take(p.sampled_eager_us, p.sampled_eager_strata, false, eager_us);
}

}  // namespace livefuse
