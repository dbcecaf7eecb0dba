// Pass "cost": a fused group must pay for itself. With bytes and launches from its strategy
// and the eager numbers for its nodes, time = bytes / bandwidth + launches * launch cost; a
// group that would be slower (a row kernel whose rows do not fit the cache re-reads its
// inputs once per pass) is split back into single nodes. Every outcome is a Decision.
#include <cstdio>

#include "planner/passes.hpp"
#include "planner/strategy.hpp"

namespace livefuse::planner {
namespace {

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

void split(FusionGraph& g, int id) {
  const std::vector<int> nodes = g.groups[id].nodes;
  for (size_t k = 1; k < nodes.size(); ++k) {
    const int j = nodes[k];
    Group gr;
    gr.id = static_cast<int>(g.groups.size());
    gr.kind = g.role[j] == Role::Row ? GroupKind::Row : GroupKind::Pointwise;
    gr.nodes = {j};
    const SegmentNode& n = g.seg.nodes[j];
    gr.shape = g.role[j] == Role::Row ? g.seg.shape(n.inputs[0]) : n.outputs[0].shape;
    g.groups.push_back(gr);
    g.group_of[j] = gr.id;
  }
  Group& first = g.groups[id];
  first.nodes = {nodes[0]};
  const int j0 = nodes[0];
  first.kind = g.role[j0] == Role::Row ? GroupKind::Row : GroupKind::Pointwise;
  first.shape = g.role[j0] == Role::Row ? g.seg.shape(g.seg.nodes[j0].inputs[0]) : g.seg.nodes[j0].outputs[0].shape;
  for (int j : nodes) check_group(g, g.group_of[j]);
}

}  // namespace

void pass_cost(FusionGraph& g) {
  const size_t n_groups = g.groups.size();
  for (size_t id = 0; id < n_groups; ++id) {
    const Group& gr = g.groups[id];
    if (!gr.alive || (gr.kind != GroupKind::Pointwise && gr.kind != GroupKind::Row)) continue;
    const int gid = static_cast<int>(id);
    const StrategyParams p = strategy_for(gr.kind).params(g, std::span<const int>(&gid, 1));
    double eager = 0;
    for (int j : gr.nodes) eager += eager_node_bytes(g.seg, j);
    const int n = static_cast<int>(gr.nodes.size());
    const double t_fused = g.opts.cost.time_us(p.bytes, 1);
    const double t_eager = g.opts.cost.time_us(eager, n);
    const std::string what = std::string(group_kind_name(gr.kind)) + " kernel " + g.nodes_str(gr.nodes);
    if (n > 1 && t_fused >= t_eager) {
      g.decide("split " + what, "fused would move " + mib(p.bytes) + " vs " + mib(eager) + " eagerly (" + p.detail + ")");
      split(g, gid);
      continue;
    }
    if (n > 1)
      g.decide(what, "saves " + std::to_string(n - 1) + " launches; " + mib(eager) + " -> " + mib(p.bytes) + " (" +
                         p.detail + ")");
  }
}

}  // namespace livefuse::planner
