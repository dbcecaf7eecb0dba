// Early launch (Plan::launch_early): a plan launched at its window's first call. The matcher's
// bookkeeping with a hand-made plan on the CPU; the real thing (a CUDA graph launched early,
// its buffers handed out at completion or dropped) on the GPU.
#include <thread>

#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

#include "livefuse/inspect.hpp"
#include "monitor/monitor.hpp"
#include "runtime/plan.hpp"
#include "test_plan_util.hpp"

namespace lf = livefuse;

namespace {
const lf::Device cpu = lf::Device::cpu();

// x is the only external, and op 0 binds it: the whole window's inputs are known at op 0.
lf::Tensor chain(const lf::Tensor& x) {
  lf::Tensor y = lf::mul(x, 1.5);
  y = lf::tanh(lf::add(y, 0.25));
  y = lf::mul(y, x);
  return lf::relu(y);
}

// Hand-made plans that launch early (test_plan_util.hpp).
struct HandMade : lftest::HandMadePlans {
  std::shared_ptr<lftest::RecordingPlan> publish(const std::function<void()>& body,
                                                  lf::PlanState state = lf::PlanState::active) {
    auto p = lftest::record_plan(body);
    p->state = state;
    p->early = true;
    lf::PlanTable::get().publish(p);
    return p;
  }
};
}  // namespace

TEST_CASE("early launch: taken by the completion when the window completes") {
  HandMade h;
  lf::Tensor x = lf::rand_uniform({64}, 1, -1, 1, lf::DType::f32, cpu);
  auto plan = h.publish([&] { (void)chain(x); });
  const uint64_t l0 = lf::matcher_counters().early_launches, w0 = lf::matcher_counters().early_wasted;
  for (int it = 0; it < 5; ++it) {
    lf::Tensor y = chain(x);
    lf::synchronize(cpu);
    CHECK(lftest::allclose(y.to_doubles(), lftest::eager_values([&] { return chain(x); }), 1e-5, 1e-6));
  }
  CHECK(plan->early_launched == 5);
  CHECK(plan->early_taken == 5);
  CHECK(plan->early_cancelled == 0);
  CHECK(plan->early_all_bound);
  CHECK(lf::matcher_counters().early_launches - l0 == 5);
  CHECK(lf::matcher_counters().early_wasted - w0 == 0);
}

TEST_CASE("early launch: a divergent window drops it, runs eagerly, and the plan cools down") {
  HandMade h;
  lf::Tensor x = lf::rand_uniform({64}, 2, -1, 1, lf::DType::f32, cpu);
  auto plan = h.publish([&] { (void)chain(x); });
  const uint64_t w0 = lf::matcher_counters().early_wasted;
  lf::Tensor a = lf::mul(x, 1.5);
  CHECK(plan->early_launched == 1);
  lf::Tensor b = lf::sub(a, 0.25);  // the plan expected add
  CHECK(plan->early_cancelled == 1);
  CHECK(lf::matcher_counters().early_wasted - w0 == 1);
  const auto want_b = lftest::eager_values([&] { return lf::sub(lf::mul(x, 1.5), 0.25); });
  CHECK(lftest::allclose(b.to_doubles(), want_b, 1e-6, 1e-7));
  CHECK(plan->early_cooldown.load() > 0);
  // Cooling down: windows complete through the plan, without early launches.
  for (int it = 0; it < 3; ++it) {
    lf::Tensor y = chain(x);
    lf::synchronize(cpu);
  }
  CHECK(plan->early_launched == 1);
  CHECK(plan->runs == 3);
  // ... until enough completions have passed.
  while (plan->early_cooldown.load() > 0) {
    lf::Tensor y = chain(x);
    lf::synchronize(cpu);
  }
  lf::Tensor y = chain(x);
  lf::synchronize(cpu);
  CHECK(plan->early_launched == 2);
  CHECK(plan->early_taken == 1);
}

TEST_CASE("early launch: dropped when an intermediate escapes, and when data_ptr() syncs") {
  HandMade h;
  lf::Tensor x = lf::rand_uniform({64}, 3, -1, 1, lf::DType::f32, cpu);
  auto plan = h.publish([&] { (void)chain(x); });
  plan->hidden_op = 2;  // the tanh output is "kept in registers"
  {
    lf::Tensor a = lf::mul(x, 1.5);
    lf::Tensor t = lf::tanh(lf::add(a, 0.25));  // held: the plan cannot serve this window
    lf::Tensor y = lf::relu(lf::mul(t, x));
    lf::synchronize(cpu);
    CHECK(plan->early_cancelled == 1);
    CHECK(plan->runs == 0);
    const auto want_t = lftest::eager_values([&] { return lf::tanh(lf::add(lf::mul(x, 1.5), 0.25)); });
    CHECK(lftest::allclose(t.to_doubles(), want_t, 1e-5, 1e-6));
    CHECK(lftest::allclose(y.to_doubles(), lftest::eager_values([&] { return chain(x); }), 1e-5, 1e-6));
  }
  plan->early_cooldown = 0;
  // data_ptr() of the window's external in the middle of the window: a sync point for the
  // window (the program may write through the pointer), even though x itself is not pending.
  const uint64_t s0 = lf::matcher_counters().flush_sync;
  lf::Tensor a = lf::mul(x, 1.5);
  CHECK(plan->early_launched == 2);
  float* px = static_cast<float*>(x.data_ptr());
  CHECK(a.impl()->pending == nullptr);
  CHECK(lf::matcher_counters().flush_sync - s0 == 1);
  CHECK(plan->early_cancelled == 2);
  const std::vector<double> before = a.to_doubles();
  px[0] = 7.0f;  // a later window reads the new value; `a` keeps the old one
  CHECK(before[0] != doctest::Approx(7.0 * 1.5));
  lf::Tensor y = chain(x);
  lf::synchronize(cpu);
  CHECK(y.to_doubles()[0] == doctest::Approx(lftest::eager_values([&] { return chain(x); })[0]));
}

TEST_CASE("early launch: never while sampling, nor before op 0 binds every external") {
  HandMade h;
  lf::Tensor x = lf::rand_uniform({64}, 4, -1, 1, lf::DType::f32, cpu);
  lf::Tensor w = lf::rand_uniform({64}, 5, -1, 1, lf::DType::f32, cpu);
  auto sampling = h.publish([&] { (void)chain(x); }, lf::PlanState::sampling);
  {
    lf::Tensor y = chain(x);
    lf::synchronize(cpu);
  }
  CHECK(sampling->early_launched == 0);
  lf::PlanTable::get().clear_for_testing();
  // w enters at op 1: not known at op 0.
  auto late = h.publish([&] { (void)lf::relu(lf::mul(lf::tanh(x), w)); });
  lf::Tensor y = lf::relu(lf::mul(lf::tanh(x), w));
  lf::synchronize(cpu);
  CHECK(late->runs == 1);
  CHECK(late->early_launched == 0);
}

// The real thing: the chain's plan, made by the pipeline, launched early on the GPU.
LF_CUDA_TEST_CASE("early launch: on the GPU, eager values from early launches, dropped ones and two streams") {
  const lf::Config saved = lf::config();
  lf::set_config_for_testing(lftest::fresh_unsampled(lf::Mode::on));
  const lf::Device gpu = lf::Device::cuda(0);
  lf::Tensor x = lf::rand_uniform({4096}, 6, -2, 2, lf::DType::f32, gpu);
  const std::vector<double> want = lftest::eager_values([&] { return chain(x); });
  const uint64_t l0 = lf::matcher_counters().early_launches;
  bool launched = false;
  for (int it = 0; it < 3000 && !launched; ++it) {
    lf::Tensor y = chain(x);
    lf::synchronize(gpu);
    launched = lf::matcher_counters().early_launches > l0;
    if (it % 16 == 15) lf::monitor::Monitor::instance().drain();
  }
  REQUIRE(launched);
  // Steady state: every window is launched early and taken; values are eager's.
  const uint64_t l1 = lf::matcher_counters().early_launches, w1 = lf::matcher_counters().early_wasted;
  for (int it = 0; it < 50; ++it) {
    lf::Tensor y = chain(x);
    lf::synchronize(gpu);
    REQUIRE(lftest::allclose(y.to_doubles(), want, 1e-5, 1e-6));
  }
  CHECK(lf::matcher_counters().early_launches - l1 >= 45);
  CHECK(lf::matcher_counters().early_wasted == w1);
  // A window that diverges after its early launch: eager values, the launch dropped.
  {
    lf::Tensor a = lf::mul(x, 1.5);
    lf::Tensor b = lf::sub(a, 0.25);
    lf::synchronize(gpu);
    CHECK(lf::matcher_counters().early_wasted == w1 + 1);
    const auto want_b = lftest::eager_values([&] { return lf::sub(lf::mul(x, 1.5), 0.25); });
    CHECK(lftest::allclose(b.to_doubles(), want_b, 1e-6, 1e-7));
  }
  // New data in x between windows, written through data_ptr(): x is exposed from then on, and
  // the window reads what x holds at its call.
  lf::Tensor x2 = lf::rand_uniform({4096}, 7, -2, 2, lf::DType::f32, gpu);
#if LIVEFUSE_HAS_CUDA
  REQUIRE(cudaMemcpy(x.data_ptr(), x2.data_ptr(), x.nbytes(), cudaMemcpyDeviceToDevice) == cudaSuccess);
#endif
  {
    lf::Tensor y = chain(x);
    lf::synchronize(gpu);
    CHECK(lftest::allclose(y.to_doubles(), lftest::eager_values([&] { return chain(x2); }), 1e-5, 1e-6));
  }
  // Two threads, each on its own stream, with results held across iterations (sets rotate).
  auto worker = [&](uint64_t seed, bool* ok) {
    lf::Stream s = lf::Stream::create(gpu);
    lf::StreamGuard guard(s);
    lf::Tensor xs = lf::rand_uniform({4096}, seed, -2, 2, lf::DType::f32, gpu);
    const std::vector<double> ref = lftest::eager_values([&] { return chain(xs); });
    lf::Tensor prev;
    for (int it = 0; it < 400; ++it) {
      lf::Tensor y = chain(xs);
      if (it % 3 == 0) prev = y;
      s.synchronize();
      if (it % 50 == 49 && !lftest::allclose(y.to_doubles(), ref, 1e-5, 1e-6)) *ok = false;
    }
    if (!lftest::allclose(prev.to_doubles(), ref, 1e-5, 1e-6)) *ok = false;
  };
  bool ok1 = true, ok2 = true;
  std::thread t1(worker, 11, &ok1), t2(worker, 12, &ok2);
  t1.join();
  t2.join();
  CHECK(ok1);
  CHECK(ok2);
  lftest::reset_pipeline();
  lf::set_config_for_testing(saved);
}
