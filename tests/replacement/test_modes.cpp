// Every LIVEFUSE mode does what DESIGN.md says, on the same loop.
#include "livefuse/inspect.hpp"
#include "monitor/monitor.hpp"
#include "kernels/jit/kernel_cache.hpp"
#include "kernels/jit/lto_compiler.hpp"
#include "planner/fused_plan.hpp"
#include "planner/service.hpp"
#include "runtime/plan.hpp"
#include "test_plan_util.hpp"

namespace lf = livefuse;

namespace {
const lf::Device cpu = lf::Device::cpu();

lf::Tensor body(const lf::Tensor& x, const lf::Tensor& g) {
  return lf::gelu(lf::layer_norm(lf::add(lf::mul(x, 2.0), x), g, lf::Tensor(), 1e-5));
}

struct Run {
  uint64_t events = 0, plans = 0, served = 0, deferred = 0, shadow = 0;
  bool equal = true;
};

Run run_mode(lf::Mode m) {
  lf::set_config_for_testing(lftest::fresh_unsampled(m));
  const lf::Tensor x = lf::rand_uniform({8, 48}, 1, -1, 1, lf::DType::f32, cpu);
  const lf::Tensor g = lf::rand_uniform({48}, 2, 0.5, 1.5, lf::DType::f32, cpu);
  const auto& mc = lf::matcher_counters();
  const uint64_t ev0 = lf::monitor::Monitor::instance().counters().events, s0 = mc.served,
                 d0 = mc.deferred, sh0 = mc.shadow_would_serve;
  std::vector<double> first;
  Run r;
  for (int it = 0; it < 24; ++it) {
    lf::Tensor h = x;
    for (int l = 0; l < 3; ++l) h = body(h, g);
    std::vector<double> v = h.to_doubles();
    if (it == 0) first = v;
    r.equal &= lftest::allclose(v, first, 1e-5, 1e-6);
    if (it == 6) {
      lf::monitor::Monitor::instance().drain();
      lf::planner::wait_service_idle();
    }
  }
  lf::monitor::Monitor::instance().drain();
  r.events = lf::monitor::Monitor::instance().counters().events - ev0;
  r.plans = lf::PlanTable::get().snapshot()->plans.size();
  r.served = mc.served - s0;
  r.deferred = mc.deferred - d0;
  r.shadow = mc.shadow_would_serve - sh0;
  return r;
}
}  // namespace

TEST_CASE(
    "modes: off is plain eager, trace only records, shadow plans but never replaces, on serves") {
  const lf::Config saved = lf::config();
  const Run off = run_mode(lf::Mode::off);
  const Run trace = run_mode(lf::Mode::trace);
  const Run shadow = run_mode(lf::Mode::shadow);
  const Run on = run_mode(lf::Mode::on);
  lf::set_config_for_testing(saved);
  CHECK(off.events == 0);
  CHECK(off.plans == 0);
  CHECK(off.deferred == 0);
  CHECK(trace.events > 0);
  CHECK(trace.plans == 0);
  CHECK(trace.deferred == 0);
  CHECK(shadow.events > 0);
  CHECK(shadow.plans > 0);
  CHECK(shadow.deferred == 0);
  CHECK(shadow.served == 0);
  CHECK(shadow.shadow > 0);
  CHECK(on.plans > 0);
  CHECK(on.served > 0);
  for (const Run* r : {&off, &trace, &shadow, &on}) CHECK(r->equal);
  // The compile service's counters are in the snapshot, the route's among them.
  const lf::Snapshot s = lf::inspect();
  for (const char* name : {"compiled", "programs", "linked", "link_fallbacks"})
    CHECK_MESSAGE(s.counter("kernel_cache", name).has_value(), name);
}

LF_CUDA_TEST_CASE("modes: LIVEFUSE_PROFILE times every fusion group of a CUDA plan, same values") {
  const lf::Config saved = lf::config();
  lf::Config c = lftest::fresh_unsampled(lf::Mode::on);
  c.profile = true;
  lf::set_config_for_testing(c);
  const lf::Device gpu = lf::Device::cuda(0);
  const lf::Tensor x = lf::rand_uniform({64, 256}, 3, -1, 1, lf::DType::f32, gpu);
  const lf::Tensor g = lf::rand_uniform({256}, 4, 0.5, 1.5, lf::DType::f32, gpu);
  std::vector<double> first;
  bool equal = true;
  for (int it = 0; it < 40; ++it) {
    lf::Tensor h = x;
    for (int l = 0; l < 3; ++l) h = body(h, g);
    const std::vector<double> v = h.to_doubles();
    if (it == 0) first = v;
    equal &= lftest::allclose(v, first, 1e-5, 1e-6);
    if (it == 6) {
      lf::monitor::Monitor::instance().drain();
      lf::planner::wait_service_idle();
    }
  }
  const lf::Snapshot s = lf::inspect();
  lf::set_config_for_testing(saved);
  CHECK(equal);
  int timed = 0;
  for (const lf::PlanInfo& p : s.plans) {
    if (p.hits < 3) continue;
    for (const lf::FusionGroupInfo& gi : p.details.groups) {
      REQUIRE_MESSAGE(gi.gpu_us.has_value(), "plan ", p.id, " group ", gi.name, " not timed");
      CHECK(*gi.gpu_us >= 0.0);
      CHECK(*gi.gpu_us < 1e5);
      timed += gi.kernel.empty() ? 0 : 1;
    }
  }
  CHECK(timed > 0);  // at least one replayed plan with a timed kernel
}

LF_CUDA_TEST_CASE("modes: the planner compiles with the LIVEFUSE_* options (FAST_COMPILE=0: no -Ofc in any kernel)") {
  const lf::Config saved = lf::config();
  lf::Config c = lftest::fresh_unsampled(lf::Mode::on);
  c.fast_compile = false;
  lf::set_config_for_testing(c);
  const lf::Device gpu = lf::Device::cuda(0);
  const lf::Tensor x = lf::rand_uniform({64, 256}, 5, -1, 1, lf::DType::f32, gpu);
  const lf::Tensor g = lf::rand_uniform({256}, 6, 0.5, 1.5, lf::DType::f32, gpu);
  const lf::Tensor y = lf::rand_uniform({64, 256}, 7, -1, 1, lf::DType::f32, gpu);
  auto forward = [&] {  // a layer: a row kernel (body) and an unrelated pointwise chain
    lf::Tensor h = x, z = y;
    for (int l = 0; l < 3; ++l) {
      h = body(h, g);
      z = lf::exp(lf::mul(lf::gelu(z), 0.5));
    }
    std::vector<double> v = h.to_doubles(), w = z.to_doubles();
    v.insert(v.end(), w.begin(), w.end());
    return v;
  };
  std::vector<double> v;
  for (int it = 0; it < 30; ++it) {
    v = forward();
    if (it == 6) {
      lf::monitor::Monitor::instance().drain();
      lf::planner::wait_service_idle();
    }
  }
  const uint64_t served = lf::matcher_counters().served;
  int pointwise = 0, rows = 0;
  for (const auto& p : lf::PlanTable::get().plans()) {
    const auto* fp = dynamic_cast<const lf::planner::FusedPlan*>(p.get());
    if (!fp) continue;
    for (const lf::planner::Step& s : fp->planned().steps) {
      const auto* fk = std::get_if<lf::planner::FusedKernelStep>(&s.body);
      if (!fk || !fk->compiled) continue;
      CHECK_MESSAGE(fk->compiled->key.text.find("-Ofc") == std::string::npos, fk->compiled->key.text);
      ++(fk->spec->kind == lf::jit::SpecKind::Pointwise ? pointwise : rows);
    }
  }
  // Pointwise kernels are linked from the op library where libNVVM and nvJitLink are found
  // (LIVEFUSE_JIT=lto, the default), rows compiled by NVRTC; the snapshot counts both. Under
  // LIVEFUSE_JIT=nvrtc nothing is linked.
  const lf::Snapshot snap = lf::inspect();
  CHECK(snap.counter("kernel_cache", "programs").value_or(0) > 0);
  if (c.jit_lto && lf::jit::lto_available()) CHECK(snap.counter("kernel_cache", "linked").value_or(0) > 0);
  if (!c.jit_lto) CHECK(snap.counter("kernel_cache", "linked").value_or(1) == 0);
  CHECK(snap.counter("kernel_cache", "link_fallbacks").value_or(1) == 0);
  c.mode = lf::Mode::off;
  lf::set_config_for_testing(c);
  const std::vector<double> eager = forward();
  lf::set_config_for_testing(saved);
  CHECK(served > 0);
  CHECK(pointwise > 0);
  CHECK(rows > 0);
  CHECK(lftest::allclose(v, eager, 1e-4, 1e-5));
}
