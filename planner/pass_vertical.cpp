// Pass "vertical": producer -> consumer fusion. Nodes are visited in order; a pointwise or row
// node starts as its own group and then tries to absorb the groups that produce its inputs,
// one at a time, on a trial copy: the merge is kept only if the result is a valid kernel
// (check_group: shapes, per-row vs per-element values, io limit, the strategy's can_plan) and
// the group graph stays acyclic. Every refusal is a Decision.
#include <algorithm>

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
