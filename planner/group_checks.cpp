// Checks shared by the passes: is a group a valid fused kernel (shapes and row/column spaces),
// cycles between groups, and a group's inputs and outputs.
#include <algorithm>
#include <set>

#include "livefuse/error.hpp"
#include "planner/passes.hpp"
#include "planner/strategy.hpp"

namespace livefuse::planner {

void merge_groups(FusionGraph& g, int into, int from) {
  if (into == from) return;
  Group& a = g.groups[into];
  Group& b = g.groups[from];
  for (int j : b.nodes) {
    a.nodes.push_back(j);
    g.group_of[j] = into;
  }
  std::sort(a.nodes.begin(), a.nodes.end());
  b.nodes.clear();
  b.alive = false;
}

std::vector<int> group_inputs(const FusionGraph& g, const Group& gr) {
  std::set<int> in;
  for (int j : gr.nodes)
    for (const ValueRef& r : g.seg.nodes[j].inputs)
      if (g.producer_group(r) != gr.id) in.insert(g.seg.value_id(r));
  return {in.begin(), in.end()};
}

std::vector<int> group_outputs(const FusionGraph& g, const Group& gr) {
  std::vector<int> out;
  for (int j : gr.nodes) {
    for (int k = 0; k < static_cast<int>(g.seg.nodes[j].outputs.size()); ++k) {
      const ValueRef r = ValueRef::of(j, k);
      const int v = g.seg.value_id(r);
      bool needed = g.seg.is_output(r);
      for (const auto& [user, idx] : g.users[v]) needed = needed || (g.group_of[user] != gr.id && g.role[user] != Role::Dead);
      if (!g.value_kind.empty() && g.value_kind[v] == ValueKind::Materialized) needed = true;
      if (needed) out.push_back(v);
    }
  }
  return out;
}

std::vector<std::pair<int, int>> live_users(const FusionGraph& g, int v) {
  std::vector<std::pair<int, int>> out;
  for (const auto& u : g.users[v])
    if (g.role[u.first] != Role::Dead) out.push_back(u);
  return out;
}

int only_user(const FusionGraph& g, int j) {
  const ValueRef r = ValueRef::of(j);
  if (g.seg.is_output(r)) return -1;
  const auto users = live_users(g, g.seg.value_id(r));
  return users.size() == 1 ? users[0].first : -1;
}

bool is_node(const FusionGraph& g, const ValueRef& r, OpId op) {
  return !r.is_external() && g.seg.nodes[r.node].op == op;
}

int add_template_group(FusionGraph& g, GroupKind kind, const std::vector<int>& nodes, const Shape& shape) {
  Group gr;
  gr.id = static_cast<int>(g.groups.size());
  gr.kind = kind;
  gr.nodes = nodes;
  gr.shape = shape;
  for (int j : gr.nodes) g.group_of[j] = gr.id;
  g.groups.push_back(gr);
  return gr.id;
}

bool has_cycle(const FusionGraph& g) {
  size_t units = 0;
  std::vector<bool> counted(g.groups.size(), false);
  for (const Group& gr : g.groups) {
    if (!gr.alive || gr.tail_of >= 0) continue;
    if (gr.horizontal >= 0) {
      const int head = g.horizontal[gr.horizontal].front();
      if (counted[head]) continue;
      counted[head] = true;
    }
    ++units;
  }
  return g.topo_groups().size() != units;
}

namespace {

std::string check_row_group(FusionGraph& g, const Group& gr) {
  const Shape& f = gr.shape;
  const Shape keep = row_keep_shape(f), flat = row_flat_shape(f);
  bool any_row_op = false;
  for (int j : gr.nodes) {
    const SegmentNode& n = g.seg.nodes[j];
    const Shape& out = n.outputs[0].shape;
    auto in_group = [&](const ValueRef& r) { return g.producer_group(r) == gr.id; };
    auto is_full = [&](const ValueRef& r) { return g.full_space[r.node]; };
    if (g.role[j] == Role::Row) {
      any_row_op = true;
      const ValueRef& x = n.inputs[0];
      if (!(g.seg.shape(x) == f)) return "reduces a value of shape " + g.seg.shape(x).str() + ", the kernel's rows are " + f.str();
      for (const ValueRef& r : n.inputs)
        if (in_group(r) && !is_full(r)) return "reduction input #" + std::to_string(r.node) + " is a per-row value";
      const bool normalization = op_info(n.op).category == OpCategory::Normalization;
      g.full_space[j] = normalization;
      if (!normalization && !(out == keep || out == flat)) return "reduction result shape " + out.str();
      continue;
    }
    if (out == f) {
      g.full_space[j] = true;
      for (const ValueRef& r : n.inputs)
        if (in_group(r) && !is_full(r) && !(g.seg.shape(r) == keep))
          return detail::concat("#", j, " broadcasts a per-row value of shape ", g.seg.shape(r).str(),
                                " over the columns (needs keepdim shape ", keep.str(), ")");
    } else if (out == keep || out == flat) {
      g.full_space[j] = false;
      for (const ValueRef& r : n.inputs)
        if (in_group(r) && (is_full(r) || !(g.seg.shape(r) == out)))
          return detail::concat("#", j, " mixes per-row and per-element values");
    } else {
      return detail::concat("#", j, " has shape ", out.str(), ", neither the rows ", f.str(), " nor a row result");
    }
  }
  if (!any_row_op) return "row group without a reduction";
  return "";
}

}  // namespace

std::string check_group(FusionGraph& g, int id) {
  const Group& gr = g.groups[id];
  if (gr.kind == GroupKind::Pointwise) {
    for (int j : gr.nodes) {
      g.full_space[j] = true;
      if (!(g.seg.nodes[j].outputs[0].shape == gr.shape))
        return detail::concat("#", j, " has shape ", g.seg.nodes[j].outputs[0].shape.str(), ", the group iterates over ",
                              gr.shape.str());
    }
  } else if (gr.kind == GroupKind::Row) {
    if (std::string why = check_row_group(g, gr); !why.empty()) return why;
  } else {
    return "";
  }
  const size_t io = group_inputs(g, gr).size() + group_outputs(g, gr).size();
  if (static_cast<int>(io) > g.opts.limits.max_io)
    return std::to_string(io) + " inputs and outputs exceed the kernel limit of " + std::to_string(g.opts.limits.max_io);
  const Strategy& s = strategy_for(gr.kind);
  if (auto why = s.can_plan(g, gr)) return *why;
  return "";
}

}  // namespace livefuse::planner
