// The whole pipeline on the CPU: eager calls -> monitor -> planner -> PlanTable -> matcher.
#include <chrono>
#include <map>

#include "kernels/jit/kernel_compiler.hpp"
#include "livefuse/inspect.hpp"
#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "runtime/plan.hpp"
#include "test_plan_util.hpp"

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

namespace {
// A program in two phases, each repeating a chain of its own: two hot sequences, two candidates.
// `salt` makes the kernels new to every cache (a scalar of the chain).
struct PhaseCounts {
  lf::planner::ServiceCounters before, after;
  uint64_t programs = 0, compiled = 0;  // NVRTC programs or links, and kernels, of the round
};

PhaseCounts plan_two_phases_held(const lf::Device& d, double salt) {
  lf::set_config_for_testing(lftest::fresh_unsampled(lf::Mode::on));
  const lf::Tensor x = lf::rand_uniform({32, 64}, 11, -1, 1, lf::DType::f32, d);
  PhaseCounts r;
  r.before = lf::planner::service_counters();
  const lf::jit::CompilerStats s0 = lf::jit::KernelCompiler::global().stats();
  lf::planner::hold_service_for_testing(true);
  for (int it = 0; it < 12; ++it) {
    lf::Tensor h = x;
    for (int l = 0; l < 3; ++l) h = lf::exp(lf::mul(lf::add(h, salt), 0.5));
    (void)h.to_doubles();
  }
  for (int it = 0; it < 12; ++it) {
    lf::Tensor h = x;
    for (int l = 0; l < 3; ++l) h = lf::tanh(lf::sub(lf::mul(h, h), salt));
    (void)h.to_doubles();
  }
  CHECK(lf::monitor::Monitor::instance().drain());
  const uint64_t queued = lf::planner::service_counters().candidates - r.before.candidates;
  CHECK(queued >= 2);
  CHECK(lf::planner::service_counters().rounds == r.before.rounds);  // held: nothing planned yet
  lf::planner::hold_service_for_testing(false);
  CHECK(lf::planner::wait_service_idle());
  r.after = lf::planner::service_counters();
  const lf::jit::CompilerStats s1 = lf::jit::KernelCompiler::global().stats();
  r.programs = s1.programs - s0.programs;
  r.compiled = s1.compiled - s0.compiled;
  return r;
}
}  // namespace

TEST_CASE("pipeline: candidates queued together are planned in one round") {
  const lf::Config saved = lf::config();
  const PhaseCounts r = plan_two_phases_held(lf::Device::cpu(), 1.0);
  lf::set_config_for_testing(saved);
  CHECK(r.after.rounds - r.before.rounds == 1);
  CHECK(r.after.published - r.before.published >= 2);
}

LF_CUDA_TEST_CASE("pipeline: the kernels of candidates planned in one round compile as one program (or link)") {
  const lf::Config saved = lf::config();
  // A scalar no earlier run used: every kernel is compiled, none comes from the disk cache.
  const double salt = 1.0 + static_cast<double>(std::chrono::steady_clock::now().time_since_epoch().count() % 1000003) * 1e-9;
  const PhaseCounts r = plan_two_phases_held(lf::Device::cuda(0), salt);
  lf::set_config_for_testing(saved);
  CHECK(r.after.rounds - r.before.rounds == 1);
  CHECK(r.after.published - r.before.published >= 2);
  CHECK(r.compiled >= 2);
  CHECK(r.programs == 1);  // f32 kernels share a program head (or, linked, one link)
}

TEST_CASE("pipeline: a structure queued twice in one round (its shape mix grew) becomes one plan") {
  const lf::Config saved = lf::config();
  lf::set_config_for_testing(lftest::fresh_unsampled(lf::Mode::on));
  const lf::Device cpu = lf::Device::cpu();
  const auto before = lf::planner::service_counters();
  lf::planner::hold_service_for_testing(true);
  for (int64_t rows : {32, 16}) {  // the same chain, then at a second shape
    const lf::Tensor x = lf::rand_uniform({rows, 64}, 12, -1, 1, lf::DType::f32, cpu);
    for (int it = 0; it < 12; ++it) {
      lf::Tensor h = x;
      for (int l = 0; l < 3; ++l) h = lf::sigmoid(lf::mul(lf::add(h, 0.25), h));
      (void)h.to_doubles();
    }
  }
  CHECK(lf::monitor::Monitor::instance().drain());
  const uint64_t queued = lf::planner::service_counters().candidates - before.candidates;
  lf::planner::hold_service_for_testing(false);
  CHECK(lf::planner::wait_service_idle());
  const auto after = lf::planner::service_counters();
  std::map<uint64_t, int> plans_per_structure;
  for (const auto& p : lf::PlanTable::get().plans())
    if (p->state != lf::PlanState::retired) ++plans_per_structure[p->signature];
  lf::set_config_for_testing(saved);
  REQUIRE_MESSAGE(queued >= 2, "the monitor queued " << queued << " candidates");
  CHECK(after.rounds - before.rounds == 1);
  CHECK(after.published - before.published == plans_per_structure.size());
  for (const auto& [sig, n] : plans_per_structure) CHECK_MESSAGE(n == 1, "structure " << sig);
}

TEST_CASE("pipeline: a sequence eager runs in one launch is not planned (nothing to gain)") {
  // Weights transposed at load time, say: permute (a view) -> contiguous (one copy), repeated.
  // Fused or not it is one kernel, so a plan would only add its replay (planner/service.cpp).
  const lf::Config saved = lf::config();
  lf::set_config_for_testing(lftest::fresh_unsampled(lf::Mode::on));
  const lf::Device cpu = lf::Device::cpu();
  const auto before = lf::planner::service_counters();
  const lf::Tensor w = lf::rand_uniform({48, 32}, 5, -1, 1, lf::DType::f32, cpu);
  for (int it = 0; it < 24; ++it) (void)lf::contiguous(lf::permute(w, {1, 0})).to_doubles();
  CHECK(lf::monitor::Monitor::instance().drain());
  CHECK(lf::planner::wait_service_idle());
  const auto after = lf::planner::service_counters();
  bool said = false;
  for (const lf::Decision& d : lf::inspect().decisions)
    said |= d.component == "planner" && d.reason.find("nothing to gain") != std::string::npos;
  lf::set_config_for_testing(saved);
  CHECK(after.candidates > before.candidates);  // it was hot and handed over ...
  CHECK(after.published == before.published);   // ... and not planned,
  CHECK(after.skipped > before.skipped);
  CHECK(said);                                   // saying why
}
