// Matcher mechanics with a hand-made plan (fusion itself is tested elsewhere).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "monitor/monitor.hpp"
#include "planner/planner.hpp"
#include "runtime/background.hpp"
#include "runtime/matcher_window.hpp"
#include "runtime/plan.hpp"
#include "livefuse/detail/median.hpp"
#include "runtime/trace_sink.hpp"
#include "test_plan_util.hpp"

namespace lf = livefuse;

namespace {
const lf::Device cpu = lf::Device::cpu();

// Temporaries die as soon as the next op has them: nothing but the result escapes.
lf::Tensor block(const lf::Tensor& x, const lf::Tensor& w) {
  return lf::add(lf::tanh(lf::mul(x, w)), x);
}

// The recorded plan of block(x, w), in `state`, published.
std::shared_ptr<lftest::RecordingPlan> published_block_plan(const lf::Tensor& x,
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
void sample_until_decided(const lf::Plan& plan, const lf::Tensor& x, const lf::Tensor& w) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int i = 0; plan.state == lf::PlanState::sampling && (i < 200 || std::chrono::steady_clock::now() < until); ++i)
    (void)block(x, w).to_doubles();
}

std::vector<double> eager_block(const lf::Tensor& x, const lf::Tensor& w) {
  std::vector<double> xs = x.to_doubles(), ws = w.to_doubles(), out(xs.size());
  for (size_t i = 0; i < xs.size(); ++i)
    out[i] = std::tanh(float(xs[i] * ws[i % ws.size()])) + xs[i];
  return out;
}
}  // namespace

TEST_CASE("matcher: a matching sequence is deferred, then served by the plan") {
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({4, 8}, 1, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({8}, 2, -1, 1, lf::DType::f32, cpu);
  auto plan = lftest::record_plan([&] { (void)block(x, w); });
  REQUIRE(plan->ops.size() == 3);
  CHECK(plan->n_external == 2);
  plan->state = lf::PlanState::active;
  lf::PlanTable::get().publish(plan);
  const uint64_t served0 = lf::matcher_counters().served;
  for (int it = 0; it < 3; ++it) {
    lf::Tensor x2 = lf::rand_uniform({4, 8}, 10 + it, -1, 1, lf::DType::f32, cpu);
    lf::Tensor y = block(x2, w);
    CHECK(lftest::allclose(y.to_doubles(), eager_block(x2, w), 1e-5, 1e-6));
  }
  CHECK(plan->runs == 3);
  CHECK(plan->hits == 3);
  CHECK(lf::matcher_counters().served - served0 == 9);
}

TEST_CASE("matcher: divergence and sync points flush deferred calls eagerly, in order") {
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({16}, 3, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({16}, 4, -1, 1, lf::DType::f32, cpu);
  auto plan = published_block_plan(x, w, lf::PlanState::active);

  // Diverges after two ops: mul, tanh, then sub instead of add.
  const uint64_t div0 = lf::matcher_counters().flush_divergent;
  lf::Tensor a = lf::mul(x, w);
  lf::Tensor b = lf::tanh(a);
  CHECK(b.impl()->pending != nullptr);
  lf::Tensor c = lf::sub(b, x);
  CHECK(lf::matcher_counters().flush_divergent - div0 == 1);
  std::vector<double> xs = x.to_doubles(), ws = w.to_doubles(), cs = c.to_doubles(),
                      as = a.to_doubles();
  for (size_t i = 0; i < xs.size(); ++i) {
    CHECK(as[i] == doctest::Approx(float(xs[i] * ws[i])));
    CHECK(cs[i] == doctest::Approx(std::tanh(float(xs[i] * ws[i])) - xs[i]).epsilon(1e-5));
  }
  CHECK(plan->runs == 0);

  // data_ptr() in the middle of the window is a sync point.
  const uint64_t sync0 = lf::matcher_counters().flush_sync;
  lf::Tensor a2 = lf::mul(x, w);
  CHECK(a2.impl()->pending != nullptr);
  const float* p = static_cast<const float*>(a2.data_ptr());
  CHECK(p[3] == doctest::Approx(float(xs[3] * ws[3])));
  CHECK(lf::matcher_counters().flush_sync - sync0 == 1);
  CHECK(a2.impl()->pending == nullptr);
}

TEST_CASE("matcher: an escaping intermediate the plan does not write is never lost") {
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({32}, 5, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({32}, 6, -1, 1, lf::DType::f32, cpu);
  auto plan = lftest::record_plan([&] { (void)block(x, w); });
  plan->state = lf::PlanState::active;
  plan->hidden_op = 1;  // the tanh output lives only in "registers"
  lf::PlanTable::get().publish(plan);
  const uint64_t esc0 = lf::matcher_counters().flush_escaped;
  // Held by the user: must be served eagerly.
  lf::Tensor a = lf::mul(x, w);
  lf::Tensor b = lf::tanh(a);
  lf::Tensor c = lf::add(b, x);
  lf::synchronize(cpu);  // plans run at the next call or sync point, once temporaries died
  CHECK(lf::matcher_counters().flush_escaped - esc0 == 1);
  CHECK(plan->runs == 0);
  std::vector<double> bs = b.to_doubles(), as = a.to_doubles();
  for (size_t i = 0; i < bs.size(); ++i) CHECK(bs[i] == doctest::Approx(std::tanh(float(as[i]))));
  // Not held: served by the plan.
  lf::Tensor y = block(x, w);
  lf::synchronize(cpu);
  CHECK(plan->runs == 1);
  CHECK(lftest::allclose(y.to_doubles(), eager_block(x, w), 1e-5, 1e-6));
}

// complete() counts the window's own references to each output in one pass (by the outputs'
// ids, or, past Window::kIdBlock outputs, by a scan per output): a value read twice inside the
// window is still the window's alone, and one the program holds escapes in a long window too.
TEST_CASE("matcher: an intermediate is held only when the program holds it, read twice or in a long window") {
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({16}, 11, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({16}, 12, -1, 1, lf::DType::f32, cpu);
  auto twice = [&] {
    lf::Tensor b = lf::tanh(lf::mul(x, w));
    return lf::add(b, b);
  };
  auto plan = lftest::record_plan([&] { (void)twice(); });
  plan->state = lf::PlanState::active;
  plan->hidden_op = 1;  // the tanh output, read twice by the add
  lf::PlanTable::get().publish(plan);
  const uint64_t esc0 = lf::matcher_counters().flush_escaped;
  lf::Tensor y = twice();
  lf::synchronize(cpu);
  CHECK(plan->runs == 1);
  CHECK(lf::matcher_counters().flush_escaped == esc0);
  const std::vector<double> expect = lftest::eager_values(twice);
  CHECK(lftest::allclose(y.to_doubles(), expect, 1e-5, 1e-6));
  lf::PlanTable::get().clear_for_testing();

  constexpr int kLong = static_cast<int>(lf::Window::kIdBlock) + 44;
  auto chain = [&](lf::Tensor* keep) {
    lf::Tensor v = x;
    for (int i = 0; i < kLong; ++i) {
      v = i % 2 ? lf::tanh(v) : lf::mul(v, w);
      if (keep && i == kLong - 20) *keep = v;
    }
    return v;
  };
  auto long_plan = lftest::record_plan([&] { (void)chain(nullptr); });
  long_plan->state = lf::PlanState::active;
  long_plan->hidden_op = kLong - 20;  // past the id block
  lf::PlanTable::get().publish(long_plan);
  lf::Tensor kept;
  lf::Tensor z = chain(&kept);
  lf::synchronize(cpu);
  CHECK(long_plan->runs == 0);
  CHECK(lf::matcher_counters().flush_escaped - esc0 == 1);
  lf::Tensor z2 = chain(nullptr);
  lf::synchronize(cpu);
  CHECK(long_plan->runs == 1);
  const std::vector<double> long_expect = lftest::eager_values([&] { return chain(nullptr); });
  CHECK(lftest::allclose(z.to_doubles(), long_expect, 1e-5, 1e-6));
  CHECK(lftest::allclose(z2.to_doubles(), long_expect, 1e-5, 1e-6));
  CHECK(kept.defined());
  CHECK(!kept.impl()->pending);
}

TEST_CASE("matcher: a failing plan is marked failed and the window runs eagerly") {
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({8}, 7, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({8}, 8, -1, 1, lf::DType::f32, cpu);
  auto plan = lftest::record_plan([&] { (void)block(x, w); });
  plan->state = lf::PlanState::active;
  plan->fail_next = true;
  lf::PlanTable::get().publish(plan);
  lf::Tensor y = block(x, w);
  lf::synchronize(cpu);
  CHECK(plan->state == lf::PlanState::failed);
  CHECK(plan->last_reason.find("injected failure") != std::string::npos);
  CHECK(lftest::allclose(y.to_doubles(), eager_block(x, w), 1e-5, 1e-6));
  lf::Tensor y2 = block(x, w);  // a failed plan no longer matches
  CHECK(plan->runs == 1);
  CHECK(lftest::allclose(y2.to_doubles(), eager_block(x, w), 1e-5, 1e-6));
}

TEST_CASE("matcher: an error in the middle of a deferred window loses nothing") {
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({8}, 9, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({8}, 10, -1, 1, lf::DType::f32, cpu);
  auto plan = published_block_plan(x, w, lf::PlanState::active);
  lf::Tensor a = lf::mul(x, w);
  lf::Tensor b = lf::tanh(a);
  CHECK_THROWS_AS((void)lf::add(b, lf::rand_uniform({3}, 1, -1, 1, lf::DType::f32, cpu)),
                  lf::Error);
  lf::Tensor c = lf::add(b, x);  // the window goes on after the bad call
  lf::synchronize(cpu);
  CHECK(plan->runs == 1);
  CHECK(lftest::allclose(c.to_doubles(), eager_block(x, w), 1e-5, 1e-6));
  std::vector<double> as = a.to_doubles(), xs = x.to_doubles(), ws = w.to_doubles();
  for (size_t i = 0; i < as.size(); ++i) CHECK(as[i] == doctest::Approx(float(xs[i] * ws[i])));
}

TEST_CASE("matcher: live sampling keeps a faster plan and rejects a slower one with numbers") {
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({64}, 11, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({64}, 12, -1, 1, lf::DType::f32, cpu);
  auto plan = published_block_plan(x, w, lf::PlanState::sampling);
  sample_until_decided(*plan, x, w);
  // The recording plan does the same work as eager, so either verdict is possible, but one
  // must have been reached with the timings in the reason.
  CHECK(plan->state != lf::PlanState::sampling);
  CHECK(plan->last_reason.find("sampled: plan") != std::string::npos);
  CHECK(plan->sampled_plan_us.size() >= 5);
  CHECK(plan->sampled_eager_us.size() >= 5);
}

TEST_CASE("matcher: a plan whose every run is cold still gets its sampled verdict") {
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({64}, 13, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({64}, 14, -1, 1, lf::DType::f32, cpu);
  auto plan = published_block_plan(x, w, lf::PlanState::sampling);
  plan->always_cold = true;
  const uint64_t cold0 = lf::matcher_counters().samples_cold;
  sample_until_decided(*plan, x, w);
  // Cold runs go untimed only up to kColdUntimedAtMost; after that they are the plan's samples.
  CHECK(plan->state != lf::PlanState::sampling);
  CHECK(plan->cold_untimed.load() > lf::matcher::detail::kColdUntimedAtMost);
  CHECK(lf::matcher_counters().samples_cold - cold0 == uint64_t{lf::matcher::detail::kColdUntimedAtMost});
  CHECK(plan->last_reason.find("sampled: plan") != std::string::npos);
}

TEST_CASE("matcher: a close sampled verdict samples on; a clear one is taken at five pairs, a rejection after a second round") {
  namespace md = lf::matcher::detail;
  struct Timed : lf::Plan {  // only its samples matter here
    bool run(lf::Window&, const std::vector<std::pair<int, int>>&) override { return false; }
    bool writes(int, int) const override { return false; }
  };
  auto sampled = [](double plan_us, double eager_us, size_t pairs) {
    auto p = std::make_shared<Timed>();
    p->state = lf::PlanState::sampling;
    for (size_t i = 0; i < pairs && p->state == lf::PlanState::sampling; ++i) {
      md::record_sample(*p, true, plan_us);
      md::record_sample(*p, false, eager_us);
    }
    return p;
  };
  // Clear either way: decided at the fifth pair, as before.
  auto fast = sampled(50, 100, 5);
  CHECK(fast->state == lf::PlanState::active);
  CHECK(fast->last_reason.find("median of 5)") != std::string::npos);
  auto slow = sampled(120, 100, 5);
  CHECK(slow->state == lf::PlanState::sampling);  // a first rejection samples once more
  CHECK(slow->last_reason.find("sampling once more") != std::string::npos);
  CHECK(slow->sampled_plan_us.empty());
  for (int i = 0; i < 5; ++i) {
    md::record_sample(*slow, true, 120);
    md::record_sample(*slow, false, 100);
  }
  CHECK(slow->state == lf::PlanState::rejected);
  CHECK(slow->last_reason.find("median of 5)") != std::string::npos);
  // Slow in its first round (a passing state of the process), fast in its second: kept.
  auto second = sampled(103.3, 87.3, 5);
  for (int i = 0; i < 5; ++i) {
    md::record_sample(*second, true, 58.7);
    md::record_sample(*second, false, 74.7);
  }
  CHECK(second->state == lf::PlanState::active);
  // 101.6 against 106.5 (a GPT-2 layer's sample that once decided a process): not yet.
  auto close = sampled(101.6, 106.5, 5);
  CHECK(close->state == lf::PlanState::sampling);
  // The further samples say the plan is faster: kept as soon as the median of them all is clear
  // (the eleventh pair: six of eleven plan samples at 80 us).
  for (int i = 0; i < 15 && close->state == lf::PlanState::sampling; ++i) {
    md::record_sample(*close, true, 80);
    md::record_sample(*close, false, 106.5);
  }
  INFO(close->last_reason);
  CHECK(close->state == lf::PlanState::active);
  CHECK(close->last_reason.find("median of 11, sampled on: close") != std::string::npos);
  // Close all the way: decided at twenty pairs by the margin (twice), never sampled forever.
  auto tie = sampled(100, 100, 100);
  CHECK(tie->state == lf::PlanState::rejected);
  CHECK(tie->sampled_plan_us.size() == 20);
}

TEST_CASE("matcher: plan and eager take turns within each stratum, whatever the loop's period") {
  namespace md = lf::matcher::detail;
  struct Timed : lf::Plan {  // only its samples matter here
    bool run(lf::Window&, const std::vector<std::pair<int, int>>&) override { return false; }
    bool writes(int, int) const override { return false; }
  };
  // A loop of `period` layers, one stratum each, whose windows cost 50 or 100 us by layer
  // parity -- on either side: the plan is no faster. Taking turns overall, the plan's side of
  // a 2- or 4-layer loop got every cheap window and looked twice as fast (kept at 50 vs 100).
  for (const uint64_t period : {1, 2, 3, 4, 5, 12}) {
    CAPTURE(period);
    auto p = std::make_shared<Timed>();
    p->state = lf::PlanState::sampling;
    std::vector<int> plan_runs(period), eager_runs(period);
    for (uint64_t i = 0; i < 2000 && p->state == lf::PlanState::sampling; ++i) {
      const uint64_t layer = i % period;
      uint64_t stratum = 1000 + layer;
      const bool via_plan = md::sample_choice(*p, stratum);
      (via_plan ? plan_runs : eager_runs)[layer] += 1;
      md::record_sample(*p, via_plan, layer % 2 ? 100.0 : 50.0, stratum);
    }
    INFO(p->last_reason);
    CHECK(p->state == lf::PlanState::rejected);  // not 5% faster: no faster at all
    for (uint64_t l = 0; l < period; ++l) CHECK(std::abs(plan_runs[l] - eager_runs[l]) <= 1);
  }
  // A real difference still shows through the strata: the plan 20% faster on every layer.
  auto fast = std::make_shared<Timed>();
  fast->state = lf::PlanState::sampling;
  for (uint64_t i = 0; i < 2000 && fast->state == lf::PlanState::sampling; ++i) {
    uint64_t stratum = i % 4;
    const bool via_plan = md::sample_choice(*fast, stratum);
    md::record_sample(*fast, via_plan, (i % 2 ? 100.0 : 50.0) * (via_plan ? 0.8 : 1.0), stratum);
  }
  CHECK(fast->state == lf::PlanState::active);
  // A new stratum every window (a parameter fed by a fresh tensor each time): none is ever
  // matched, and once the table is full the windows beyond it, pooled, bring the verdict.
  auto fresh = std::make_shared<Timed>();
  fresh->state = lf::PlanState::sampling;
  uint64_t windows = 0;
  for (; windows < 2000 && fresh->state == lf::PlanState::sampling; ++windows) {
    uint64_t stratum = 5000 + windows;
    const bool via_plan = md::sample_choice(*fresh, stratum);
    md::record_sample(*fresh, via_plan, via_plan ? 50.0 : 100.0, stratum);
  }
  CHECK(fresh->state == lf::PlanState::active);
  CHECK(windows <= md::kMaxSampleStrata + 2 * lf::matcher::detail::sample_pairs());
  // Samples that cannot be matched (a stratum seen once) do not enter the medians.
  auto odd = std::make_shared<Timed>();
  odd->state = lf::PlanState::sampling;
  md::record_sample(*odd, true, 1.0, 7);  // one plan run of a stratum never seen again
  for (int i = 0; i < 5; ++i) {
    md::record_sample(*odd, true, 100, 0);
    md::record_sample(*odd, false, 100, 0);
  }
  CHECK(odd->state == lf::PlanState::sampling);  // a tie: close, sampled on
  CHECK(odd->sampled_plan_us.size() == 6);
}

TEST_CASE("matcher: a plan serving two layers is timed on each of them, through the plan and eagerly") {
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({4, 16}, 21, -1, 1, lf::DType::f32, cpu);
  const lf::Tensor w[2] = {lf::rand_uniform({16, 16}, 22, -1, 1, lf::DType::f32, cpu),
                           lf::rand_uniform({16, 16}, 23, -1, 1, lf::DType::f32, cpu)};
  auto layer = [&](const lf::Tensor& h, const lf::Tensor& wl) { return lf::tanh(lf::linear(h, wl)); };
  auto plan = lftest::record_plan([&] { (void)layer(x, w[0]); });
  plan->state = lf::PlanState::sampling;
  lf::PlanTable::get().publish(plan);
  // Layer 0, layer 1, layer 0, ...: taking turns overall, the plan's side would only ever see
  // layer 0's weights.
  for (int i = 0; i < 400 && plan->state == lf::PlanState::sampling; ++i)
    (void)layer(x, w[i % 2]).to_doubles();
  REQUIRE(plan->state != lf::PlanState::sampling);
  std::lock_guard<std::mutex> g(plan->sample_mu);
  auto strata = [](const std::vector<uint64_t>& v) {
    std::vector<uint64_t> u(v);
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    return u;
  };
  CHECK(strata(plan->sampled_plan_strata).size() == 2);
  CHECK(strata(plan->sampled_eager_strata) == strata(plan->sampled_plan_strata));
}

TEST_CASE("matcher: a rejected plan is sampled again after kRetryWindows of its windows, at most kMaxRetries times") {
  namespace md = lf::matcher::detail;
  struct Timed : lf::Plan {  // only its samples matter here
    bool run(lf::Window&, const std::vector<std::pair<int, int>>&) override { return false; }
    bool writes(int, int) const override { return false; }
  };
  auto pairs = [](lf::Plan& p, double plan_us, double eager_us, size_t n) {
    for (size_t i = 0; i < n && p.state == lf::PlanState::sampling; ++i) {
      md::record_sample(p, true, plan_us);
      md::record_sample(p, false, eager_us);
    }
  };
  // Windows opened until the retry: false before the last one.
  auto open_until_retry = [](lf::Plan& p) {
    int opened = 0;
    while (!md::retry_rejected(p) && opened < 100000) ++opened;
    return opened + 1;
  };
  auto p = std::make_shared<Timed>();
  p->state = lf::PlanState::sampling;
  pairs(*p, 120, 100, 10);  // two rounds, both lost
  REQUIRE(p->state == lf::PlanState::rejected);
  CHECK(p->last_reason.find("sampled again after 256 more windows") != std::string::npos);
  CHECK(open_until_retry(*p) == md::kRetryWindows);
  CHECK(p->state == lf::PlanState::sampling);
  CHECK(p->last_reason.find("sampling again (retry 1 of 2)") != std::string::npos);
  CHECK(p->sampled_plan_us.empty());
  pairs(*p, 120, 100, 5);  // a retry's loss is its verdict: no second round
  REQUIRE(p->state == lf::PlanState::rejected);
  CHECK(open_until_retry(*p) == 4 * md::kRetryWindows);
  pairs(*p, 120, 100, 5);
  REQUIRE(p->state == lf::PlanState::rejected);
  CHECK(p->last_reason.find("sampled again") == std::string::npos);  // no retry left
  CHECK(p->retry_countdown == 0);
  for (int i = 0; i < 100; ++i) CHECK_FALSE(md::retry_rejected(*p));
  // Lost early in the process, fast when sampled again: kept.
  auto q = std::make_shared<Timed>();
  q->state = lf::PlanState::sampling;
  pairs(*q, 300, 250, 10);
  REQUIRE(q->state == lf::PlanState::rejected);
  open_until_retry(*q);
  pairs(*q, 106, 250, 5);
  CHECK(q->state == lf::PlanState::active);
}

TEST_CASE("matcher: a rejected plan's retry comes from the windows its first op opens") {
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({64}, 31, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({64}, 32, -1, 1, lf::DType::f32, cpu);
  auto plan = published_block_plan(x, w, lf::PlanState::rejected);
  plan->retry_countdown = 3;
  for (int i = 0; i < 2; ++i) CHECK(lftest::allclose(block(x, w).to_doubles(), eager_block(x, w), 1e-5, 1e-6));
  CHECK(plan->state == lf::PlanState::rejected);
  CHECK(plan->retry_countdown == 1);
  CHECK(plan->runs == 0);
  // The third window is the retry's first: the plan samples (and serves) again.
  CHECK(lftest::allclose(block(x, w).to_doubles(), eager_block(x, w), 1e-5, 1e-6));
  CHECK(plan->state == lf::PlanState::sampling);
  sample_until_decided(*plan, x, w);
  CHECK(plan->state != lf::PlanState::sampling);
  CHECK(plan->last_reason.find("sampled: plan") != std::string::npos);
  CHECK(plan->sample_retries == 1);
  CHECK(lftest::allclose(block(x, w).to_doubles(), eager_block(x, w), 1e-5, 1e-6));
}

TEST_CASE("matcher: samples wait while livefuse's threads work, for at most kSamplePutOffMs") {
  namespace md = lf::matcher::detail;
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({64}, 21, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({64}, 22, -1, 1, lf::DType::f32, cpu);
  auto plan = published_block_plan(x, w, lf::PlanState::sampling);
  // Nothing else at work in this fixture: no sample is put off.
  REQUIRE(!lf::BackgroundWork::busy());
  CHECK(!md::put_sample_off(*plan));
  const auto start = std::chrono::steady_clock::now();
  {
    const lf::BackgroundWork compiling;  // a planning round or a compile, as far as sampling sees
    const uint64_t hits = plan->hits;
    for (int i = 0; i < 20; ++i) (void)block(x, w).to_doubles();
    if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(md::kSamplePutOffMs)) {
      // Served through the plan, unsampled.
      CHECK(plan->hits == hits + 20);
      CHECK(plan->sampled_plan_us.empty());
      CHECK(plan->sampled_eager_us.empty());
      CHECK(plan->state == lf::PlanState::sampling);
    }
    // The wait is bounded: past kSamplePutOffMs the plan samples although the work goes on.
    std::this_thread::sleep_until(start + std::chrono::milliseconds(md::kSamplePutOffMs + 20));
    CHECK(!md::put_sample_off(*plan));
    sample_until_decided(*plan, x, w);
  }
  CHECK(plan->state != lf::PlanState::sampling);
  CHECK(plan->sampled_plan_us.size() >= 5);
}

namespace {
// A trace sink as slow as a monitor that has not gone quiet can be, taken to the extreme: each
// report waits 300 us.
struct SlowSink : lf::TraceSink {
  static void wait() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(300);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  void on_call(const lf::OpCall&, std::span<const lf::Tensor>, uint32_t) override { wait(); }
  void on_served(const lf::Plan&, const lf::Window&) override { wait(); }
  void on_release(lf::ValueId) override {}
  void on_sync(uint32_t) override {}
};
}  // namespace

namespace {
// What the monitor hears, in order: "call <op> <out id>" and "release <id>".
struct RecordingSink : lf::TraceSink {
  std::vector<std::string> events;
  void on_call(const lf::OpCall& c, std::span<const lf::Tensor> outs, uint32_t) override {
    events.push_back(std::string("call ") + std::string(lf::op_name(c.op)) + " " +
                     std::to_string(outs.empty() ? 0 : outs[0].impl()->id));
  }
  void on_release(lf::ValueId id) override { events.push_back("release " + std::to_string(id)); }
  void on_sync(uint32_t) override {}
  size_t at(const std::string& e) const {
    return static_cast<size_t>(std::find(events.begin(), events.end(), e) - events.begin());
  }
};
}  // namespace

TEST_CASE("matcher: a flushed window releases each temporary after its last use, not at the flush's end") {
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({16}, 31, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({16}, 32, -1, 1, lf::DType::f32, cpu);
  auto four = [&] { return lf::neg(lf::add(lf::tanh(lf::mul(x, w)), x)); };
  auto plan = lftest::record_plan([&] { (void)four(); });
  plan->state = lf::PlanState::active;
  lf::PlanTable::get().publish(plan);
  RecordingSink sink;
  lf::TraceSink* prev = lf::trace_sink();
  lf::set_trace_sink(&sink);
  lf::ValueId a_id = 0, b_id = 0;
  lf::Tensor c;
  {
    lf::Tensor b;
    {
      const lf::Tensor a = lf::mul(x, w);  // deferred: the window follows the plan
      a_id = a.impl()->id;
      b = lf::tanh(a);
      b_id = b.impl()->id;
    }
    c = lf::add(b, x);  // a died in the program after tanh had it
  }
  const lf::Tensor d = lf::exp(c);  // not the plan's neg: the window diverges and is flushed
  lf::set_trace_sink(prev);
  const lf::ValueId c_id = c.impl()->id;
  INFO([&] {
    std::string s;
    for (const std::string& e : sink.events) s += e + "\n";
    return s;
  }());
  CHECK(plan->runs == 0);
  // The flush reports mul, tanh, add in order; a (last read by tanh) is released before add's
  // report, b (last read by add) after it; c, which the program holds, is not released.
  const size_t tanh_at = sink.at("call tanh " + std::to_string(b_id));
  const size_t add_at = sink.at("call add " + std::to_string(c_id));
  REQUIRE(add_at < sink.events.size());
  REQUIRE(tanh_at < add_at);
  const size_t a_rel = sink.at("release " + std::to_string(a_id));
  const size_t b_rel = sink.at("release " + std::to_string(b_id));
  CHECK(a_rel > tanh_at);
  CHECK(a_rel < add_at);
  CHECK(b_rel > add_at);
  CHECK(sink.at("release " + std::to_string(c_id)) == sink.events.size());
  CHECK(lftest::allclose(d.to_doubles(), lf::exp(lf::add(lf::tanh(lf::mul(x, w)), x)).to_doubles(), 1e-6, 1e-6));
}

TEST_CASE("matcher: a CPU sample leaves out the monitor's reports, which a flushed window pays per call") {
  // The recording plan does eager's work (and its window's deferral): with the reports counted,
  // the eager side paid three of them and the plan one, and the plan looked 3x faster.
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({256}, 17, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({256}, 18, -1, 1, lf::DType::f32, cpu);
  auto plan = published_block_plan(x, w, lf::PlanState::sampling);
  SlowSink slow;
  lf::TraceSink* prev = lf::trace_sink();
  lf::set_trace_sink(&slow);
  sample_until_decided(*plan, x, w);
  lf::set_trace_sink(prev);
  INFO(plan->last_reason);
  REQUIRE(plan->sampled_plan_us.size() >= 5);
  REQUIRE(plan->sampled_eager_us.size() >= 5);
  // Without the reports each side is the three ops' work (microseconds here), not 900 us
  // against 300: the verdict, whichever it is, is not the reports' (a few microseconds of
  // bookkeeping either way can still decide it, so the state is not asserted).
  const double eager = lf::detail::median(plan->sampled_eager_us);
  const double fused = lf::detail::median(plan->sampled_plan_us);
  CHECK(eager < 300);
  CHECK(std::abs(eager - fused) < 300);
  CHECK(plan->state != lf::PlanState::sampling);
}

TEST_CASE("matcher: LIVEFUSE=off never defers") {
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({8}, 13, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({8}, 14, -1, 1, lf::DType::f32, cpu);
  auto plan = published_block_plan(x, w, lf::PlanState::active);
  lf::Config c = lf::config();
  c.mode = lf::Mode::off;
  lf::set_config_for_testing(c);
  lf::Tensor a = lf::mul(x, w);
  CHECK(a.impl()->pending == nullptr);
  (void)block(x, w);
  CHECK(plan->runs == 0);
}

TEST_CASE("matcher: a deferred value handed to the planner's bind_values is flushed first") {
  // Tools and tests drive plans directly (bind_values + run_plan) with tensors from the API; one
  // of them may be a window's pending output, which the steps would read without storage.
  lftest::HandMadePlans f;
  lf::Tensor x = lf::rand_uniform({4, 8}, 15, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({8}, 16, -1, 1, lf::DType::f32, cpu);
  auto plan = published_block_plan(x, w, lf::PlanState::active);
  lf::Tensor a = lf::mul(x, w);
  REQUIRE(a.impl()->pending != nullptr);
  lf::planner::SegmentBuilder b;
  const lf::planner::ValueRef in = b.input({4, 8});
  b.output(b.add(lf::OpId::relu, {in}));
  const lf::planner::PlannedSegment p =
      lf::planner::plan_segment(b.build(), lf::planner::default_planner_options(cpu));
  const std::vector<lf::Tensor> values = lf::planner::bind_values(p, {a});
  CHECK(a.impl()->pending == nullptr);
  lf::planner::run_plan(p, values);
  const std::vector<double> as = a.to_doubles(), got = values[p.segment.value_id(p.segment.outputs[0])].to_doubles();
  REQUIRE(got.size() == as.size());
  for (size_t i = 0; i < as.size(); ++i) CHECK(got[i] == (as[i] > 0 ? as[i] : 0.0));
}
