// End to end on the CPU: a hot loop of BERT's attention block (examples/bert/bert.cpp) is served
// by a plan whose attention runs as one AttentionStep, with eager's values.
#include <cmath>

#include "livefuse/inspect.hpp"
#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "runtime/plan.hpp"
#include "test_plan_util.hpp"

namespace lf = livefuse;
using lf::monitor::Monitor;

namespace {

constexpr int64_t kB = 2, kS = 24, kHeads = 4, kD = 16, kHidden = kHeads * kD;

struct Weights {
  lf::Tensor wq, bq, wk, bk, wv, bv, mask;
};

Weights make_weights() {
  const lf::Device cpu = lf::Device::cpu();
  Weights w;
  w.wq = lf::rand_uniform({kHidden, kHidden}, 31, -0.3, 0.3, lf::DType::f32, cpu);
  w.wk = lf::rand_uniform({kHidden, kHidden}, 32, -0.3, 0.3, lf::DType::f32, cpu);
  w.wv = lf::rand_uniform({kHidden, kHidden}, 33, -0.3, 0.3, lf::DType::f32, cpu);
  w.bq = lf::rand_uniform({kHidden}, 34, -0.1, 0.1, lf::DType::f32, cpu);
  w.bk = lf::rand_uniform({kHidden}, 35, -0.1, 0.1, lf::DType::f32, cpu);
  w.bv = lf::rand_uniform({kHidden}, 36, -0.1, 0.1, lf::DType::f32, cpu);
  // BERT's extended attention mask: 0 for kept keys, a large negative number for padding.
  std::vector<float> m(static_cast<size_t>(kB * kS), 0.0f);
  for (int64_t j = kS - 5; j < kS; ++j) m[static_cast<size_t>(kS + j)] = -10000.0f;
  w.mask = lf::from_floats(m, {kB, 1, 1, kS}, lf::DType::f32, cpu);
  return w;
}

enum class Form { bert, bert_negative_dims, encoder_block };

// BertModel::self_attention, as user code writes it (encoder_block: examples/encoder_block.hpp,
// transpose(k, -1, -2) and the permuted product reshaped without a contiguous).
lf::Tensor self_attention(const lf::Tensor& h, const Weights& w, Form form) {
  const bool negative_dims = form != Form::bert;
  auto heads = [&](const lf::Tensor& t) {
    return lf::permute(lf::reshape(t, {kB, kS, kHeads, kD}), {0, 2, 1, 3});
  };
  const lf::Tensor q = heads(lf::linear(h, w.wq, w.bq));
  const lf::Tensor k = heads(lf::linear(h, w.wk, w.bk));
  const lf::Tensor v = heads(lf::linear(h, w.wv, w.bv));
  const lf::Tensor scores =
      lf::matmul(q, negative_dims ? lf::transpose(k, -1, -2) : lf::transpose(k, 2, 3));
  const lf::Tensor probs = lf::softmax(scores, 1.0 / std::sqrt(static_cast<double>(kD)), w.mask);
  const lf::Tensor ctx = lf::matmul(probs, v);
  if (form == Form::encoder_block)
    return lf::reshape(lf::permute(ctx, {0, 2, 1, 3}), {kB, kS, kHidden});
  return lf::reshape(lf::contiguous(lf::permute(ctx, {0, 2, 1, 3})), {kB, kS, kHidden});
}

bool has_attention_group(const lf::Plan& p) {
  lf::PlanDetails d;
  p.details(d);
  for (const lf::FusionGroupInfo& g : d.groups)
    if (g.kind == "attention") return true;
  return false;
}

}  // namespace

TEST_CASE(
    "attention served: a hot BERT attention block runs as one attention step with eager's values") {
  for (Form form : {Form::bert, Form::bert_negative_dims, Form::encoder_block}) {
    INFO(static_cast<int>(form));
    const lf::Config saved = lf::config();
    lf::set_config_for_testing(lftest::fresh_unsampled(lf::Mode::on));
    const Weights w = make_weights();
    const lf::Tensor x =
        lf::rand_uniform({kB, kS, kHidden}, 30, -1, 1, lf::DType::f32, lf::Device::cpu());
    const std::vector<double> want =
        lftest::eager_values([&] { return self_attention(x, w, form); });
    std::shared_ptr<lf::Plan> serving;
    uint64_t served_before = 0;
    for (int it = 0; it < 200 && !serving; ++it) {
      served_before = lf::matcher_counters().served;
      const lf::Tensor y = self_attention(x, w, form);
      REQUIRE(lftest::allclose(y.to_doubles(), want, 1e-4, 1e-5));
      if (lf::matcher_counters().served > served_before) {
        for (const auto& p : lf::PlanTable::get().plans())
          if (p->state == lf::PlanState::active && p->hits > 0 && has_attention_group(*p))
            serving = p;
      }
      if (it % 8 == 7) {
        Monitor::instance().drain();
        lf::planner::wait_service_idle();
      }
    }
    if (!serving)
      for (const auto& p : lf::PlanTable::get().plans()) MESSAGE(p->describe());
    REQUIRE_MESSAGE(serving != nullptr, "no plan with an attention step served the block");
    INFO(serving->describe());
    // Served again, and still eager's values.
    const uint64_t hits = serving->hits;
    const lf::Tensor y = self_attention(x, w, form);
    CHECK(lftest::allclose(y.to_doubles(), want, 1e-4, 1e-5));
    CHECK(serving->hits > hits);
    lftest::reset_pipeline();
    lf::set_config_for_testing(saved);
  }
}

TEST_CASE(
    "attention served: a program that keeps the probabilities gets them, and no attention step") {
  const lf::Config saved = lf::config();
  lf::set_config_for_testing(lftest::fresh_unsampled(lf::Mode::on));
  const Weights w = make_weights();
  const lf::Tensor x =
      lf::rand_uniform({kB, kS, kHidden}, 40, -1, 1, lf::DType::f32, lf::Device::cpu());
  // output_attentions=True: the probabilities are a result the program reads.
  auto block = [&](lf::Tensor* probs_out) {
    auto heads = [&](const lf::Tensor& t) {
      return lf::permute(lf::reshape(t, {kB, kS, kHeads, kD}), {0, 2, 1, 3});
    };
    const lf::Tensor q = heads(lf::linear(x, w.wq, w.bq)), k = heads(lf::linear(x, w.wk, w.bk)),
                     v = heads(lf::linear(x, w.wv, w.bv));
    *probs_out = lf::softmax(lf::matmul(q, lf::transpose(k, 2, 3)),
                             1.0 / std::sqrt(static_cast<double>(kD)), w.mask);
    return lf::reshape(lf::contiguous(lf::permute(lf::matmul(*probs_out, v), {0, 2, 1, 3})),
                       {kB, kS, kHidden});
  };
  lf::Tensor probs_ref;
  const std::vector<double> want = lftest::eager_values([&] { return block(&probs_ref); });
  const std::vector<double> want_probs = lftest::eager_values([&] {
    lf::Tensor p;
    (void)block(&p);
    return p;
  });
  for (int it = 0; it < 40; ++it) {
    lf::Tensor probs;
    const lf::Tensor y = block(&probs);
    REQUIRE(lftest::allclose(y.to_doubles(), want, 1e-4, 1e-5));
    REQUIRE(lftest::allclose(probs.to_doubles(), want_probs, 1e-4, 1e-6));
    if (it % 8 == 7) {
      Monitor::instance().drain();
      lf::planner::wait_service_idle();
    }
  }
  bool refused = false;  // some plan covers the block, and says why it has no attention step
  for (const auto& p : lf::PlanTable::get().plans()) {
    INFO(p->describe());
    CHECK_FALSE(has_attention_group(*p));
    lf::PlanDetails d;
    p->details(d);
    for (const auto& [what, why] : d.decisions)
      refused = refused || (what.find("stays unfused") != std::string::npos &&
                            why.find("probabilities are observable") != std::string::npos);
  }
  CHECK(refused);
  lftest::reset_pipeline();
  lf::set_config_for_testing(saved);
}
