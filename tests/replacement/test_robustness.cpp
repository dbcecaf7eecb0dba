// Failures at every step, LIVEFUSE_VERIFY, varying shapes, threads on streams, LIVEFUSE_FUSION=0:
// each must leave every observable value equal to eager execution.
#include <thread>

#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "runtime/faults.hpp"
#include "runtime/plan.hpp"
#include "test_plan_util.hpp"

namespace lf = livefuse;

namespace {
const lf::Device cpu = lf::Device::cpu();

lf::Tensor body(const lf::Tensor& x, const lf::Tensor& g) {
  return lf::gelu(lf::layer_norm(lf::add(lf::mul(x, 2.0), x), g, lf::Tensor(), 1e-5));
}

void fresh(const lf::Config& c) {
  lftest::reset_pipeline(&c);
  lf::set_config_for_testing(c);
}

lf::Config base() {
  lf::Config c = lftest::unsettled(lf::config());  // short loops (fresh_unsampled says why)
  c.mode = lf::Mode::on;
  c.sample = 0;
  c.verify = 0;
  c.fusion = true;
  return c;
}

std::vector<double> eager_result(const lf::Tensor& x, const lf::Tensor& g) {
  return lftest::eager_values([&] {
    lf::Tensor h = x;
    for (int l = 0; l < 3; ++l) h = body(h, g);
    return h;
  });
}

// Runs the loop; every iteration must equal eager. Returns calls served by plans.
uint64_t loop(const lf::Tensor& x, const lf::Tensor& g, int iters = 24) {
  const std::vector<double> want = eager_result(x, g);
  const uint64_t s0 = lf::matcher_counters().served;
  for (int it = 0; it < iters; ++it) {
    lf::Tensor h = x;
    for (int l = 0; l < 3; ++l) h = body(h, g);
    REQUIRE(lftest::allclose(h.to_doubles(), want, 1e-5, 1e-6));
    if (it == 6) {
      lf::monitor::Monitor::instance().drain();
      lf::planner::wait_service_idle();
    }
  }
  return lf::matcher_counters().served - s0;
}

const lf::Tensor& X() {
  static const lf::Tensor x = lf::rand_uniform({8, 48}, 1, -1, 1, lf::DType::f32, cpu);
  return x;
}
const lf::Tensor& G() {
  static const lf::Tensor g = lf::rand_uniform({48}, 2, 0.5, 1.5, lf::DType::f32, cpu);
  return g;
}
}  // namespace

TEST_CASE("faults: a failure while planning or compiling leaves eager serving, visibly") {
  const lf::Config saved = lf::config();
  for (lf::faults::Point p : {lf::faults::Point::plan, lf::faults::Point::compile}) {
    CAPTURE(lf::faults::point_name(p));
    fresh(base());
    const uint64_t failed0 = lf::planner::service_counters().failed;
    lf::faults::inject(p, 1000);  // every candidate fails at this step
    loop(X(), G());
    CHECK(lf::planner::service_counters().failed > failed0);
    CHECK(lf::PlanTable::get().snapshot()->plans.empty());
    while (lf::faults::fire(p)) {
    }
  }
  lf::set_config_for_testing(saved);
}

TEST_CASE("faults: a failure while running marks the plan failed and the window runs eagerly") {
  const lf::Config saved = lf::config();
  fresh(base());
  lf::faults::inject(lf::faults::Point::run, 1);
  loop(X(), G());
  bool failed = false;
  for (const auto& p : lf::PlanTable::get().plans())
    failed |= p->state == lf::PlanState::failed &&
              p->last_reason.find("injected fault at run") != std::string::npos;
  CHECK(failed);
  while (lf::faults::fire(lf::faults::Point::run)) {
  }
  lf::set_config_for_testing(saved);
}

namespace {
// Serves windows with wrong values: LIVEFUSE_VERIFY must catch it and repair what the program sees.
class CorruptingPlan : public lftest::RecordingPlan {
 public:
  bool run(lf::Window& w, const std::vector<std::pair<int, int>>& needed) override {
    RecordingPlan::run(w, needed);
    const lf::Tensor& last = w.outputs.back().front();
    float* p = static_cast<float*>(last.impl()->data());
    p[0] += 1.0f;
    return true;
  }
};
}  // namespace

TEST_CASE(
    "verify: LIVEFUSE_VERIFY checks replays against eager; a mismatch fails the plan, the program "
    "sees eager values") {
  const lf::Config saved = lf::config();
  lf::Config c = base();
  c.verify = 3;
  fresh(c);
  const uint64_t mm0 = lf::matcher_counters().verify_mismatches;
  CHECK(loop(X(), G()) > 0);  // the planner's own plans verify cleanly
  CHECK(lf::matcher_counters().verify_mismatches == mm0);

  fresh(c);
  lf::monitor::Monitor::instance().pause_for_testing(true);
  lf::Tensor x = lf::rand_uniform({16}, 5, -1, 1, lf::DType::f32, cpu);
  auto recorded = lftest::record_plan([&] { (void)lf::tanh(lf::mul(x, x)); });
  auto plan = std::make_shared<CorruptingPlan>();
  plan->id = 777;
  plan->ops = recorded->ops;
  plan->n_external = recorded->n_external;
  plan->state = lf::PlanState::active;
  lf::PlanTable::get().publish(plan);
  lf::Tensor y = lf::tanh(lf::mul(x, x));
  std::vector<double> xs = x.to_doubles(), ys = y.to_doubles();
  for (size_t i = 0; i < xs.size(); ++i)
    CHECK(ys[i] == doctest::Approx(std::tanh(float(xs[i] * xs[i]))));
  CHECK(plan->state == lf::PlanState::failed);
  CHECK(plan->last_reason.find("verify") != std::string::npos);
  CHECK(lf::matcher_counters().verify_mismatches == mm0 + 1);
  lf::monitor::Monitor::instance().pause_for_testing(false);
  lf::set_config_for_testing(saved);
}

TEST_CASE(
    "varying shapes: one structure at several sequence lengths stays eager-equal and is served") {
  const lf::Config saved = lf::config();
  fresh(base());
  const lf::Tensor g = G();
  std::vector<lf::Tensor> xs;
  std::vector<std::vector<double>> want;
  for (int64_t s : {8, 16, 24}) {
    xs.push_back(lf::rand_uniform({s, 48}, 10 + s, -1, 1, lf::DType::f32, cpu));
    want.push_back(eager_result(xs.back(), g));
  }
  const uint64_t s0 = lf::matcher_counters().served;
  for (int it = 0; it < 36; ++it) {
    const size_t k = static_cast<size_t>(it % 3);
    lf::Tensor h = xs[k];
    for (int l = 0; l < 3; ++l) h = body(h, g);
    REQUIRE(lftest::allclose(h.to_doubles(), want[k], 1e-5, 1e-6));
    if (it == 9) {
      lf::monitor::Monitor::instance().drain();
      lf::planner::wait_service_idle();
    }
  }
  CHECK(lf::matcher_counters().served > s0);
  lf::set_config_for_testing(saved);
}

TEST_CASE("threads: 4 threads on 4 streams, each with its own loop, all eager-equal and served") {
  const lf::Config saved = lf::config();
  fresh(base());
  const uint64_t s0 = lf::matcher_counters().served;
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &bad] {
      lf::StreamGuard guard(lf::Stream::create(cpu));
      const lf::Tensor x = lf::rand_uniform({4 + t, 32}, 100 + t, -1, 1, lf::DType::f32, cpu);
      const lf::Tensor g = lf::rand_uniform({32}, 200 + t, 0.5, 1.5, lf::DType::f32, cpu);
      std::vector<double> first;
      for (int it = 0; it < 60; ++it) {
        lf::Tensor h = x;
        for (int l = 0; l < 3 + t % 2; ++l) h = body(h, g);
        std::vector<double> v = h.to_doubles();
        if (it == 0)
          first = v;
        else if (!lftest::allclose(v, first, 1e-5, 1e-6))
          bad.fetch_add(1);
        if (it == 10) {
          lf::monitor::Monitor::instance().drain();
          lf::planner::wait_service_idle();
        }
      }
    });
  for (auto& th : threads) th.join();
  CHECK(bad == 0);
  CHECK(lf::matcher_counters().served > s0);
  lf::set_config_for_testing(saved);
}

TEST_CASE(
    "LIVEFUSE_FUSION=0: no fused kernels, so on the CPU nothing is planned and results are eager") {
  const lf::Config saved = lf::config();
  lf::Config c = base();
  c.fusion = false;
  fresh(c);
  loop(X(), G());
  for (const auto& p : lf::PlanTable::get().plans())
    CHECK(p->state != lf::PlanState::active);
  lf::set_config_for_testing(saved);
}

TEST_CASE(
    "threads: a result handed to another thread before its producer synced is made real there") {
  const lf::Config saved = lf::config();
  fresh(base());
  const lf::Tensor x = X(), g = G();
  const std::vector<double> want = eager_result(x, g);
  // Plans get installed first, so the last window of each iteration is still pending when the
  // producer hands the result over.
  lf::Tensor handed;
  for (int it = 0; it < 12; ++it) {
    lf::Tensor h = x;
    for (int l = 0; l < 3; ++l) h = body(h, g);
    if (it < 11)
      (void)h.to_doubles();
    else
      handed = h;
    if (it == 6) {
      lf::monitor::Monitor::instance().drain();
      lf::planner::wait_service_idle();
    }
  }
  REQUIRE(handed.impl()->pending.load() != nullptr);  // still owned by this thread's window
  std::vector<double> got;
  std::thread consumer([&] { got = handed.to_doubles(); });
  consumer.join();
  CHECK(lftest::allclose(got, want, 1e-5, 1e-6));
  CHECK(handed.impl()->pending.load() == nullptr);
  lf::set_config_for_testing(saved);
}
