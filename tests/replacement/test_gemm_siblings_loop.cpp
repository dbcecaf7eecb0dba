// The BERT encoder block in a hot loop on the CPU, served by a plan whose Q/K/V linears run as
// one GEMM: every result equals LIVEFUSE=off, also after the program rewrites a weight between
// calls (through an op, and through a pointer from data_ptr()).
#include "examples/encoder_block.hpp"
#include "monitor/monitor.hpp"
#include "planner/fused_plan.hpp"
#include "planner/service.hpp"
#include "runtime/plan.hpp"
#include "test_plan_util.hpp"

namespace lf = livefuse;

namespace {

// Plans in the table with a merged sibling GEMM step, and the calls they served.
std::pair<int, uint64_t> merged_plans() {
  int plans = 0;
  uint64_t hits = 0;
  const auto snap = lf::PlanTable::get().snapshot();
  for (const auto& p : snap->plans) {
    const auto* f = dynamic_cast<const lf::planner::FusedPlan*>(p.get());
    if (!f) continue;
    for (const lf::planner::Step& s : f->planned().steps)
      if (const auto* gs = std::get_if<lf::planner::GemmStep>(&s.body);
          gs && gs->siblings.size() == 3) {
        ++plans;
        hits += p->hits.load();
        break;
      }
  }
  return {plans, hits};
}

}  // namespace

namespace {

void hot_encoder_loop(const lf::Device d) {
  // The configuration and the pipeline go back as they were: later cases sample their plans.
  struct Restore {
    lf::Config saved = lf::config();
    ~Restore() {
      lftest::reset_pipeline();
      lf::set_config_for_testing(saved);
    }
  } restore;
  lf::set_config_for_testing(lftest::fresh_unsampled(lf::Mode::on));
  const demo::EncoderBlock block(32, 4, 64, lf::DType::f32, d, 300);
  const lf::Tensor x = lf::rand_uniform({2, 8, 32}, 7, -1, 1, lf::DType::f32, d);
  auto forward = [&] {
    lf::Tensor h = x;
    for (int l = 0; l < 3; ++l) h = block(h, lf::Tensor{});
    return h;
  };
  auto loop = [&](int iterations, const char* what) {
    INFO(what);
    const std::vector<double> want = lftest::eager_values(forward);
    for (int it = 0; it < iterations; ++it) {
      REQUIRE(lftest::allclose(forward().to_doubles(), want, 1e-4, 1e-5));
      if (it == 3) {
        CHECK(lf::monitor::Monitor::instance().drain());
        CHECK(lf::planner::wait_service_idle());
      }
    }
  };
  loop(24, "weights as loaded");
  const auto [plans, hits] = merged_plans();
  REQUIRE(plans > 0);
  CHECK(hits > 0);

  // An op rewrites K's weight in place: the plan's copy must follow (on CUDA, graphs that
  // replay read the copy: it is refreshed before the replay).
  lf::copy_into(block.wk, lf::rand_uniform(block.wk.shape(), 8, -0.2, 0.2, lf::DType::f32, d));
  loop(8, "after copy_into(wk)");
  lf::copy_into(block.bq, lf::rand_uniform(block.bq.shape(), 9, -0.2, 0.2, lf::DType::f32, d));
  loop(8, "after copy_into(bq)");
  CHECK(merged_plans().second > hits);
  if (d.is_cuda()) return;  // a host pointer is needed for the writes below

  // The program writes V's weight through a pointer, then again through the same pointer.
  auto* wv = static_cast<float*>(block.wv.data_ptr());
  for (int64_t i = 0; i < block.wv.numel(); ++i) wv[i] = 0.01f * static_cast<float>(i % 13) - 0.06f;
  loop(6, "after a write through data_ptr(wv)");
  wv[5] = 0.5f;
  loop(6, "after a second write through the same pointer");
  CHECK(lf::matcher_counters().served > 0);
}

}  // namespace

TEST_CASE("gemm siblings: a hot BERT encoder loop is served with Q/K/V as one GEMM, as eager") {
  hot_encoder_loop(lf::Device::cpu());
}

LF_CUDA_TEST_CASE(
    "gemm siblings: a hot BERT encoder loop on CUDA (graphs) is served with Q/K/V as one GEMM, as "
    "eager") {
  hot_encoder_loop(lf::Device::cuda(0));
}
