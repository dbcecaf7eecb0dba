// The fused attention template on the CPU: what pass_attention matches and refuses, what the
// plan becomes, and the step's values against eager (kernels/cpu/attention.cpp).
#include <limits>

#include "tests/planner/attention_cases.hpp"

using namespace plantest;

namespace {

bool decided(const PlannedSegment& p, const std::string& what_part, const std::string& why_part) {
  for (const Decision& d : p.decisions)
    if (d.what.find(what_part) != std::string::npos && d.reason.find(why_part) != std::string::npos)
      return true;
  return false;
}

}  // namespace

TEST_CASE("attention: the BERT pattern becomes one attention step (masks, both transpose forms)") {
  for (MaskForm mask : {MaskForm::none, MaskForm::per_key}) {
    for (bool negative : {false, true}) {
      AttentionShape s;
      s.mask = mask;
      s.negative_dims = negative;
      const AttentionSegment a = attention_segment(s);
      const PlannedSegment p = plan_segment(a.seg, default_planner_options(Device::cpu()));
      INFO(s.str() << (negative ? " transpose(k, -1, -2)" : " transpose(k, 2, 3)") << "\n"
                   << p.describe());
      const AttentionStep* st = attention_step_of(p);
      REQUIRE(st != nullptr);
      CHECK(st->operands.heads_inner);
      CHECK((st->operands.mask >= 0) == (mask != MaskForm::none));
      CHECK(p.values[a.scores] == ValueKind::Virtual);
      CHECK(p.values[a.probs] == ValueKind::Virtual);
      CHECK(decided(p, "into one attention step", "[b, s, heads, d]"));
      // Eager: two GEMMs, the softmax and the contiguous copy; the plan: the attention kernel.
      CHECK(p.summary.eager_launches == 4);
      CHECK(p.num_kernels() == 1);
      check_against_eager(a.seg, 7, 2e-5, 2e-5);
    }
  }
}

TEST_CASE("attention: without the permute back, the step writes [b, heads, s, d]") {
  AttentionShape s;
  s.heads_out = false;
  const AttentionSegment a = attention_segment(s);
  const PlannedSegment p = check_against_eager(a.seg, 3, 2e-5, 2e-5);
  const AttentionStep* st = attention_step_of(p);
  REQUIRE(st != nullptr);
  CHECK_FALSE(st->operands.heads_inner);
  CHECK(p.summary.eager_launches == 3);
  CHECK(p.num_kernels() == 1);
}

TEST_CASE(
    "attention: a permute + copying reshape after the product is absorbed too (encoder_block's "
    "form)") {
  AttentionShape s;
  s.mask = MaskForm::per_key;
  s.reshape_copy = true;
  const AttentionSegment a = attention_segment(s);
  const PlannedSegment p = check_against_eager(a.seg, 9, 2e-5, 2e-5);
  const AttentionStep* st = attention_step_of(p);
  REQUIRE(st != nullptr);
  CHECK(st->operands.heads_inner);
  CHECK(st->operands.out == a.seg.value_id(a.seg.outputs[0]));
  CHECK(p.values[st->operands.out] == ValueKind::Materialized);
  CHECK(p.num_kernels() == 1);
}

TEST_CASE("attention: no attention step when the scores or the probabilities escape") {
  const std::pair<Escape, const char*> cases[] = {
      {Escape::scores_output, "the scores are observable or read by another op"},
      {Escape::scores_other_user, "the scores are observable or read by another op"},
      {Escape::probs_output, "the probabilities are observable or read by another op"},
      {Escape::probs_other_user, "the probabilities are observable or read by another op"},
  };
  for (const auto& [escape, why] : cases) {
    AttentionShape s;
    s.mask = MaskForm::per_key;
    const AttentionSegment a = attention_segment(s, escape);
    const PlannedSegment p = check_against_eager(a.seg, 5, 2e-5, 2e-5);
    INFO(why);
    CHECK(attention_step_of(p) == nullptr);
    CHECK(decided(p, "stays unfused", why));
    CHECK(p.values[a.scores] != ValueKind::Virtual);
  }
}

TEST_CASE("attention: LIVEFUSE_ATTENTION=auto on CUDA plans only what a fast kernel takes") {
  // The planner's rule, exercised with CPU options (the kernels are the GPU suite's): the
  // tensor-core kernel (f16/bf16, head dims 64 or 128), the f32 FMA kernel (f32, the same head
  // dims) and the decode kernel (<= 16 rows a K/V head) are fast; f32 prefill at d = 32 would
  // take the general FMA kernel, which loses.
  PlannerOptions o = default_planner_options(Device::cpu());
  o.attention_fast_only = true;
  struct Case {
    int64_t sq, d;
    DType dtype;
    bool fused;
  };
  for (const Case& c : {Case{64, 64, DType::f16, true}, Case{64, 128, DType::bf16, true},
                        Case{64, 32, DType::f16, false}, Case{64, 64, DType::f32, true},
                        Case{64, 128, DType::f32, true}, Case{64, 32, DType::f32, false},
                        Case{1, 64, DType::f32, true}, Case{16, 32, DType::f32, true},
                        Case{17, 32, DType::f32, false}}) {
    AttentionShape s;
    s.sq = c.sq, s.d = c.d, s.dtype = c.dtype, s.sk = 40;
    INFO(s.str());
    const PlannedSegment p = plan_segment(attention_segment(s).seg, o);
    CHECK((attention_step_of(p) != nullptr) == c.fused);
    if (!c.fused) CHECK(decided(p, "stays unfused", "LIVEFUSE_ATTENTION=auto on CUDA"));
  }
}

TEST_CASE(
    "attention: the template can be switched off; head dims beyond the kernels' are refused") {
  AttentionShape s;
  PlannerOptions o = default_planner_options(Device::cpu());
  o.attention = false;
  PlannedSegment p = plan_segment(attention_segment(s).seg, o);
  CHECK(attention_step_of(p) == nullptr);
  CHECK(decided(p, "stays unfused", "disabled"));
  s.d = 160;
  p = plan_segment(attention_segment(s).seg, default_planner_options(Device::cpu()));
  CHECK(attention_step_of(p) == nullptr);
  CHECK(decided(p, "stays unfused", "exceed"));
}

TEST_CASE("attention: CPU step equals eager over shapes, dtypes, masks and strided views") {
  for (const AttentionShape& s : attention_numeric_cases()) {
    INFO(s.str());
    const AttentionSegment a = attention_segment(s);
    const double tol = attention_tol(s.dtype);
    const PlannedSegment p = check_against_eager(a.seg, 11, tol, tol);
    CHECK(attention_step_of(p) != nullptr);
    CHECK(p.num_kernels() == 1);
  }
}

TEST_CASE(
    "attention: the grouped-query form of the decoders is one attention step and equals eager") {
  for (const GroupedShape& s : grouped_numeric_cases()) {
    INFO(s.str());
    const AttentionSegment a = grouped_attention_segment(s);
    const double tol = attention_tol(s.dtype);
    const PlannedSegment p = check_against_eager(a.seg, 13, tol, tol);
    const AttentionStep* st = attention_step_of(p);
    REQUIRE(st != nullptr);
    CHECK(st->operands.groups == s.groups);
    CHECK(st->operands.heads_inner);
    CHECK(p.values[a.scores] == ValueKind::Virtual);
    CHECK(p.values[a.probs] == ValueKind::Virtual);
    // Eager: two GEMMs and the softmax (the copying reshapes count as views there and here).
    CHECK(p.summary.eager_launches == 3);
    CHECK(p.num_kernels() == 1);
  }
}

namespace {
// The plan's attention output and eager's for shape `s` (a per-batch f32 mask, the segment's
// last external) whose rows `fill_mask` sets; they must agree, NaN rows included.
std::vector<double> masked_rows_eager_checked(const AttentionShape& s, uint64_t seed,
                                              void (*fill_mask)(const AttentionShape&,
                                                                std::vector<float>&)) {
  const AttentionSegment a = attention_segment(s);
  const PlannedSegment p = plan_segment(a.seg, default_planner_options(Device::cpu()));
  REQUIRE(attention_step_of(p) != nullptr);
  std::vector<Tensor> xs = random_externals(a.seg, seed);
  std::vector<float> m(static_cast<size_t>(s.sq * s.sk), 0.0f);
  fill_mask(s, m);
  xs.back() = from_floats(m, mask_shape(s.mask, s.b, s.sq, s.sk), DType::f32, Device::cpu());
  const std::vector<Tensor> want = eager_values(a.seg, xs);
  const std::vector<Tensor> got = poisoned_values(p, xs);
  run_plan(p, got);
  const int v = a.seg.value_id(a.seg.outputs[0]);
  const auto g = got[v].to_doubles(), w = want[v].to_doubles();
  size_t bad = 0;
  CHECK_MESSAGE(lftest::allclose(g, w, 2e-5, 2e-5, &bad),
                "at " << bad << ": got " << g[bad] << " want " << w[bad]);
  return w;
}
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

TEST_CASE(
    "attention: rows of all -inf and NaN scores give eager's NaN rows; partly masked rows stay "
    "finite") {
  // Row 0 all -inf, row 1 -inf but for its last key, row 2 -inf for its first 66 keys (past the
  // first key tile: the later tile's scores must not be lost), row 3 a NaN.
  const AttentionShape s{1, 2, 5, 70, 8, DType::f32, MaskForm::per_batch, true, false, false};
  const std::vector<double> w =
      masked_rows_eager_checked(s, 21, [](const AttentionShape& s, std::vector<float>& m) {
        for (int64_t j = 0; j < s.sk; ++j) m[j] = -kInf;
        for (int64_t j = 0; j + 1 < s.sk; ++j) m[s.sk + j] = -kInf;
        for (int64_t j = 0; j < 66; ++j) m[2 * s.sk + j] = -kInf;
        m[3 * s.sk + 2] = std::numeric_limits<float>::quiet_NaN();
      });
  // Output [b, sq, h*d]: row 0 and row 3 are NaN in eager; row 1 and 2 are numbers.
  const int64_t row = s.h * s.d;
  CHECK(std::isnan(w[0]));
  CHECK(std::isnan(w[3 * row]));
  CHECK(std::isfinite(w[1 * row]));
  CHECK(std::isfinite(w[2 * row]));
}

TEST_CASE(
    "attention: with fewer than four query rows (read in place) -inf and NaN rows are eager's") {
  // The CPU kernel reads K and V in place below four query rows a head: the same semantics.
  // Row 0 finite from key 66 (the second tile), row 1 a NaN.
  const AttentionShape s{1, 2, 2, 70, 8, DType::f32, MaskForm::per_batch, true, false, false};
  const std::vector<double> w =
      masked_rows_eager_checked(s, 23, [](const AttentionShape& s, std::vector<float>& m) {
        for (int64_t j = 0; j < 66; ++j) m[j] = -kInf;
        m[s.sk + 5] = std::numeric_limits<float>::quiet_NaN();
      });
  const int64_t row = s.h * s.d;
  CHECK(std::isfinite(w[0]));
  CHECK(std::isnan(w[1 * row]));
}

// A decode step's KV caches grown by concat and read only by the attention: the concats join
// the step (AttentionOperands::k_append), which writes the grown caches itself -- the old rows
// too, since a plan run outside a window always gives them fresh storage (in-place growth is
// the decoder suites' and the GPU suite's). Refused when another op reads a grown cache, when the
// program does not keep it, and with LIVEFUSE_ATTENTION_APPEND=0's option; every form equals
// eager, the caches included.
TEST_CASE("attention: a decode step's KV cache concats join the attention step, which grows the caches") {
  struct Case {
    GroupedShape s;
    bool keep = true, k_read = false, option = true, joins = true;
  };
  std::vector<Case> cases;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    cases.push_back({{1, 2, 4, 1, 19, 16, dt, true}});   // Llama-like: GQA 4, one token
    cases.push_back({{2, 3, 1, 2, 40, 8, dt, false}});   // GPT-2-like: two tokens, batch 2
  }
  cases.push_back({{1, 2, 2, 3, 0, 8, DType::f32, false}});  // an empty cache grows
  cases.push_back({{2, 2, 1, 1, 17, 8, DType::f32, true}, false, false, true, false});
  cases.push_back({{2, 2, 1, 1, 17, 8, DType::f32, true}, true, true, true, false});
  cases.push_back({{2, 2, 1, 1, 17, 8, DType::f32, true}, true, false, false, false});
  for (const Case& c : cases) {
    INFO(c.s.str() << " keep " << c.keep << " k_read " << c.k_read << " option " << c.option);
    const AppendingSegment a = appending_attention_segment(c.s, c.keep, c.k_read);
    PlannerOptions o = default_planner_options(Device::cpu());
    o.attention_append = c.option;
    const double tol = attention_tol(c.s.dtype);
    const PlannedSegment p = check_against_eager(a.a.seg, 13, tol, tol, &o);
    const AttentionStep* st = attention_step_of(p);
    REQUIRE(st != nullptr);
    CHECK((st->operands.k_append == a.k_cat) == c.joins);
    CHECK((st->operands.v_append == a.v_cat) == c.joins);
    if (c.joins) {
      CHECK(decided(p, "into one attention step", "appends the step's keys and values"));
      CHECK(p.num_kernels() == 1);  // no copy of its own for either concat
      CHECK(p.values[a.a.seg.value_id(ValueRef::of(a.k_cat))] == ValueKind::Materialized);
    }
  }
}
