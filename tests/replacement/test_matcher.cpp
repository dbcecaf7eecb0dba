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
#include "block_plan.hpp"
#include "test_plan_util.hpp"

namespace lf = livefuse;

using namespace matchertest;

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
