// Pass "horizontal": pointwise groups with no path between them (siblings reading the same
// input, or just independent) share one launch: each keeps its own iteration space and a
// range of blocks. Saves a launch per merged group; bytes moved are unchanged.
#include "planner/passes.hpp"

namespace livefuse::planner {

void pass_horizontal(FusionGraph& g) {
  if (!g.opts.horizontal) return;
  for (int id : g.topo_groups()) {
    if (g.groups[id].kind != GroupKind::Pointwise || g.groups[id].tail_of >= 0 || g.groups[id].horizontal >= 0) continue;
    bool placed = false;
    for (size_t h = 0; h < g.horizontal.size() && !placed; ++h) {
      bool independent = true;
      size_t io = group_inputs(g, g.groups[id]).size() + group_outputs(g, g.groups[id]).size();
      for (int b : g.horizontal[h]) {
        independent = independent && !g.reaches(id, b) && !g.reaches(b, id);
        io += group_inputs(g, g.groups[b]).size() + group_outputs(g, g.groups[b]).size();
      }
      if (!independent || static_cast<int>(io) > g.opts.limits.max_io) continue;
      FusionGraph trial = g;
      trial.horizontal[h].push_back(id);
      trial.groups[id].horizontal = static_cast<int>(h);
      if (has_cycle(trial)) continue;
      g = std::move(trial);
      g.decide("run " + g.nodes_str(g.groups[id].nodes) + " in the launch of " +
                   g.nodes_str(g.groups[g.horizontal[h].front()].nodes),
               "independent pointwise groups: one launch instead of two");
      placed = true;
    }
    if (!placed) {
      g.horizontal.push_back({id});
      g.groups[id].horizontal = static_cast<int>(g.horizontal.size()) - 1;
    }
  }
  // Sets of one are no horizontal fusion.
  for (auto& h : g.horizontal)
    if (h.size() == 1) g.groups[h[0]].horizontal = -2;
  std::vector<std::vector<int>> kept;
  for (auto& h : g.horizontal) {
    if (h.size() < 2) continue;
    for (int id : h) g.groups[id].horizontal = static_cast<int>(kept.size());
    kept.push_back(h);
  }
  for (Group& gr : g.groups)
    if (gr.horizontal == -2) gr.horizontal = -1;
  g.horizontal = std::move(kept);
}

}  // namespace livefuse::planner
