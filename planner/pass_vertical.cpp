// Pass "vertical": producer -> consumer fusion. Nodes are visited in order; a pointwise or row
// node starts as its own group and then tries to absorb the groups that produce its inputs,
// one at a time, on a trial copy: the merge is kept only if the result is a valid kernel
// (check_group: shapes, per-row vs per-element values, io limit, the strategy's can_plan) and
// the group graph stays acyclic. Every refusal is a Decision.
#include <algorithm>
#include <optional>

#include "planner/passes.hpp"

namespace livefuse::planner {
namespace {

GroupKind kind_for(Role r) {
  switch (r) {
    case Role::Pointwise: return GroupKind::Pointwise;
    case Role::Row: return GroupKind::Row;
    case Role::Gemm: return GroupKind::Gemm;
    case Role::View: return GroupKind::View;
    case Role::Opaque: return GroupKind::Opaque;
    default: return GroupKind::Eager;
  }
}

int new_group(FusionGraph& g, int j) {
  Group gr;
  gr.id = static_cast<int>(g.groups.size());
  gr.kind = kind_for(g.role[j]);
  gr.nodes = {j};
  const SegmentNode& n = g.seg.nodes[j];
  gr.shape = g.role[j] == Role::Row ? g.seg.shape(n.inputs[0]) : n.outputs[0].shape;
  g.groups.push_back(gr);
  g.group_of[j] = gr.id;
  return gr.id;
}

bool fusible(const Group& gr) { return gr.alive && (gr.kind == GroupKind::Pointwise || gr.kind == GroupKind::Row); }

// Whether `v`'s one reader is node `reader`.
bool only_reader(const FusionGraph& g, const ValueRef& v, int reader) {
  const auto& users = g.users[g.seg.value_id(v)];
  return users.size() == 1 && !g.seg.is_output(v) && users[0].first == reader;
}

// Whether `v` is read by linears only, as their input (one linear, or siblings: Q/K/V, gate/up).
bool read_by_linears(const FusionGraph& g, const ValueRef& v) {
  const auto& users = g.users[g.seg.value_id(v)];
  if (users.empty() || g.seg.is_output(v)) return false;
  for (const auto& [node, idx] : users)
    if (idx != 0 || g.seg.nodes[node].op != OpId::linear) return false;
  return true;
}

// The node that reads `v` and nothing else does, or -1.
int lone_reader(const FusionGraph& g, const ValueRef& v) {
  const auto& users = g.users[g.seg.value_id(v)];
  return users.size() == 1 && !g.seg.is_output(v) ? users[0].first : -1;
}

// The value a decode norm starting at node j leaves for the linears after it: j's own for a
// layer_norm / rms_norm; for Llama's chain, cast(x, f32) -> rms_norm without weight -> [cast
// back] -> mul, the mul's (each value before it read by the next node alone: the chain
// fold_norm_prologues takes, planner.cpp). Else none.
std::optional<ValueRef> norm_value(const FusionGraph& g, int j) {
  const SegmentNode& n = g.seg.nodes[j];
  if (n.op == OpId::layer_norm || n.op == OpId::rms_norm) return ValueRef::of(j);
  if (n.op != OpId::cast || n.attrs.dtype != DType::f32 || g.opts.gemv_norm_fold < 2) return std::nullopt;
  int k = lone_reader(g, ValueRef::of(j));
  if (k < 0 || g.seg.nodes[k].op != OpId::rms_norm || g.seg.nodes[k].attrs.i[0] != 0) return std::nullopt;
  k = lone_reader(g, ValueRef::of(k));
  if (k >= 0 && g.seg.nodes[k].op == OpId::cast) k = lone_reader(g, ValueRef::of(k));
  if (k < 0 || g.seg.nodes[k].op != OpId::mul) return std::nullopt;
  return ValueRef::of(k);
}

// On CUDA, a few-row residual add before a norm that only linears read is better left apart
// from it: the add rides on the GEMV epilogue of the linear that produced one of its operands
// (pass_gemm_epilogue), the norm on the GEMV of the linears that read it (planner.cpp,
// fold_norm_prologues) -- no launch for either, where one row kernel for both is one launch.
// `norm` is the norm's first node (Llama's chain starts with a cast).
bool leave_for_gemv(const FusionGraph& g, int norm, const Group& producer) {
  const SegmentNode& nn = g.seg.nodes[norm];
  if (!g.opts.gemv_prologue || g.opts.gemv_norm_fold == 0) return false;
  const std::optional<ValueRef> y = norm_value(g, norm);
  if (!y || !gemv_rows(nn.outputs[0].shape)) return false;
  if (producer.kind != GroupKind::Pointwise || producer.nodes.size() != 1) return false;
  const SegmentNode& add = g.seg.nodes[producer.nodes[0]];
  if (add.op != OpId::add || add.inputs.size() != 2 || !(nn.inputs[0] == ValueRef::of(producer.nodes[0])))
    return false;
  const auto from_linear = [&](const ValueRef& r) {
    return !r.is_external() && g.seg.nodes[r.node].op == OpId::linear &&
           only_reader(g, r, producer.nodes[0]);
  };
  return (from_linear(add.inputs[0]) || from_linear(add.inputs[1])) && read_by_linears(g, *y);
}

}  // namespace

void pass_vertical(FusionGraph& g) {
  const int n = static_cast<int>(g.seg.nodes.size());
  if (static_cast<int>(g.group_of.size()) != n) {
    g.group_of.assign(n, -1);
    g.full_space.assign(n, true);
  }
  for (int j = 0; j < n; ++j) {
    // Dead, or already in a template group (pass_attention).
    if (g.role[j] == Role::Dead || g.group_of[j] >= 0) continue;
    const int mine = new_group(g, j);
    if (!fusible(g.groups[mine])) continue;
    if (std::string why = check_group(g, mine); !why.empty()) {
      // A lone node that is not a valid kernel (e.g. too many inputs) runs eagerly.
      g.groups[mine].kind = GroupKind::Eager;
      g.role[j] = Role::Eager;
      g.decide("keep #" + std::to_string(j) + " as a single step", why);
      continue;
    }
    std::vector<int> producers;
    for (const ValueRef& r : g.seg.nodes[j].inputs) {
      const int p = g.producer_group(r);
      if (p >= 0 && fusible(g.groups[p]) && std::find(producers.begin(), producers.end(), p) == producers.end())
        producers.push_back(p);
    }
    int target = mine;
    for (int p : producers) {
      p = g.group_of[g.groups[p].nodes.empty() ? j : g.groups[p].nodes.front()];
      if (p == target) continue;
      if (g.groups[target].nodes.size() == 1 && leave_for_gemv(g, j, g.groups[p])) {
        g.decide("keep " + g.nodes_str(g.groups[p].nodes) + " apart from #" + std::to_string(j),
                 "a few-row GEMV takes the add as its epilogue and the norm as the next one's prologue");
        continue;
      }
      FusionGraph trial = g;
      Group& t = trial.groups[target];
      const Group& pg = trial.groups[p];
      // A row group absorbing anything keeps its rows; a pointwise group joining a row group
      // becomes part of it.
      GroupKind kind = t.kind;
      Shape shape = t.shape;
      if (pg.kind == GroupKind::Row && t.kind == GroupKind::Pointwise) {
        kind = GroupKind::Row;
        shape = pg.shape;
      }
      const std::string what = "fuse " + g.nodes_str(g.groups[p].nodes) + " with " + g.nodes_str(g.groups[target].nodes);
      t.kind = kind;
      t.shape = shape;
      merge_groups(trial, target, p);
      std::string why = check_group(trial, target);
      if (why.empty() && has_cycle(trial)) why = "would create a cycle between kernels";
      if (!why.empty()) {
        g.decide("keep " + g.nodes_str(g.groups[p].nodes) + " apart from #" + std::to_string(j), why);
        continue;
      }
      g = std::move(trial);
      g.decide(what, std::string("one ") + std::string(group_kind_name(kind)) + " kernel saves a launch and the round trip of the values between them");
    }
  }
  // Shapes of the final groups (full_space was filled by the last check of each group).
  for (const Group& gr : g.groups)
    if (fusible(gr)) check_group(g, gr.id);
}

}  // namespace livefuse::planner
