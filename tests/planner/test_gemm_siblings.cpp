// Pass "gemm_siblings": linears over one input become one GEMM over concatenated weights, with
// every sibling's output what eager gives; and the cases it must refuse.
#include <algorithm>

#include "planner/merged_weights.hpp"
#include "planner_util.hpp"

using namespace plantest;

namespace {

bool has_decision(const PlannedSegment& p, const std::string& needle) {
  return std::any_of(p.decisions.begin(), p.decisions.end(), [&](const Decision& d) {
    return (d.what + " -- " + d.reason).find(needle) != std::string::npos;
  });
}

// The merged GEMM steps of a plan: their sibling counts.
std::vector<size_t> merged_steps(const PlannedSegment& p) {
  std::vector<size_t> n;
  for (const Step& s : p.steps)
    if (const auto* gs = std::get_if<GemmStep>(&s.body); gs && !gs->siblings.empty())
      n.push_back(gs->siblings.size());
  return n;
}

// BERT's self-attention over h [b, s, hidden]: q, k, v = split_heads(linear(h, w, bias)), then
// softmax(q k^T * scale) v. Output: the context [b, heads, s, d].
Segment bert_attention(DType dt, bool bias, int64_t b = 2, int64_t s = 8, int64_t heads = 4,
                       int64_t d = 8) {
  const int64_t hidden = heads * d;
  SegmentBuilder sb;
  const ValueRef h = sb.input({b, s, hidden}, dt);
  ValueRef qkv[3];
  for (ValueRef& r : qkv) {
    const ValueRef w = sb.input({hidden, hidden}, dt);
    std::vector<ValueRef> in{h, w};
    if (bias) in.push_back(sb.input({hidden}, dt));
    const ValueRef y = sb.add(OpId::linear, in, linear_attrs(bias));
    r = sb.add(OpId::permute, {sb.add(OpId::reshape, {y}, ints({b, s, heads, d}))},
               ints({0, 2, 1, 3}));
  }
  const ValueRef kt = sb.add(OpId::permute, {qkv[1]}, ints({0, 1, 3, 2}));
  const ValueRef scores = sb.add(OpId::matmul, {qkv[0], kt});
  const ValueRef probs = sb.add(OpId::softmax, {scores}, softmax_attrs(0.35, false));
  sb.output(sb.add(OpId::matmul, {probs, qkv[2]}));
  return sb.build();
}

// A Llama MLP over x [m, hidden]: down(silu(gate(x)) * up(x)).
Segment llama_mlp(DType dt, int64_t m = 6, int64_t hidden = 32, int64_t inter = 48) {
  SegmentBuilder sb;
  const ValueRef x = sb.input({m, hidden}, dt);
  const ValueRef wg = sb.input({inter, hidden}, dt), wu = sb.input({inter, hidden}, dt);
  const ValueRef wd = sb.input({hidden, inter}, dt);
  const ValueRef gate = sb.add(OpId::linear, {x, wg}, linear_attrs(false));
  const ValueRef up = sb.add(OpId::linear, {x, wu}, linear_attrs(false));
  const ValueRef g = sb.add(OpId::mul, {sb.add(OpId::silu, {gate}), up});
  sb.output(sb.add(OpId::linear, {g, wd}, linear_attrs(false)));
  return sb.build();
}

// The merge alone: without the attention step, whose online softmax sums in another order than
// eager's (tests/planner/test_attention_cpu.cpp holds it to its own tolerance).
PlannerOptions siblings_only() {
  PlannerOptions o = default_planner_options(Device::cpu());
  o.attention = false;
  return o;
}

PlannerOptions without_siblings() {
  PlannerOptions o = siblings_only();
  o.gemm_siblings = false;
  return o;
}

}  // namespace

TEST_CASE("gemm siblings: Q, K and V of BERT attention become one GEMM, two launches fewer") {
  for (const bool bias : {true, false}) {
    INFO("bias " << bias);
    const Segment seg = bert_attention(DType::f32, bias);
    const PlannerOptions opts = siblings_only();
    const PlannedSegment p = check_against_eager(seg, 5, 1e-5, 1e-5, &opts);
    CHECK(merged_steps(p) == std::vector<size_t>{3});
    CHECK(has_decision(p, "linear #0, #3, #6 as one GEMM over concatenated weights [96, 32]"));
    const PlannedSegment before = plan_segment(seg, without_siblings());
    CHECK(merged_steps(before).empty());
    CHECK(p.num_kernels() == before.num_kernels() - 2);
  }
}

TEST_CASE("gemm siblings: gate and up of a Llama MLP become one GEMM") {
  const Segment seg = llama_mlp(DType::f32);
  const PlannedSegment p = check_against_eager(seg, 9, 1e-5, 1e-5);
  CHECK(merged_steps(p) == std::vector<size_t>{2});
  CHECK(has_decision(p, "as one GEMM over concatenated weights [96, 32]"));
  // gate, up, silu*mul, down -> gate/up as one GEMM, silu*mul, down.
  const PlannedSegment before = plan_segment(seg, without_siblings());
  CHECK(p.num_kernels() == before.num_kernels() - 1);
  CHECK(p.summary.plan_bytes < before.summary.plan_bytes);
}

TEST_CASE("gemm siblings: on CUDA a few-row gate/up pair takes silu(gate) * up as a gated epilogue") {
  // Planned for CUDA (the plan is not run here: tests/planner/test_gpu.cpp runs it): at most
  // kExactEpilogueRows rows, gate, up and silu * mul are one gated GEMV step.
  for (const int64_t m : {int64_t{1}, kExactEpilogueRows, kExactEpilogueRows + 1}) {
    const PlannedSegment p = plan_segment(llama_mlp(DType::bf16, m), default_planner_options(Device::cuda(0)));
    INFO("rows " << m << "\n" << p.describe());
    const bool gated = m <= kExactEpilogueRows;
    CHECK(has_decision(p, "as one gated GEMV") == gated);
    int gated_steps = 0;
    for (const Step& s : p.steps)
      if (const auto* gs = std::get_if<GemmStep>(&s.body); gs && gs->epilogue == GemmEpilogue::Gated) {
        ++gated_steps;
        CHECK(gs->siblings.size() == 2);
        CHECK(gs->act == OpId::silu);
        CHECK_FALSE(gs->gate_second);
        REQUIRE(gs->tail);
        CHECK(gs->tail->nodes.size() == 2);
        CHECK(s.launches() == 1);
      }
    CHECK(gated_steps == (gated ? 1 : 0));
    // gate/up + silu * mul, then down: two launches (past 8 rows, three).
    CHECK(p.num_kernels() == (gated ? 2 : 3));
  }
  // Not on the CPU, and not when up or silu(gate) is read elsewhere (an output).
  CHECK_FALSE(has_decision(plan_segment(llama_mlp(DType::f32, 1), default_planner_options(Device::cpu())),
                           "as one gated GEMV"));
  for (int escape = 0; escape < 2; ++escape) {
    SegmentBuilder sb;
    const ValueRef x = sb.input({1, 32}, DType::bf16);
    const ValueRef gate = sb.add(OpId::linear, {x, sb.input({48, 32}, DType::bf16)}, linear_attrs(false));
    const ValueRef up = sb.add(OpId::linear, {x, sb.input({48, 32}, DType::bf16)}, linear_attrs(false));
    const ValueRef act = sb.add(OpId::silu, {gate});
    sb.output(sb.add(OpId::mul, {up, act}));
    sb.output(escape == 0 ? up : act);
    const PlannedSegment p = plan_segment(sb.build(), default_planner_options(Device::cuda(0)));
    INFO(p.describe());
    CHECK_FALSE(has_decision(p, "as one gated GEMV"));
  }
  // An activation the GEMV does not have stays a kernel, with the reason.
  SegmentBuilder sb;
  const ValueRef x = sb.input({1, 32}, DType::bf16);
  const ValueRef gate = sb.add(OpId::linear, {x, sb.input({48, 32}, DType::bf16)}, linear_attrs(false));
  const ValueRef up = sb.add(OpId::linear, {x, sb.input({48, 32}, DType::bf16)}, linear_attrs(false));
  sb.output(sb.add(OpId::mul, {sb.add(OpId::tanh, {gate}), up}));
  const PlannedSegment p = plan_segment(sb.build(), default_planner_options(Device::cuda(0)));
  CHECK(has_decision(p, "tanh is no gate activation the GEMV has"));
}

TEST_CASE("gemm siblings: f16 and bf16, with and without bias, equal eager") {
  const PlannerOptions no_attention = siblings_only();
  for (const DType dt : {DType::f16, DType::bf16}) {
    for (const bool bias : {true, false}) {
      INFO(dtype_name(dt) << " bias " << bias);
      const PlannedSegment p =
          check_against_eager(bert_attention(dt, bias, 1, 5, 2, 16), 21, -1, -1, &no_attention);
      CHECK(merged_steps(p) == std::vector<size_t>{3});
    }
    const PlannedSegment m = check_against_eager(llama_mlp(dt, 3), 23);
    CHECK(merged_steps(m) == std::vector<size_t>{2});
  }
}

TEST_CASE("gemm siblings: the outputs are dense and exactly eager's, also where they escape") {
  // Grouped-query shapes (K and V narrower than Q), M = 1 and M > the CPU tile, every output
  // observable: the split store must hand each sibling its own columns.
  for (const int64_t m : {1, 3, 130}) {
    SegmentBuilder sb;
    const ValueRef x = sb.input({m, 40});
    const ValueRef q =
        sb.add(OpId::linear, {x, sb.input({64, 40}), sb.input({64})}, linear_attrs(true));
    const ValueRef k =
        sb.add(OpId::linear, {x, sb.input({16, 40}), sb.input({16})}, linear_attrs(true));
    const ValueRef v =
        sb.add(OpId::linear, {x, sb.input({300, 40}), sb.input({300})}, linear_attrs(true));
    sb.output(q), sb.output(k), sb.output(v);
    const PlannedSegment p = check_against_eager(sb.build(), 31, 0, 0);  // bit for bit
    CHECK(merged_steps(p) == std::vector<size_t>{3});
  }
}

TEST_CASE("gemm siblings: refused when inputs, K, dtypes or bias presence differ") {
  SUBCASE("different inputs (and so different K)") {
    SegmentBuilder sb;
    const ValueRef x = sb.input({4, 32}), y = sb.input({4, 24});
    sb.output(sb.add(OpId::linear, {x, sb.input({16, 32})}, linear_attrs(false)));
    sb.output(sb.add(OpId::linear, {y, sb.input({16, 24})}, linear_attrs(false)));
    const PlannedSegment p = check_against_eager(sb.build(), 3);
    CHECK(merged_steps(p).empty());
  }
  SUBCASE("weights of different dtypes (linear reads its weight in x's dtype: a cast input)") {
    SegmentBuilder sb;
    const ValueRef x = sb.input({4, 32});
    const ValueRef x16 = sb.add(OpId::cast, {x}, cast_attrs(DType::f16));
    sb.output(sb.add(OpId::linear, {x, sb.input({16, 32})}, linear_attrs(false)));
    sb.output(sb.add(OpId::linear, {x16, sb.input({16, 32}, DType::f16)}, linear_attrs(false)));
    const PlannedSegment p = check_against_eager(sb.build(), 3, 2e-3, 2e-3);
    CHECK(merged_steps(p).empty());
  }
  SUBCASE("one with a bias, one without") {
    SegmentBuilder sb;
    const ValueRef x = sb.input({4, 32});
    sb.output(sb.add(OpId::linear, {x, sb.input({16, 32}), sb.input({16})}, linear_attrs(true)));
    sb.output(sb.add(OpId::linear, {x, sb.input({16, 32})}, linear_attrs(false)));
    const PlannedSegment p = check_against_eager(sb.build(), 3);
    CHECK(merged_steps(p).empty());
    CHECK(has_decision(p, "linear #1 stays out of the GEMM of #0 -- #0 has a bias and it none"));
  }
  SUBCASE("a weight computed inside the segment from another") {
    SegmentBuilder sb;
    const ValueRef x = sb.input({4, 32});
    const ValueRef w = sb.input({16, 32});
    const ValueRef w2 = sb.scalar_op(OpId::mul, w, 0.5);
    sb.output(sb.add(OpId::linear, {x, w}, linear_attrs(false)));
    sb.output(sb.add(OpId::linear, {x, w2}, linear_attrs(false)));
    const PlannedSegment p = check_against_eager(sb.build(), 3);
    CHECK(merged_steps(p).empty());
    CHECK(has_decision(
        p, "linear #2 stays its own GEMM -- its weight is computed inside the segment"));
  }
  SUBCASE("a third sibling that does not match joins no one; the two that do merge") {
    SegmentBuilder sb;
    const ValueRef x = sb.input({4, 32});
    sb.output(sb.add(OpId::linear, {x, sb.input({16, 32})}, linear_attrs(false)));
    sb.output(sb.add(OpId::linear, {x, sb.input({8, 32}), sb.input({8})}, linear_attrs(true)));
    sb.output(sb.add(OpId::linear, {x, sb.input({24, 32})}, linear_attrs(false)));
    const PlannedSegment p = check_against_eager(sb.build(), 3);
    CHECK(merged_steps(p) == std::vector<size_t>{2});
    CHECK(has_decision(p, "linear #0, #2 as one GEMM over concatenated weights [40, 32]"));
    CHECK(has_decision(p, "linear #1 stays out of the GEMM of #0 -- it has a bias and #0 none"));
  }
  SUBCASE("switched off") {
    const PlannedSegment p = plan_segment(bert_attention(DType::f32, true), without_siblings());
    CHECK(merged_steps(p).empty());
  }
}
