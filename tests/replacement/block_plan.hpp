#pragma once
// A two-op block and its hand-made plan, for the matcher's and live sampling's tests.
#include <chrono>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "livefuse/livefuse.hpp"
#include "runtime/plan.hpp"
#include "test_plan_util.hpp"

namespace matchertest {
namespace lf = livefuse;
inline const lf::Device cpu = lf::Device::cpu();

// Temporaries die as soon as the next op has them: nothing but the result escapes.
inline lf::Tensor block(const lf::Tensor& x, const lf::Tensor& w) {
  return lf::add(lf::tanh(lf::mul(x, w)), x);
}

// The recorded plan of block(x, w), in `state`, published.
inline std::shared_ptr<lftest::RecordingPlan> published_block_plan(const lf::Tensor& x,
                                                                   const lf::Tensor& w,
                                                                   lf::PlanState state) {
  auto plan = lftest::record_plan([&] { (void)block(x, w); });
  plan->state = state;
  lf::PlanTable::get().publish(plan);
  return plan;
}

// Completes block(x, w) until `plan` has its verdict: a close one samples on (up to 4 x 5 pairs),
// a rejection once more, so 160 completions reach one whatever the timing -- once no sample is
// put off for livefuse's own threads (at most kSamplePutOffMs): hence a time bound too.
inline void sample_until_decided(const lf::Plan& plan, const lf::Tensor& x, const lf::Tensor& w) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int i = 0; plan.state == lf::PlanState::sampling &&
                  (i < 200 || std::chrono::steady_clock::now() < until);
       ++i)
    (void)block(x, w).to_doubles();
}

inline std::vector<double> eager_block(const lf::Tensor& x, const lf::Tensor& w) {
  std::vector<double> xs = x.to_doubles(), ws = w.to_doubles(), out(xs.size());
  for (size_t i = 0; i < xs.size(); ++i)
    out[i] = std::tanh(float(xs[i] * ws[i % ws.size()])) + xs[i];
  return out;
}

// A plan whose samples are all that matters: the sampling tests feed them by hand.
struct TimedPlan : lf::Plan {
  bool run(lf::Window&, const std::vector<std::pair<int, int>>&) override { return false; }
  bool writes(int, int) const override { return false; }
};

}  // namespace matchertest
