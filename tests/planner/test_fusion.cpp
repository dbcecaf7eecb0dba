// What a segment becomes: kernel counts, step kinds, decisions, pass dumps -- and every plan
// still matches eager on the CPU.
#include <algorithm>
#include <set>

#include "monitor/candidate.hpp"
#include "livefuse/inspect.hpp"
#include "planner/fused_plan.hpp"
#include "planner/passes.hpp"
#include "tests/planner/planner_util.hpp"

using namespace plantest;

namespace {

bool has_decision(const PlannedSegment& p, const std::string& needle) {
  for (const planner::Decision& d : p.decisions)
    if ((d.what + " " + d.reason).find(needle) != std::string::npos) return true;
  return false;
}


}  // namespace

TEST_CASE("fusion: horizontal -- two independent chains share one launch") {
  SegmentBuilder b;
  const ValueRef x = b.input({1000});
  const ValueRef y = b.input({3, 77});
  const ValueRef a = b.add(OpId::tanh, {b.add(OpId::exp, {x})});
  const ValueRef c = b.add(OpId::sigmoid, {b.scalar_op(OpId::mul, y, 3.0)});
  b.output(a);
  b.output(c);
  const PlannedSegment p = check_against_eager(b.build(), 1);
  CHECK(p.num_kernels() == 1);
  REQUIRE(p.steps.size() == 1);
  CHECK(std::get<FusedKernelStep>(p.steps[0].body).spec->parts.size() == 2);
  CHECK(has_decision(p, "independent pointwise groups"));

  PlannerOptions off = default_planner_options(Device::cpu());
  off.horizontal = false;
  CHECK(plan_segment(b.build(), off).num_kernels() == 2);
}

TEST_CASE("fusion: GEMM + bias + gelu_tanh takes the GELU_BIAS epilogue") {
  SegmentBuilder b;
  const ValueRef x = b.input({8, 32});
  const ValueRef w = b.input({16, 32});
  const ValueRef bias = b.input({16});
  const ValueRef y = b.add(OpId::linear, {x, w, bias}, linear_attrs(true));
  const ValueRef g = b.add(OpId::gelu_tanh, {y});
  b.output(g);
  const PlannedSegment p = check_against_eager(b.build(), 3, 1e-4, 1e-5);
  REQUIRE(p.steps.size() == 1);
  const auto& gs = std::get<GemmStep>(p.steps[0].body);
  CHECK(gs.epilogue == GemmEpilogue::GeluBias);
  CHECK(gs.tail != nullptr);  // the fallback tail
  CHECK(p.num_kernels() == 1);
}

TEST_CASE("fusion: linear + bias + residual add takes BIAS + C; with an activation after it, a tail") {
  SegmentBuilder b;
  const ValueRef x = b.input({2, 8, 32});
  const ValueRef w = b.input({16, 32});
  const ValueRef bias = b.input({16});
  const ValueRef r = b.input({2, 8, 16});
  const ValueRef y = b.add(OpId::linear, {x, w, bias}, linear_attrs(true));
  b.output(b.add(OpId::add, {r, y}));
  const PlannedSegment p = check_against_eager(b.build(), 3, 1e-4, 1e-5);
  REQUIRE(p.steps.size() == 1);
  const auto& gs = std::get<GemmStep>(p.steps[0].body);
  CHECK(gs.epilogue == GemmEpilogue::BiasResidual);
  CHECK(gs.residual_value == p.segment.value_id(r));
  CHECK(gs.tail != nullptr);  // the fallback for a residual cuBLASLt cannot read as C
  CHECK(p.num_kernels() == 1);

  // matmul, then + a residual of its shape, then + a bias: Residual only covers the first add
  // when it is the whole tail; here the tail stays a fused kernel.
  SegmentBuilder b2;
  const ValueRef x2 = b2.input({8, 32});
  const ValueRef w2 = b2.input({32, 16});
  const ValueRef r2 = b2.input({8, 16});
  const ValueRef y2 = b2.add(OpId::matmul, {x2, w2});
  b2.output(b2.add(OpId::relu, {b2.add(OpId::add, {y2, r2})}));
  const PlannedSegment p2 = check_against_eager(b2.build(), 4, 1e-4, 1e-5);
  REQUIRE(p2.steps.size() == 1);
  CHECK(std::get<GemmStep>(p2.steps[0].body).epilogue == GemmEpilogue::None);
  CHECK(p2.num_kernels() == 2);

  // matmul + a value of the product's shape as the whole tail: Residual.
  SegmentBuilder b3;
  const ValueRef x3 = b3.input({8, 32});
  const ValueRef w3 = b3.input({32, 16});
  const ValueRef r3 = b3.input({8, 16});
  b3.output(b3.add(OpId::add, {b3.add(OpId::matmul, {x3, w3}), r3}));
  const PlannedSegment p3 = check_against_eager(b3.build(), 5, 1e-4, 1e-5);
  REQUIRE(p3.steps.size() == 1);
  CHECK(std::get<GemmStep>(p3.steps[0].body).epilogue == GemmEpilogue::Residual);

  // In f16/bf16 the residual stays in the tail past kExactEpilogueRows rows: eager rounds the
  // product before the add, and a residual that cancels it would turn cuBLASLt's single
  // rounding into a large error. Up to that many rows the CUDA GEMV adds it, rounding as eager.
  for (DType dt : {DType::f16, DType::bf16})
    for (int64_t rows : {kExactEpilogueRows + 1, kExactEpilogueRows}) {
      SegmentBuilder b4;
      const ValueRef x4 = b4.input({rows, 32}, dt), w4 = b4.input({16, 32}, dt), bias4 = b4.input({16}, dt);
      const ValueRef r4 = b4.input({rows, 16}, dt);
      b4.output(b4.add(OpId::add, {r4, b4.add(OpId::linear, {x4, w4, bias4}, linear_attrs(true))}));
      const PlannedSegment p4 = plan_segment(b4.build(), default_planner_options(Device::cpu()));
      REQUIRE(p4.steps.size() == 1);
      const auto& gs4 = std::get<GemmStep>(p4.steps[0].body);
      INFO(dtype_name(dt) << " rows " << rows);
      CHECK(gs4.epilogue == (rows > kExactEpilogueRows ? GemmEpilogue::None : GemmEpilogue::BiasResidual));
      CHECK(gs4.tail != nullptr);
    }
}

TEST_CASE("fusion: matmul + add(bias) + relu is RELU_BIAS; erf gelu is a fused tail") {
  SegmentBuilder b;
  const ValueRef x = b.input({2, 5, 24});
  const ValueRef w = b.input({24, 40});
  const ValueRef bias = b.input({40});
  const ValueRef y = b.add(OpId::matmul, {x, w});
  const ValueRef r = b.add(OpId::relu, {b.add(OpId::add, {y, bias})});
  b.output(r);
  const PlannedSegment p = check_against_eager(b.build(), 4, 1e-4, 1e-5);
  REQUIRE(p.steps.size() == 1);
  CHECK(std::get<GemmStep>(p.steps[0].body).epilogue == GemmEpilogue::ReluBias);

  SegmentBuilder b2;
  const ValueRef x2 = b2.input({8, 32});
  const ValueRef w2 = b2.input({16, 32});
  const ValueRef y2 = b2.add(OpId::linear, {x2, w2}, linear_attrs(false));
  const ValueRef g2 = b2.add(OpId::gelu, {b2.scalar_op(OpId::mul, y2, 0.5)});
  b2.output(g2);
  const PlannedSegment p2 = check_against_eager(b2.build(), 5, 1e-4, 1e-5);
  REQUIRE(p2.steps.size() == 1);
  CHECK(std::get<GemmStep>(p2.steps[0].body).epilogue == GemmEpilogue::None);
  CHECK(p2.num_kernels() == 2);  // GEMM, then one fused kernel
  CHECK(has_decision(p2, "no cuBLASLt epilogue applies"));
}

TEST_CASE("fusion: a transformer-block-like segment and what it becomes") {
  // x -> linear(qkv-ish) -> gelu; residual add -> layer_norm; softmax over scores with mask;
  // an embedding and a concat stay single steps; an unused branch is dropped.
  SegmentBuilder b;
  const ValueRef ids = b.input({4, 6}, DType::i64);
  const ValueRef table = b.input({50, 32});
  const ValueRef w = b.input({32, 32});
  const ValueRef wb = b.input({32});
  const ValueRef lw = b.input({32});
  const ValueRef lb = b.input({32});
  const ValueRef mask = b.input({1, 6, 6});
  const ValueRef emb = b.add(OpId::embedding, {table, ids});                   // 0: eager
  const ValueRef h = b.add(OpId::linear, {emb, w, wb}, linear_attrs(true));    // 1: gemm
  const ValueRef g = b.add(OpId::gelu, {h});                                   // 2: }
  const ValueRef res = b.add(OpId::add, {g, emb});                             // 3: } one row kernel
  Attrs ln;
  ln.push_float(1e-5);
  ln.push_int(1);
  ln.push_int(1);
  const ValueRef n = b.add(OpId::layer_norm, {res, lw, lb}, ln);               // 4: }
  Attrs tr;
  for (int64_t v : {0, 2, 1}) tr.push_int(v);
  const ValueRef nt = b.add(OpId::permute, {n}, tr);                           // 5: view
  const ValueRef sc = b.add(OpId::matmul, {n, nt});                            // 6: gemm [4,6,6]
  const ValueRef p = b.add(OpId::softmax, {sc, mask}, softmax_attrs(0.17, true));  // 7: row kernel
  const ValueRef unused = b.add(OpId::exp, {h});                               // 8: dead
  (void)unused;
  Attrs cat;
  cat.push_int(-1);
  const ValueRef c = b.add(OpId::concat, {p, p}, cat);                          // 9: eager
  b.output(c);
  b.output(n);
  const PlannedSegment plan = check_against_eager(b.build(), 77, 2e-4, 1e-5);
  // embedding, linear, gelu+residual+LN, (view), matmul, softmax, concat
  CHECK(plan.summary.ops == 9);
  CHECK(plan.num_kernels() == 6);
  CHECK(plan.summary.eager_launches == 8);
  CHECK(has_decision(plan, "drop #8"));
  CHECK(has_decision(plan, "concat"));
}

TEST_CASE("fusion: every pass is named and printable") {
  SegmentBuilder b;
  const ValueRef x = b.input({64});
  b.output(b.add(OpId::exp, {b.add(OpId::neg, {x})}));
  PlannerOptions o = default_planner_options(Device::cpu());
  std::vector<std::string> seen;
  o.dump = [&](const std::string& pass, const std::string& text) {
    seen.push_back(pass);
    CHECK(!text.empty());
  };
  plan_segment(b.build(), o);
  std::vector<std::string> want = {"input"};
  for (const Pass& p : pass_list()) want.push_back(std::string(p.name));
  want.push_back("plan");
  CHECK(seen == want);
}

TEST_CASE("fusion: LIVEFUSE_FUSION=0 plans every op as its own step") {
  SegmentBuilder b;
  const ValueRef x = b.input({64});
  b.output(b.add(OpId::exp, {b.add(OpId::neg, {x})}));
  PlannerOptions o = default_planner_options(Device::cpu());
  o.fusion = false;
  const PlannedSegment p = check_against_eager(b.build(), 2, -1, -1, &o);
  CHECK(p.num_kernels() == 2);
  CHECK(p.summary.fused_kernels == 0);
}

TEST_CASE("fusion: segment_from_calls wires real calls (identity decides internal vs external)") {
  const Tensor x = rand_uniform({5, 8}, 1, -1, 1, DType::f32, Device::cpu());
  const Tensor y = rand_uniform({8}, 2, -1, 1, DType::f32, Device::cpu());
  std::vector<OpCall> calls(3);
  std::vector<TensorList> outs(3);
  calls[0].op = OpId::add;
  calls[0].inputs = {x, y};
  outs[0] = {shape_only_tensor({5, 8}, DType::f32)};
  calls[1].op = OpId::exp;
  calls[1].inputs = {outs[0][0]};
  outs[1] = {shape_only_tensor({5, 8}, DType::f32)};
  calls[2].op = OpId::mul;
  calls[2].inputs = {outs[1][0], x};
  outs[2] = {shape_only_tensor({5, 8}, DType::f32)};
  const Segment s = segment_from_calls(calls, outs, {ValueRef::of(2)});
  CHECK(s.externals.size() == 2);
  CHECK(s.nodes[2].inputs[1] == ValueRef::ext(0));
  CHECK(s.nodes[1].inputs[0] == ValueRef::of(0));
  CHECK(plan_segment(s).num_kernels() == 1);
}

TEST_CASE("fusion: from_candidate -- wiring, the most frequent shape tuple, liveness") {
  using namespace livefuse::monitor;
  Candidate c;
  auto op = [](OpId id, std::vector<WireRef> in, DType dt, int rank) {
    CandidateOp o;
    o.op = id;
    for (const auto& w : in) o.inputs.push_back(w);
    o.out_dtypes.push_back(dt);
    o.out_ranks.push_back(static_cast<uint8_t>(rank));
    return o;
  };
  const WireRef e0{WireRef::Kind::external, 0, 0}, e1{WireRef::Kind::external, 1, 0};
  const WireRef n0{WireRef::Kind::internal, 0, 0}, n1{WireRef::Kind::internal, 1, 0};
  c.ops = {op(OpId::add, {e0, e1}, DType::f32, 2), op(OpId::exp, {n0}, DType::f32, 2), op(OpId::mul, {n1, e0}, DType::f32, 2)};
  c.externals = {ExternalSlot{DType::f32, 2, 0, 0}, ExternalSlot{DType::f32, 1, 0, 1}};
  // dims: e0 [S, 16], e1 [16], outputs [S, 16]; S varies (8 seen twice, 3 once).
  c.shapes.layout = {DimRef{DimRef::Kind::external, 0, 0, 0}, DimRef{DimRef::Kind::external, 0, 0, 1},
                     DimRef{DimRef::Kind::external, 1, 0, 0}};
  for (int j = 0; j < 3; ++j) {
    c.shapes.layout.push_back(DimRef{DimRef::Kind::output, static_cast<uint16_t>(j), 0, 0});
    c.shapes.layout.push_back(DimRef{DimRef::Kind::output, static_cast<uint16_t>(j), 0, 1});
  }
  c.shapes.tuples = {ShapeTuple{{3, 16, 16, 3, 16, 3, 16, 3, 16}, 1}, ShapeTuple{{8, 16, 16, 8, 16, 8, 16, 8, 16}, 2}};
  c.shapes.varying = {true, false, false, true, false, true, false, true, false};
  ValueLiveness l0{0, 0, 1, 3, 0, 0, 3}, l1{1, 0, 1, 3, 0, 0, 3}, l2{2, 0, 0, 3, 3, 3, 0};
  c.liveness = {l0, l1, l2};
  const Segment s = from_candidate(c);
  REQUIRE(s.nodes.size() == 3);
  CHECK(s.externals[0].shape == Shape{8, 16});
  CHECK(s.externals[1].shape == Shape{16});
  CHECK(s.nodes[2].outputs[0].shape == Shape{8, 16});
  CHECK(s.nodes[2].inputs[1] == ValueRef::ext(0));
  CHECK(s.outputs == std::vector<ValueRef>{ValueRef::of(2)});
  CHECK(s.varying[0] == std::vector<bool>{true, false});
  CHECK(s.escapes.empty());
  const PlannedSegment p = check_against_eager(s, 5);
  CHECK(p.num_kernels() == 1);
  // The add's output held in 20 of 200 occurrences is written out; exp's, held once, is not;
  // the segment says which and how often (a plan's "escaping values" note).
  c.liveness = {ValueLiveness{0, 0, 1, 200, 0, 20, 180}, ValueLiveness{1, 0, 1, 200, 0, 1, 199},
                ValueLiveness{2, 0, 0, 200, 200, 200, 0}};
  const Segment r = from_candidate(c);
  CHECK(r.outputs == std::vector<ValueRef>{ValueRef::of(0), ValueRef::of(2)});
  CHECK(r.escapes == "add #0.0 held 20, read 0 of 200: written out; exp #1.0 held 1, read 0 of 200: rare, in registers");
}

TEST_CASE("fusion: a value that escaped in a rare occurrence stays internal; a common escape is an output") {
  // (op, output, internal uses, observed, used after, alive at end, released inside)
  using livefuse::monitor::ValueLiveness;
  CHECK(ValueLiveness{1, 0, 1, 200, 0, 1, 199}.must_materialize() == false);  // 1 in 200
  CHECK(ValueLiveness{1, 0, 1, 200, 1, 1, 198}.must_materialize() == false);  // both, 1 in 100
  CHECK(ValueLiveness{1, 0, 1, 160, 0, 10, 150}.must_materialize() == false);  // 1 in 16
  CHECK(ValueLiveness{1, 0, 1, 160, 0, 11, 149}.must_materialize() == true);
  CHECK(ValueLiveness{1, 0, 1, 10, 0, 1, 9}.must_materialize() == true);  // one of few: kept
  CHECK(ValueLiveness{1, 0, 1, 200, 200, 0, 0}.must_materialize() == true);
  CHECK(ValueLiveness{1, 0, 1, 200, 0, 0, 200}.must_materialize() == false);
  // Where a plan serves a window whose rare value is held after all, the window runs eagerly
  // and the program gets eager's value: tests/replacement/test_matcher.cpp, "an escaping
  // intermediate the plan does not write is never lost".
}

namespace {
// A GPT-2 layer's MLP half at decode (one row): x = h + out(a); y = x + fc2(gelu_tanh(fc1(ln2(x)))),
// then the next layer's ln1(y) into its QKV. Planned for CUDA: no GPU needed to plan.
Segment decode_mlp_segment(int64_t rows, DType dt) {
  SegmentBuilder b;
  const int64_t C = 64, F = 256;
  const ValueRef h = b.input({rows, 1, C}, dt), a = b.input({rows, 1, C}, dt);
  const ValueRef ow = b.input({C, C}, dt), ob = b.input({C}, dt);
  const ValueRef l2w = b.input({C}, dt), l2b = b.input({C}, dt), l1w = b.input({C}, dt), l1b = b.input({C}, dt);
  const ValueRef fw = b.input({F, C}, dt), fb = b.input({F}, dt), pw = b.input({C, F}, dt), pb = b.input({C}, dt);
  const ValueRef qw = b.input({3 * C, C}, dt), qb = b.input({3 * C}, dt);
  const ValueRef x = b.add(OpId::add, {h, b.add(OpId::linear, {a, ow, ob}, linear_attrs(true))});
  const ValueRef n2 = b.add(OpId::layer_norm, {x, l2w, l2b}, norm_attrs(1e-5, true, true));
  const ValueRef g = b.add(OpId::gelu_tanh, {b.add(OpId::linear, {n2, fw, fb}, linear_attrs(true))});
  const ValueRef y = b.add(OpId::add, {x, b.add(OpId::linear, {g, pw, pb}, linear_attrs(true))});
  const ValueRef n1 = b.add(OpId::layer_norm, {y, l1w, l1b}, norm_attrs(1e-5, true, true));
  b.output(y);
  b.output(b.add(OpId::linear, {n1, qw, qb}, linear_attrs(true)));
  return b.build();
}
int prologues(const PlannedSegment& p) {
  int n = 0;
  for (const Step& s : p.steps)
    if (const auto* gs = std::get_if<GemmStep>(&s.body)) n += gs->prologue >= 0;
  return n;
}
}  // namespace

TEST_CASE("fusion: on CUDA a few-row linear takes the norm before it into its GEMV") {
  for (DType dt : {DType::f32, DType::f16}) {
    const PlannedSegment p = plan_segment(decode_mlp_segment(1, dt), default_planner_options(Device::cuda(0)));
    INFO(dtype_name(dt) << "\n" << p.describe());
    // out + residual, fc1 + gelu_tanh with ln2 inside, fc2 + residual, qkv with ln1 inside.
    CHECK(p.num_kernels() == 4);
    CHECK(prologues(p) == 2);
    CHECK(has_decision(p, "(its prologue)"));
    // Past kExactEpilogueRows rows the norms are kernels of their own (and, in f16, the adds).
    const PlannedSegment wide =
        plan_segment(decode_mlp_segment(kExactEpilogueRows + 1, dt), default_planner_options(Device::cuda(0)));
    CHECK(prologues(wide) == 0);
    // Not on the CPU: its GEMM has no such prologue.
    CHECK(prologues(plan_segment(decode_mlp_segment(1, dt), default_planner_options(Device::cpu()))) == 0);
  }
  // A norm whose output is observable, or read twice, stays a kernel of its own.
  for (bool observable : {true, false}) {
    SegmentBuilder b;
    const ValueRef x = b.input({1, 64}), w = b.input({32, 64}), lw = b.input({64});
    const ValueRef n = b.add(OpId::rms_norm, {x, lw}, norm_attrs(1e-6, true, false));
    b.output(b.add(OpId::linear, {n, w}, linear_attrs(false)));
    if (observable) b.output(n);
    else b.output(b.add(OpId::exp, {n}));
    const PlannedSegment p = plan_segment(b.build(), default_planner_options(Device::cuda(0)));
    INFO(p.describe());
    CHECK(prologues(p) == 0);
  }
  SegmentBuilder b;
  const ValueRef x = b.input({1, 64}), w = b.input({32, 64}), lw = b.input({64});
  b.output(b.add(OpId::linear, {b.add(OpId::rms_norm, {x, lw}, norm_attrs(1e-6, true, false)), w},
                 linear_attrs(false)));
  const PlannedSegment p = plan_segment(b.build(), default_planner_options(Device::cuda(0)));
  CHECK(prologues(p) == 1);
  CHECK(p.num_kernels() == 1);
  // A vocabulary head (more than 8 outputs per input column) keeps its norm kernel: each of its
  // outputs would normalize the row again.
  for (int64_t vocab : {8 * 64, 8 * 64 + 1}) {
    SegmentBuilder s;
    const ValueRef x = s.input({1, 64}), lw = s.input({64}), lb = s.input({64});
    s.output(s.add(OpId::linear, {s.add(OpId::layer_norm, {x, lw, lb}, norm_attrs(1e-5, true, true)), s.input({vocab, 64})},
                   linear_attrs(false)));
    CHECK(prologues(plan_segment(s.build(), default_planner_options(Device::cuda(0)))) == (vocab <= 8 * 64 ? 1 : 0));
  }
  // A Llama layer's second half at decode: x = h + o_proj(a); rms_norm(x) before gate/up
  // (merged siblings). The residual rides on o_proj's GEMV, the norm on the gate/up GEMV: two
  // launches (the down projection and the silu * up stay outside this segment).
  {
    SegmentBuilder s;
    const ValueRef h = s.input({1, 1, 64}, DType::bf16), a = s.input({1, 1, 64}, DType::bf16);
    const ValueRef x = s.add(OpId::add, {h, s.add(OpId::linear, {a, s.input({64, 64}, DType::bf16)}, linear_attrs(false))});
    const ValueRef n = s.add(OpId::rms_norm, {x, s.input({64}, DType::bf16)}, norm_attrs(1e-6, true, false));
    s.output(x);
    for (int k = 0; k < 2; ++k)
      s.output(s.add(OpId::linear, {n, s.input({128, 64}, DType::bf16)}, linear_attrs(false)));
    const PlannedSegment q = plan_segment(s.build(), default_planner_options(Device::cuda(0)));
    INFO(q.describe());
    CHECK(prologues(q) == 1);
    CHECK(q.num_kernels() == 2);
  }
  // The same half with the norm as examples/decoder writes it in bf16 (the chain below): the
  // residual add on o_proj's GEMV, the chain on the gate/up GEMV -- two launches, where the add
  // and the chain as one row kernel were three (LIVEFUSE_GEMV_NORM=2's option). With 0's, three;
  // and with 1's, the default, three too: a lone norm folds, the chain does not.
  for (int level : {2, 1, 0}) {
    const bool fold = level == 2;
    SegmentBuilder s;
    const DType bf = DType::bf16;
    const ValueRef h = s.input({1, 1, 64}, bf), a = s.input({1, 1, 64}, bf);
    const ValueRef x = s.add(OpId::add, {h, s.add(OpId::linear, {a, s.input({64, 64}, bf)}, linear_attrs(false))});
    ValueRef n = s.add(OpId::rms_norm, {s.add(OpId::cast, {x}, cast_attrs(DType::f32))}, norm_attrs(1e-6, false, false));
    n = s.add(OpId::mul, {s.add(OpId::cast, {n}, cast_attrs(bf)), s.input({64}, bf)});
    s.output(x);
    for (int k = 0; k < 2; ++k) s.output(s.add(OpId::linear, {n, s.input({128, 64}, bf)}, linear_attrs(false)));
    PlannerOptions o = default_planner_options(Device::cuda(0));
    o.gemv_norm_fold = level;
    const PlannedSegment q = plan_segment(s.build(), o);
    INFO("level " << level << "\n" << q.describe());
    CHECK(prologues(q) == (fold ? 1 : 0));
    CHECK(q.num_kernels() == (fold ? 2 : 3));
  }
  // Llama's norm as examples/decoder writes it -- cast(rms_norm(cast(x, f32)), dtype) * w in
  // f16/bf16, rms_norm(x) * w in f32 -- before Q/K/V: folded into their GEMV all the same (the
  // GEMV rounds the normalized element before the weight, as those ops do). Not when a value of
  // the chain is observable. (LIVEFUSE_GEMV_NORM=2's option: by default the chain stays a kernel.)
  for (DType dt : {DType::f32, DType::bf16})
    for (bool observable : {false, true}) {
      SegmentBuilder s;
      const ValueRef x = s.input({1, 1, 64}, dt), lw = s.input({64}, dt);
      ValueRef n = s.add(OpId::rms_norm, {dt == DType::f32 ? x : s.add(OpId::cast, {x}, cast_attrs(DType::f32))},
                         norm_attrs(1e-6, false, false));
      if (observable) s.output(n);
      if (dt != DType::f32) n = s.add(OpId::cast, {n}, cast_attrs(dt));
      n = s.add(OpId::mul, {n, lw});
      for (int64_t cols : {64, 16, 16})
        s.output(s.add(OpId::linear, {n, s.input({cols, 64}, dt)}, linear_attrs(false)));
      PlannerOptions o = default_planner_options(Device::cuda(0));
      o.gemv_norm_fold = 2;
      const Segment seg = s.build();
      const PlannedSegment q = plan_segment(seg, o);
      INFO(dtype_name(dt) << (observable ? " observable" : "") << "\n" << q.describe());
      CHECK(prologues(q) == (observable ? 0 : 1));
      // Not folded at the default level (in f32 the chain is rms_norm -> mul: not a lone norm either).
      CHECK(prologues(plan_segment(seg, default_planner_options(Device::cuda(0)))) == 0);
      CHECK(q.num_kernels() == (observable ? 2 : 1));
      for (const Step& st : q.steps)
        if (const auto* gs = std::get_if<GemmStep>(&st.body); gs && gs->prologue >= 0) {
          CHECK(gs->prologue_nodes().size() == (dt == DType::f32 ? 2u : 4u));
          // The fallback writes each of the chain's values: every one is bound memory, none
          // left to be allocated while the fallback runs (inside a capture, say).
          for (int j : gs->prologue_nodes())
            CHECK(q.values[seg.value_id(ValueRef::of(j))] == ValueKind::Materialized);
        }
    }
  // A Llama layer's rms_norm before Q/K/V (merged siblings): one GEMV writes all three outputs,
  // normalizing its input itself -- one launch; at 16 rows the norm, the GEMM and its split.
  for (int64_t rows : {int64_t{1}, int64_t{16}}) {
    SegmentBuilder s;
    const ValueRef x = s.input({rows, 64}, DType::bf16), lw = s.input({64}, DType::bf16);
    const ValueRef n = s.add(OpId::rms_norm, {x, lw}, norm_attrs(1e-6, true, false));
    for (int64_t cols : {64, 16, 16})
      s.output(s.add(OpId::linear, {n, s.input({cols, 64}, DType::bf16)}, linear_attrs(false)));
    const PlannedSegment q = plan_segment(s.build(), default_planner_options(Device::cuda(0)));
    INFO("rows " << rows << "\n" << q.describe());
    CHECK(prologues(q) == (rows == 1 ? 1 : 0));
    CHECK(q.num_kernels() == (rows == 1 ? 1 : 3));
    if (rows == 1) {
      // The report's fusion group of the merged GEMM lists the norm it runs (node #0) with the
      // siblings (the siblings once overwrote it).
      FusedPlan plan(q, DeviceKind::cuda);
      PlanDetails d;
      plan.details(d);
      bool listed = false;
      for (const FusionGroupInfo& g : d.groups)
        if (g.kind == "gemm_siblings")
          listed = std::find(g.ops.begin(), g.ops.end(), 0) != g.ops.end() && g.ops.size() == 4;
      CHECK(listed);
    }
  }
}

TEST_CASE("fusion: on CUDA a linear's erf gelu or silu rides on the tensor-core GEMM (BiasAct)") {
  // BERT's FFN1 + gelu: cuBLASLt's GELU epilogue is the tanh form, so without livefuse's GEMM the
  // step is the GEMM, then the gelu kernel. The planning runs here on the CPU; the kernel's own
  // numerics are tests/ops/test_gemm_tc.cpp's.
  const auto ffn1 = [](DType dt, int64_t rows, OpId act, bool bias) {
    SegmentBuilder b;
    const ValueRef x = b.input({rows, 64}, dt), w = b.input({128, 64}, dt);
    std::vector<ValueRef> in{x, w};
    if (bias) in.push_back(b.input({128}, dt));
    b.output(b.add(act, {b.add(OpId::linear, in, linear_attrs(bias))}));
    return b.build();
  };
  PlannerOptions o = default_planner_options(Device::cpu());
  o.cuda = true;
  o.gemm_tc = true;
  for (DType dt : {DType::f16, DType::bf16})
    for (OpId act : {OpId::gelu, OpId::silu})
      for (bool bias : {true, false}) {
        INFO(dtype_name(dt) << " " << op_name(act) << std::string(bias ? " with bias" : " without bias"));
        const PlannedSegment p = plan_segment(ffn1(dt, 128, act, bias), o);
        REQUIRE(p.steps.size() == 1);
        const auto& gs = std::get<GemmStep>(p.steps[0].body);
        CHECK(gs.epilogue == GemmEpilogue::BiasAct);
        CHECK(gs.act == act);
        CHECK(gs.tail != nullptr);  // the fallback: cuBLASLt's GEMM, then the tail kernel
        CHECK(p.num_kernels() == 1);
        CHECK(has_decision(p, "as one tensor-core GEMM with its bias and"));
        // The plan still computes eager's values where its steps run on the CPU (the tail).
        check_against_eager(ffn1(dt, 128, act, bias), 6, -1, -1, &o);
      }
  // Not taken: f32 without LIVEFUSE_GEMM_F32X3, few rows (the GEMV's), LIVEFUSE_GEMM_TC=0, the
  // activations cuBLASLt has (gelu_tanh: GELU_BIAS stays), an op the GEMM does not apply.
  const auto epilogue_of = [](const Segment& seg, const PlannerOptions& opts) {
    return std::get<GemmStep>(plan_segment(seg, opts).steps[0].body).epilogue;
  };
  CHECK(epilogue_of(ffn1(DType::f32, 128, OpId::gelu, true), o) == GemmEpilogue::None);
  // f32 takes it with its own switch (three TF32 products: kernels/cuda/gemm_tc_f32.cuh), and
  // f16's switch alone says nothing for f16 then.
  {
    PlannerOptions f32 = o;
    f32.gemm_f32x3 = true;
    CHECK(epilogue_of(ffn1(DType::f32, 128, OpId::gelu, true), f32) == GemmEpilogue::BiasAct);
    CHECK(epilogue_of(ffn1(DType::f32, kExactEpilogueRows, OpId::gelu, true), f32) == GemmEpilogue::None);
    f32.gemm_tc = false;
    CHECK(epilogue_of(ffn1(DType::f32, 128, OpId::silu, false), f32) == GemmEpilogue::BiasAct);
    CHECK(epilogue_of(ffn1(DType::f16, 128, OpId::gelu, true), f32) == GemmEpilogue::None);
    check_against_eager(ffn1(DType::f32, 128, OpId::gelu, true), 6, -1, -1, &f32);
  }
  CHECK(epilogue_of(ffn1(DType::f16, kExactEpilogueRows, OpId::gelu, true), o) == GemmEpilogue::None);
  CHECK(epilogue_of(ffn1(DType::f16, 128, OpId::gelu_tanh, true), o) == GemmEpilogue::GeluBias);
  CHECK(epilogue_of(ffn1(DType::f16, 128, OpId::sigmoid, true), o) == GemmEpilogue::None);
  PlannerOptions off = o;
  off.gemm_tc = false;
  CHECK(epilogue_of(ffn1(DType::f16, 128, OpId::gelu, true), off) == GemmEpilogue::None);
  // The option follows LIVEFUSE_GEMM_TC (off by default: the kernel is slower than cuBLASLt),
  // for CUDA plans only.
  CHECK_FALSE(default_planner_options(Device::cuda(0)).gemm_tc);
  const lftest::ScopedConfig tc_on(&livefuse::Config::gemm_tc, true);
  CHECK(default_planner_options(Device::cuda(0)).gemm_tc);
  CHECK_FALSE(default_planner_options(Device::cpu()).gemm_tc);
  CHECK_FALSE(default_planner_options(Device::cuda(0)).gemm_f32x3);
  const lftest::ScopedConfig f32_on(&livefuse::Config::gemm_f32x3, true);
  CHECK(default_planner_options(Device::cuda(0)).gemm_f32x3);
  CHECK_FALSE(default_planner_options(Device::cpu()).gemm_f32x3);
}
