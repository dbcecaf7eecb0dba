#include "planner/fusion_graph.hpp"

#include <algorithm>
#include <functional>
#include <set>
#include <sstream>

namespace livefuse::planner {

std::string_view role_name(Role r) {
  switch (r) {
    case Role::Pointwise: return "pointwise";
    case Role::Row: return "row";
    case Role::Gemm: return "gemm";
    case Role::View: return "view";
    case Role::Eager: return "eager";
    case Role::Opaque: return "opaque";
    case Role::Dead: return "dead";
  }
  return "?";
}

std::string_view group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::Pointwise: return "pointwise";
    case GroupKind::Row: return "row";
    case GroupKind::Gemm: return "gemm";
    case GroupKind::View: return "view";
    case GroupKind::Eager: return "eager";
    case GroupKind::Opaque: return "opaque";
    case GroupKind::Attention: return "attention";
    case GroupKind::Rotary: return "rotary";
  }
  return "?";
}

std::string_view value_kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::External: return "external";
    case ValueKind::Materialized: return "materialized";
    case ValueKind::View: return "view";
    case ValueKind::Virtual: return "virtual";
    case ValueKind::Dead: return "dead";
  }
  return "?";
}

std::string_view epilogue_name(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::None: return "none";
    case GemmEpilogue::Bias: return "BIAS";
    case GemmEpilogue::ReluBias: return "RELU_BIAS";
    case GemmEpilogue::GeluBias: return "GELU_BIAS";
    case GemmEpilogue::Residual: return "C (residual)";
    case GemmEpilogue::BiasResidual: return "BIAS + C (residual)";
    case GemmEpilogue::Gated: return "gated (act(gate) * up, GEMV)";
    case GemmEpilogue::BiasAct: return "bias + activation (tensor-core GEMM)";
  }
  return "?";
}

Shape row_keep_shape(const Shape& f) {
  Shape s = f;
  if (s.rank > 0) s.v[s.rank - 1] = 1;
  return s;
}

Shape row_flat_shape(const Shape& f) {
  Shape s = f;
  if (s.rank > 0) s.rank -= 1;
  return s;
}

namespace {
std::vector<std::set<int>> group_edges(const FusionGraph& g) {
  std::vector<std::set<int>> out(g.groups.size());
  for (int j = 0; j < static_cast<int>(g.seg.nodes.size()); ++j) {
    const int b = g.group_of[j];
    if (b < 0) continue;
    for (const ValueRef& r : g.seg.nodes[j].inputs) {
      const int a = g.producer_group(r);
      if (a >= 0 && a != b) out[a].insert(b);
    }
  }
  // A gemm and its tail run as one step: edges of either are edges of both.
  for (const Group& gr : g.groups) {
    if (!gr.alive || gr.tail < 0) continue;
    for (int t : out[gr.tail])
      if (t != gr.id) out[gr.id].insert(t);
  }
  return out;
}
}  // namespace

bool FusionGraph::reaches(int from, int to) const {
  const auto edges = group_edges(*this);
  std::vector<bool> seen(groups.size(), false);
  std::vector<int> stack = {from};
  while (!stack.empty()) {
    const int x = stack.back();
    stack.pop_back();
    for (int y : edges[x]) {
      if (y == to) return true;
      if (!seen[y]) {
        seen[y] = true;
        stack.push_back(y);
      }
    }
  }
  return false;
}

std::vector<int> FusionGraph::topo_groups() const {
  // Horizontal sets and gemm tails are emitted as one unit: order units by their first node,
  // then make the order respect every edge between units (Kahn over unit ids).
  std::vector<int> unit(groups.size(), -1);
  for (const Group& g : groups) {
    if (!g.alive) continue;
    unit[g.id] = g.id;
  }
  for (const auto& h : horizontal)
    for (int id : h) unit[id] = h.front();
  for (const Group& g : groups)
    if (g.alive && g.tail >= 0) unit[g.tail] = g.id;
  const auto edges = group_edges(*this);
  std::vector<std::set<int>> uedges(groups.size());
  std::vector<int> indeg(groups.size(), 0);
  for (size_t a = 0; a < groups.size(); ++a) {
    if (unit[a] < 0) continue;
    for (int b : edges[a]) {
      const int ua = unit[a], ub = unit[b];
      if (ub < 0 || ua == ub) continue;
      if (uedges[ua].insert(ub).second) ++indeg[ub];
    }
  }
  std::vector<int> units;
  for (size_t a = 0; a < groups.size(); ++a)
    if (unit[a] == static_cast<int>(a)) units.push_back(static_cast<int>(a));
  auto first_node = [&](int u) { return groups[u].nodes.empty() ? 0 : groups[u].nodes.front(); };
  std::vector<int> order;
  std::vector<bool> done(groups.size(), false);
  while (order.size() < units.size()) {
    int best = -1;
    for (int u : units)
      if (!done[u] && indeg[u] == 0 && (best < 0 || first_node(u) < first_node(best))) best = u;
    if (best < 0) break;  // a cycle: the passes never build one (checked by the caller)
    done[best] = true;
    order.push_back(best);
    for (int v : uedges[best]) --indeg[v];
  }
  return order;
}

std::string FusionGraph::nodes_str(const std::vector<int>& nodes) const {
  std::ostringstream os;
  bool contiguous = nodes.size() > 2;
  for (size_t i = 1; i < nodes.size(); ++i) contiguous &= nodes[i] == nodes[i - 1] + 1;
  if (contiguous) {
    os << "#" << nodes.front() << "..#" << nodes.back();
  } else {
    for (size_t i = 0; i < nodes.size(); ++i) os << (i ? ", #" : "#") << nodes[i];
  }
  return os.str();
}

bool FusionGraph::template_writes(const Group& gr, int v) const {
  if (gr.kind == GroupKind::Attention) {
    // Its result, and the caches it grows (AttentionOperands::k_append).
    const AttentionOperands& o = attention[gr.attention];
    return o.out == v || (o.k_append >= 0 && (v == o.k || v == o.v));
  }
  if (gr.kind == GroupKind::Rotary)
    for (const RotaryOperands& r : rotary[gr.rotary])
      if (r.out == v) return true;
  return false;  // not a template group: it has no template outputs (and gr.rotary is -1)
}

std::string FusionGraph::dump() const {
  std::ostringstream os;
  os << seg.str();
  for (const Group& g : groups) {
    if (!g.alive) continue;
    os << "  group " << g.id << " " << group_kind_name(g.kind) << " [" << nodes_str(g.nodes) << "]";
    if (g.kind == GroupKind::Pointwise || g.kind == GroupKind::Row) os << " over " << g.shape.str();
    if (g.tail >= 0) os << " tail=group " << g.tail << " epilogue=" << epilogue_name(g.epilogue);
    if (g.horizontal >= 0) os << " horizontal=" << g.horizontal;
    os << "\n";
  }
  if (!value_kind.empty()) {
    os << "  values:";
    for (size_t v = 0; v < value_kind.size(); ++v) os << " " << v << "=" << value_kind_name(value_kind[v]);
    os << "\n";
  }
  return os.str();
}

}  // namespace livefuse::planner
