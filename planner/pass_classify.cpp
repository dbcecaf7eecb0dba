// Pass "classify": what the planner can do with each node (Role), and which results nobody
// can observe (Dead: not computed).
#include "livefuse/error.hpp"
#include "planner/passes.hpp"
#include "runtime/registry.hpp"

namespace livefuse::planner {
namespace {

Role role_of(FusionGraph& g, int j) {
  const SegmentNode& n = g.seg.nodes[j];
  const std::string at = detail::concat("#", j, " (", op_name(n.op), ")");
  switch (n.op) {
    case OpId::reshape:
    case OpId::permute:
    case OpId::slice:
    case OpId::expand: return Role::View;
    case OpId::contiguous: return Role::Pointwise;
    case OpId::opaque: return Role::Opaque;
    case OpId::matmul:
    case OpId::linear: return Role::Gemm;
    case OpId::sum:
    case OpId::mean:
    case OpId::max: {
      const Shape& x = g.seg.shape(n.inputs[0]);
      if (!is_floating(g.seg.dtype(n.inputs[0]))) {
        g.decide("keep " + at + " as a single step", "integer reductions are not fused");
        return Role::Eager;
      }
      if (x.rank == 0 || n.attrs.i[0] != x.rank - 1) {
        g.decide("keep " + at + " as a single step", "reduces dim " + std::to_string(n.attrs.i[0]) +
                                                         ", not the last; row kernels reduce the last dim");
        return Role::Eager;
      }
      return Role::Row;
    }
    case OpId::softmax:
    case OpId::layer_norm:
    case OpId::rms_norm: return Role::Row;
    default: break;
  }
  if (n.op == OpId::custom) {
    const CustomElementwiseDef& def = custom_op(n.attrs.custom_id);
    if (def.cuda_expr.empty() || def.cpu_fn == nullptr) {
      g.decide("keep " + at + " as a single step", "custom op " + def.name + " lacks a CUDA expression or CPU function");
      return Role::Eager;
    }
    return Role::Pointwise;
  }
  if (op_info(n.op).category == OpCategory::Elementwise) return Role::Pointwise;
  g.decide("keep " + at + " as a single step", std::string(category_name(op_info(n.op).category)) + " ops are not fused");
  return Role::Eager;
}

}  // namespace

void pass_classify(FusionGraph& g) {
  const int n = static_cast<int>(g.seg.nodes.size());
  g.role.assign(n, Role::Eager);
  for (int j = 0; j < n; ++j) {
    g.role[j] = role_of(g, j);
    if (!g.opts.fusion && (g.role[j] == Role::Pointwise || g.role[j] == Role::Row)) g.role[j] = Role::Eager;
  }
  if (!g.opts.fusion) g.decide("no fusion", "LIVEFUSE_FUSION=0: every op is a single step");
  // Dead code, backwards: a pure node none of whose results is observable or used by a live node.
  std::vector<bool> live_value(g.seg.num_values(), false);
  for (const ValueRef& r : g.seg.outputs) live_value[g.seg.value_id(r)] = true;
  std::vector<int> dead;
  for (int j = n - 1; j >= 0; --j) {
    const Role r = g.role[j];
    const bool pure = r == Role::Pointwise || r == Role::Row || r == Role::View;
    bool live = !pure;
    for (int k = 0; k < static_cast<int>(g.seg.nodes[j].outputs.size()); ++k)
      live = live || live_value[g.seg.value_id(ValueRef::of(j, k))];
    if (!live) {
      g.role[j] = Role::Dead;
      dead.push_back(j);
      continue;
    }
    for (const ValueRef& in : g.seg.nodes[j].inputs) live_value[g.seg.value_id(in)] = true;
  }
  if (!dead.empty()) {
    std::vector<int> asc(dead.rbegin(), dead.rend());
    g.decide("drop " + g.nodes_str(asc), "results are never used nor observable");
  }
}

}  // namespace livefuse::planner
