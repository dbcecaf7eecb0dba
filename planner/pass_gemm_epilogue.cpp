// Pass "gemm_epilogue": a matmul/linear whose result is only consumed by one pointwise group
// of its shape takes that group as its tail: one step, GEMM then the tail kernel. When the tail
// is exactly bias-add [+ relu | + gelu_tanh], cuBLASLt can do it in the GEMM's epilogue
// (BIAS, RELU_BIAS, GELU_BIAS); a bias-add [+ add of a residual of the product's shape] too, the
// residual read as cuBLASLt's C (a layer's FFN2 + bias + residual: one launch). A linear's erf
// gelu or silu, which cuBLASLt has no epilogue for, rides on livefuse's tensor-core GEMM on CUDA
// (BiasAct: BERT's FFN1 + gelu in one launch). The tail kernel remains the fallback for
// backends without it, and for a residual it cannot read as C.
// Merged gate and up siblings (pass_gemm_siblings) whose outputs only act(gate) * up reads take
// that tail as a gated epilogue on CUDA over few rows (take_gate): the GEMV writes the product.
#include "planner/passes.hpp"

namespace livefuse::planner {
namespace {

// add(cur, r) or add(r, cur) with r of cur's full shape, computed outside the tail: a residual
// cuBLASLt can read as its C input. Its value id, or -1.
int residual_of(const FusionGraph& g, const Group& tail, const SegmentNode& a, const ValueRef& cur) {
  if (a.op != OpId::add || a.attrs.scalar_operand || a.inputs.size() != 2) return -1;
  if (!(a.inputs[0] == cur) && !(a.inputs[1] == cur)) return -1;
  const ValueRef other = a.inputs[0] == cur ? a.inputs[1] : a.inputs[0];
  if (other == cur || g.producer_group(other) == tail.id) return -1;
  if (!(g.seg.shape(other) == g.seg.shape(cur))) return -1;
  if (g.seg.dtype(other) != g.seg.dtype(cur)) return -1;
  // cuBLASLt adds C before its one rounding; eager rounds the product first, then the sum. In
  // f16/bf16 a residual that cancels the product (x + y ~ 0) turns eager's rounding of y into a
  // large relative difference of the result (one ulp of y against a small sum), so there the add
  // is only taken for products of at most kExactEpilogueRows rows: those run as the CUDA GEMV,
  // which rounds y before adding as eager does (kernels/cuda/gemv.hpp). Elsewhere it stays in
  // the tail kernel, which is also what runs when the GEMV cannot take the call at run time.
  if (g.seg.dtype(cur) != DType::f32 && !gemv_rows(g.seg.shape(cur))) return -1;
  return g.seg.value_id(other);
}

// Whether livefuse's tensor-core GEMM takes `act` right after linear `mn` (its bias inside the
// call): CUDA, f16 / bf16 (LIVEFUSE_GEMM_TC) or f32 (LIVEFUSE_GEMM_F32X3), more rows than the
// GEMV's (whose epilogue has cuBLASLt's activations only, outside a gate). Its shape rules are
// checked at run time (the fallback: GEMM + tail).
bool tc_takes(const FusionGraph& g, const SegmentNode& mn, OpId act, const Shape& ys) {
  const DType dt = mn.outputs.empty() ? DType::f32 : mn.outputs[0].dtype;
  const bool on = dt == DType::f32 ? g.opts.gemm_f32x3 : (dt == DType::f16 || dt == DType::bf16) && g.opts.gemm_tc;
  return on && mn.op == OpId::linear && (act == OpId::gelu || act == OpId::silu) && !gemv_rows(ys);
}

// Which epilogue covers the tail, or None with the reason in *why; *act_op is BiasAct's activation.
GemmEpilogue match_epilogue(const FusionGraph& g, const Group& gemm, const Group& tail, int* bias,
                            int* residual, OpId* act_op, std::string* why) {
  const int m = gemm.nodes[0];
  const SegmentNode& mn = g.seg.nodes[m];
  const bool linear_bias = mn.op == OpId::linear && mn.attrs.i[0] != 0;
  const ValueRef y = ValueRef::of(m);
  const Shape& ys = g.seg.shape(y);
  std::vector<int> nodes = tail.nodes;
  size_t pos = 0;
  ValueRef cur = y;
  *bias = linear_bias ? g.seg.value_id(mn.inputs[2]) : -1;
  // The tail is one activation of the linear's value (its bias, if any, inside the call) that
  // only the tensor-core GEMM's epilogue has.
  if (nodes.size() == 1) {
    const SegmentNode& a = g.seg.nodes[nodes[0]];
    if (a.inputs.size() == 1 && a.inputs[0] == y && tc_takes(g, mn, a.op, ys)) {
      *act_op = a.op;
      return GemmEpilogue::BiasAct;
    }
  }
  if (!linear_bias) {
    if (nodes.empty()) return GemmEpilogue::None;
    const SegmentNode& a = g.seg.nodes[nodes[0]];
    if (nodes.size() == 1 && (*residual = residual_of(g, tail, a, y)) >= 0) return GemmEpilogue::Residual;
    if (a.op != OpId::add || a.attrs.scalar_operand) {
      *why = "the tail does not start with a bias add";
      return GemmEpilogue::None;
    }
    const ValueRef other = a.inputs[0] == y ? a.inputs[1] : a.inputs[0];
    const Shape& bs = g.seg.shape(other);
    if (g.producer_group(other) == tail.id || bs.rank != 1 || ys.rank < 1 || bs.v[0] != ys.v[ys.rank - 1]) {
      *why = "the added value is not a bias of shape [N]";
      return GemmEpilogue::None;
    }
    *bias = g.seg.value_id(other);
    cur = ValueRef::of(nodes[0]);
    pos = 1;
  }
  GemmEpilogue e = GemmEpilogue::Bias;
  *residual = -1;
  // A residual after the bias, no activation (cuBLASLt would apply one after adding C).
  if (pos + 1 == nodes.size()) {
    const int r = residual_of(g, tail, g.seg.nodes[nodes[pos]], cur);
    if (r >= 0) {
      *residual = r;
      e = GemmEpilogue::BiasResidual;  // here the bias is the linear's or the first add's
      pos = nodes.size();
    }
  }
  if (pos < nodes.size()) {
    const SegmentNode& act = g.seg.nodes[nodes[pos]];
    if (act.inputs.size() != 1 || !(act.inputs[0] == cur)) {
      *why = "the tail is not a single activation of the biased product";
      return GemmEpilogue::None;
    }
    if (act.op == OpId::relu) e = GemmEpilogue::ReluBias;
    else if (act.op == OpId::gelu_tanh) e = GemmEpilogue::GeluBias;
    else {
      *why = act.op == OpId::gelu ? "cuBLASLt's GELU epilogue is the tanh approximation; erf gelu stays in the fused tail"
                                  : std::string(op_name(act.op)) + " has no cuBLASLt epilogue";
      return GemmEpilogue::None;
    }
    ++pos;
  } else if (linear_bias && *residual < 0) {
    *why = "linear already adds its bias";
    return GemmEpilogue::None;
  }
  if (pos != nodes.size()) {
    *why = "the tail has more ops than an epilogue can take";
    return GemmEpilogue::None;
  }
  // The intermediates (pre-activation) must not be needed by anyone else.
  for (size_t k = 0; k + 1 < nodes.size(); ++k) {
    const int v = g.seg.value_id(ValueRef::of(nodes[k]));
    if (g.seg.is_output(ValueRef::of(nodes[k]))) {
      *why = "the pre-activation value is observable";
      return GemmEpilogue::None;
    }
    for (const auto& [u, idx] : g.users[v])
      if (g.role[u] != Role::Dead && g.group_of[u] != tail.id) {
        *why = "the pre-activation value has other users";
        return GemmEpilogue::None;
      }
  }
  return e;
}

// Whether GEMM group `gemm` taking pointwise group `tail` as its tail (one unit) would make a
// cycle between kernels.
bool tail_makes_cycle(const FusionGraph& g, int gemm, int tail) {
  FusionGraph trial = g;
  trial.groups[gemm].tail = tail;
  trial.groups[tail].tail_of = gemm;
  return has_cycle(trial);
}

// Merged siblings `gm` that are a gated MLP's gate and up, read by nothing but one pointwise
// group act(gate) * up (either operand order), take that group as a Gated epilogue: over few
// rows on CUDA the GEMV writes act(gate) * up itself (kernels/cuda/gemv.hpp, GemvArgs::gated),
// one launch where the product and the tail kernel were two, and neither sibling's output is
// written. Elsewhere (more rows, a call the GEMV cannot take) the merged GEMM runs, then the tail
// kernel. Silent when `gm` is no such pair; a Decision when it is one but cannot be taken.
void take_gate(FusionGraph& g, Group& gm) {
  if (gm.nodes.size() != 2 || !g.opts.cuda || !g.opts.gemv_prologue) return;
  const ValueRef ya = ValueRef::of(gm.nodes[0]), yb = ValueRef::of(gm.nodes[1]);
  const Shape& s = g.seg.shape(ya);
  if (!gemv_rows(s) || !(g.seg.shape(yb) == s) || g.seg.dtype(ya) != g.seg.dtype(yb)) return;
  int tail = -1;
  for (const ValueRef& y : {ya, yb}) {
    if (g.seg.is_output(y)) return;
    for (const auto& [u, idx] : g.users[g.seg.value_id(y)]) {
      if (g.role[u] == Role::Dead) continue;
      if (tail >= 0 && g.group_of[u] != tail) return;
      tail = g.group_of[u];
    }
  }
  if (tail < 0) return;
  Group& t = g.groups[tail];
  if (t.kind != GroupKind::Pointwise || t.tail_of >= 0 || t.horizontal >= 0 || t.nodes.size() != 2) return;
  const int act_node = t.nodes[0], mul_node = t.nodes[1];
  const SegmentNode& act = g.seg.nodes[act_node];
  const SegmentNode& mul = g.seg.nodes[mul_node];
  if (act.inputs.size() != 1 || !(act.inputs[0] == ya || act.inputs[0] == yb)) return;
  const ValueRef up = act.inputs[0] == ya ? yb : ya;
  const ValueRef av = ValueRef::of(act_node);
  if (mul.op != OpId::mul || mul.inputs.size() != 2 || mul.attrs.scalar_operand ||
      !((mul.inputs[0] == av && mul.inputs[1] == up) || (mul.inputs[1] == av && mul.inputs[0] == up)))
    return;
  const std::string at = "GEMM " + g.nodes_str(gm.nodes) + " + " + g.nodes_str(t.nodes);
  if (act.op != OpId::silu && act.op != OpId::gelu && act.op != OpId::gelu_tanh && act.op != OpId::relu) {
    g.decide(at + " stay a GEMM and a kernel", std::string(op_name(act.op)) + " is no gate activation the GEMV has");
    return;
  }
  const DType dt = g.seg.dtype(ya);
  if ((dt != DType::f32 && dt != DType::f16 && dt != DType::bf16) || g.seg.dtype(av) != dt ||
      mul.outputs[0].dtype != dt || !(mul.outputs[0].shape == s)) {
    g.decide(at + " stay a GEMM and a kernel", "the gate's values change dtype or shape");
    return;
  }
  if (g.seg.is_output(av) || only_user(g, act_node) != mul_node) {
    g.decide(at + " stay a GEMM and a kernel", "act(gate) is read by more than the product");
    return;
  }
  if (!g.opts.gemm_epilogue) {
    g.decide(at + " stay a GEMM and a kernel", "GEMM epilogues disabled");
    return;
  }
  if (tail_makes_cycle(g, gm.id, tail)) {
    g.decide(at + " stay a GEMM and a kernel", "taking the tail would create a cycle between kernels");
    return;
  }
  gm.tail = tail;
  t.tail_of = gm.id;
  gm.epilogue = GemmEpilogue::Gated;
  gm.act = act.op;
  gm.gate_second = act.inputs[0] == yb;
  g.decide(at + " as one gated GEMV", std::string(op_name(act.op)) +
                                          "(gate) * up written by the product itself: one launch, and neither "
                                          "sibling's output in memory (fallback: the merged GEMM, then the kernel)");
}

}  // namespace

void pass_gemm_epilogue(FusionGraph& g) {
  for (Group& gm : g.groups) {
    if (!gm.alive || gm.kind != GroupKind::Gemm) continue;
    if (gm.nodes.size() > 1) {  // merged siblings (pass_gemm_siblings): only a gate's tail
      take_gate(g, gm);
      continue;
    }
    const int m = gm.nodes[0];
    const ValueRef y = ValueRef::of(m);
    const int yv = g.seg.value_id(y);
    const std::string at = "GEMM #" + std::to_string(m);
    int tail = -1;
    bool single_consumer = !g.seg.is_output(y) && !g.users[yv].empty();
    for (const auto& [u, idx] : g.users[yv]) {
      if (g.role[u] == Role::Dead) continue;
      const int gu = g.group_of[u];
      if (tail < 0) tail = gu;
      single_consumer = single_consumer && gu == tail;
    }
    if (!single_consumer || tail < 0 || g.groups[tail].kind != GroupKind::Pointwise ||
        g.groups[tail].tail_of >= 0 || !(g.groups[tail].shape == g.seg.shape(y))) {
      g.decide(at + " runs alone", "its result is not consumed by exactly one pointwise group of its shape");
      continue;
    }
    if (!g.opts.gemm_epilogue) {
      g.decide(at + " runs alone", "GEMM epilogues disabled");
      continue;
    }
    if (tail_makes_cycle(g, gm.id, tail)) {
      g.decide(at + " runs alone", "taking its tail would create a cycle between kernels");
      continue;
    }
    gm.tail = tail;
    g.groups[tail].tail_of = gm.id;
    std::string why;
    int bias = -1, residual = -1;
    OpId act{};
    gm.epilogue = match_epilogue(g, gm, g.groups[tail], &bias, &residual, &act, &why);
    gm.act = gm.epilogue == GemmEpilogue::BiasAct ? act : OpId{};
    gm.bias_value = bias;
    gm.residual_value = gm.epilogue == GemmEpilogue::Residual || gm.epilogue == GemmEpilogue::BiasResidual ? residual : -1;
    const std::string tail_nodes = g.nodes_str(g.groups[tail].nodes);
    if (gm.epilogue == GemmEpilogue::BiasAct)
      g.decide(at + " + " + tail_nodes + " as one tensor-core GEMM with its bias and " + std::string(op_name(act)),
               "cuBLASLt has no epilogue for it; livefuse's GEMM applies it as it writes the product (fallback: "
               "cuBLASLt's GEMM + one fused kernel)");
    else if (gm.epilogue != GemmEpilogue::None)
      g.decide(at + " + " + tail_nodes + " as one GEMM with cuBLASLt epilogue " + std::string(epilogue_name(gm.epilogue)),
               "bias and activation ride on the GEMM's output write (fallback: GEMM + one fused kernel)");
    else
      g.decide(at + " then " + tail_nodes + " as one fused kernel", "no cuBLASLt epilogue applies: " + why);
  }
}

}  // namespace livefuse::planner
