// Pass "rotary": the rotate-half rotary embedding as Llama code writes it (HF's
// apply_rotary_pos_emb; examples/decoder/decoder.cpp, rotate()),
//   half = concat({neg(slice(x, -1, h, d)), slice(x, -1, 0, h)}, -1)
//   out  = add(mul(x, cos), mul(half, sin))          (operands of mul and add in either order)
// becomes one group of kind Rotary: one kernel reads x, cos and sin once and writes `out`
// (kernels/rotary_args.hpp). Elementwise fusion alone leaves the concat a layout op of its own
// and the neg a kernel apart: a Llama decode layer spent four launches (~11 us of 82 on the
// H200) on q's and k's rotaries. The rotaries of one segment that do not depend on each other
// share the step -- a layer's q and k, one launch.
//
// Refused (a Decision says why) when a value inside the pattern is observable or read by
// anything else (it would have to exist in memory), or the dtype is not a float the kernels
// take. Runs before pass_vertical, which leaves grouped nodes alone.
#include <algorithm>
#include <optional>

#include "kernels/rotary_args.hpp"
#include "livefuse/error.hpp"
#include "planner/passes.hpp"

namespace livefuse::planner {
namespace {

struct Match {
  std::vector<int> nodes;
  RotaryOperands ops;
};

// slice(src, last dim, start, end, step 1) of a node whose only user is `user`: its source.
bool half_slice(const FusionGraph& g, const ValueRef& r, int user, int64_t start, int64_t end,
                ValueRef* src) {
  if (!is_node(g, r, OpId::slice) || only_user(g, r.node) != user) return false;
  const SegmentNode& s = g.seg.nodes[r.node];
  const Shape& x = g.seg.shape(s.inputs[0]);
  if (x.rank < 1 || s.attrs.i[0] != x.rank - 1 || s.attrs.i[1] != start || s.attrs.i[2] != end ||
      s.attrs.i[3] != 1)
    return false;
  *src = s.inputs[0];
  return true;
}

// The rotary whose add is node `a`: nullopt when the add is no rotary at all, "" when it is
// matched (into *m), else why it stays unfused.
std::optional<std::string> match_at(const FusionGraph& g, int a, Match* m) {
  const SegmentNode& add = g.seg.nodes[a];
  if (add.inputs.size() != 2 || add.attrs.scalar_operand) return std::nullopt;
  // Which of the add's operands is mul(half, sin): the one with a concat operand.
  for (int side = 0; side < 2; ++side) {
    const ValueRef pr = add.inputs[side], pc = add.inputs[1 - side];
    if (!is_node(g, pr, OpId::mul) || !is_node(g, pc, OpId::mul)) return std::nullopt;
    const SegmentNode& mr = g.seg.nodes[pr.node];
    const SegmentNode& mc = g.seg.nodes[pc.node];
    if (mr.attrs.scalar_operand || mc.attrs.scalar_operand) return std::nullopt;
    for (int k = 0; k < 2; ++k) {
      const ValueRef cat = mr.inputs[k], sin = mr.inputs[1 - k];
      if (!is_node(g, cat, OpId::concat)) continue;
      const SegmentNode& cn = g.seg.nodes[cat.node];
      const Shape& out = add.outputs[0].shape;
      const int64_t d = out.rank > 0 ? out.v[out.rank - 1] : 0;
      if (cn.inputs.size() != 2 || cn.attrs.i[0] != out.rank - 1 || d < 2 || d % 2 != 0) continue;
      const int64_t h = d / 2;
      ValueRef x_hi, x_lo;
      if (!is_node(g, cn.inputs[0], OpId::neg) || only_user(g, cn.inputs[0].node) != cat.node) continue;
      const int neg = cn.inputs[0].node;
      if (!half_slice(g, g.seg.nodes[neg].inputs[0], neg, h, d, &x_hi) ||
          !half_slice(g, cn.inputs[1], cat.node, 0, h, &x_lo) || !(x_hi == x_lo))
        continue;
      // Past here it is a rotary: every refusal says why.
      const DType dt = add.outputs[0].dtype;
      if (dt != DType::f32 && dt != DType::f16 && dt != DType::bf16)
        return "dtype " + std::string(dtype_name(dt)) + ": the kernels take f32, f16 and bf16";
      if (out.rank > 4) return "rank " + std::to_string(out.rank) + ": the kernels take at most 4 dims";
      // The other product: mul(x, cos), x the slices' source, of the result's shape.
      int xi = -1;
      for (int j = 0; j < 2; ++j)
        if (mc.inputs[j] == x_hi) xi = j;
      if (xi < 0) return "the products do not rotate one tensor";
      if (!(g.seg.shape(x_hi) == out)) return "x of shape " + g.seg.shape(x_hi).str() + " is broadcast to " + out.str();
      for (const int j : {pr.node, pc.node, cat.node})
        if (only_user(g, j) != (j == cat.node ? pr.node : a)) return "an intermediate is read elsewhere or observable";
      for (const ValueRef& v : {x_hi, mc.inputs[1 - xi], sin})
        if (g.seg.dtype(v) != dt) return "operands of more than one dtype";
      m->ops.x = g.seg.value_id(x_hi);
      m->ops.cos = g.seg.value_id(mc.inputs[1 - xi]);
      m->ops.sin = g.seg.value_id(sin);
      m->ops.out = g.seg.value_id(ValueRef::of(a));
      m->nodes = {cn.inputs[1].node, g.seg.nodes[neg].inputs[0].node, neg, cat.node, pr.node, pc.node, a};
      std::sort(m->nodes.begin(), m->nodes.end());
      return "";
    }
  }
  return std::nullopt;
}

// Whether some node of `from` reaches some node of `to` through the segment's data flow.
bool reaches(const FusionGraph& g, const std::vector<int>& from, const std::vector<int>& to) {
  const int n = static_cast<int>(g.seg.nodes.size());
  std::vector<bool> seen(n, false);
  std::vector<int> stack(from.begin(), from.end());
  while (!stack.empty()) {
    const int j = stack.back();
    stack.pop_back();
    for (int k = 0; k < static_cast<int>(g.seg.nodes[j].outputs.size()); ++k)
      for (const auto& [u, idx] : g.users[g.seg.value_id(ValueRef::of(j, k))]) {
        if (seen[u]) continue;
        if (std::find(to.begin(), to.end(), u) != to.end()) return true;
        seen[u] = true;
        stack.push_back(u);
      }
  }
  return false;
}

}  // namespace

void pass_rotary(FusionGraph& g) {
  const int n = static_cast<int>(g.seg.nodes.size());
  if (static_cast<int>(g.group_of.size()) != n) {
    g.group_of.assign(n, -1);
    g.full_space.assign(n, true);
  }
  int last = -1;  // the rotary group the next match may join
  for (int a = 0; a < n; ++a) {
    const SegmentNode& s = g.seg.nodes[a];
    if (s.op != OpId::add || g.role[a] != Role::Pointwise || g.group_of[a] >= 0) continue;
    Match m;
    const std::optional<std::string> why = match_at(g, a, &m);
    if (!why) continue;  // not a rotary at all: nothing to say
    if (!why->empty() || !g.opts.rotary) {
      g.decide("rotary at add #" + std::to_string(a) + " stays unfused",
               why->empty() ? "the rotary template is disabled" : *why);
      continue;
    }
    bool taken = false;
    for (int j : m.nodes) taken = taken || g.group_of[j] >= 0;
    if (taken) continue;
    // Join the previous rotary step when neither depends on the other and there is room.
    if (last >= 0) {
      auto& parts = g.rotary[g.groups[last].rotary];
      const std::vector<int> prev = g.groups[last].nodes;
      if (static_cast<int>(parts.size()) < kRotaryMaxParts &&
          g.seg.dtype(g.seg.value_ref(parts[0].out)) == g.seg.dtype(g.seg.value_ref(m.ops.out)) &&
          !reaches(g, prev, m.nodes) && !reaches(g, m.nodes, prev)) {
        parts.push_back(m.ops);
        const int mine = add_template_group(g, GroupKind::Rotary, m.nodes, g.seg.shape(g.seg.value_ref(m.ops.out)));
        merge_groups(g, last, mine);
        g.decide("fuse " + g.nodes_str(m.nodes) + " into rotary step " + g.nodes_str(g.groups[last].nodes),
                 "independent rotaries of one dtype: one launch");
        continue;
      }
    }
    last = add_template_group(g, GroupKind::Rotary, m.nodes, g.seg.shape(g.seg.value_ref(m.ops.out)));
    g.groups[last].rotary = static_cast<int>(g.rotary.size());
    g.rotary.push_back({m.ops});
    g.decide("fuse " + g.nodes_str(m.nodes) + " into one rotary step",
             "x * cos + rotate_half(x) * sin in one kernel: the halves, their concat and the products stay in registers");
  }
}

}  // namespace livefuse::planner
