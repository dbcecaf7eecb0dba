// Pass "materialize": which values get memory. Observable values, values crossing from one step
// to another, results of unfused steps and the sources of views are Materialized; layout
// results are Views of their source; the rest live inside one fused kernel (Virtual). An
// attention step writes only its result: scores, probabilities and absorbed views are Virtual;
// a rotary step only its results (rotate_half(x) and the products are Virtual).
#include "planner/passes.hpp"

namespace livefuse::planner {

void pass_materialize(FusionGraph& g) {
  const int nv = g.seg.num_values();
  g.value_kind.assign(nv, ValueKind::Virtual);
  for (int v = 0; v < nv; ++v) {
    const ValueRef r = g.seg.value_ref(v);
    if (r.is_external()) {
      g.value_kind[v] = ValueKind::External;
      continue;
    }
    const Role role = g.role[r.node];
    const int gr = g.group_of[r.node];
    if (gr >= 0 && is_template(g.groups[gr].kind)) {
      // A template step: only what it writes has memory; its absorbed views are Virtual too.
      g.value_kind[v] = g.template_writes(g.groups[gr], v) ? ValueKind::Materialized : ValueKind::Virtual;
      continue;
    }
    if (role == Role::Dead) {
      g.value_kind[v] = ValueKind::Dead;
      continue;
    }
    if (role == Role::View) {
      g.value_kind[v] = ValueKind::View;
      continue;
    }
    const GroupKind gk = g.groups[g.group_of[r.node]].kind;
    bool mat = g.seg.is_output(r) || (gk != GroupKind::Pointwise && gk != GroupKind::Row);
    for (const auto& [u, idx] : g.users[v])
      mat = mat || (g.role[u] != Role::Dead && g.group_of[u] != g.group_of[r.node]);
    g.value_kind[v] = mat ? ValueKind::Materialized : ValueKind::Virtual;
  }
  // A view reads its source's memory: the source (through chains of views) must have some.
  for (int j = static_cast<int>(g.seg.nodes.size()) - 1; j >= 0; --j) {
    if (g.role[j] != Role::View || g.value_kind[g.seg.value_id(ValueRef::of(j))] != ValueKind::View)
      continue;
    const int src = g.seg.value_id(g.seg.nodes[j].inputs[0]);
    if (g.value_kind[src] == ValueKind::Virtual) g.value_kind[src] = ValueKind::Materialized;
  }
}

}  // namespace livefuse::planner
