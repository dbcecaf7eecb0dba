#pragma once
// Text views of a report for livefuse-inspect. Output depends only on the snapshot (no clock,
// no terminal width), so recorded reports render the same everywhere (the golden tests rely
// on it).
#include <string>

#include "livefuse/inspect.hpp"

namespace lfinspect {

struct RenderOptions {
  int decisions = 8;        // how many recent decisions the summary lists
  bool all_config = false;  // every variable, not only those set in the environment
};

// Header, plan table, counters, configuration, recent decisions.
std::string render_summary(const livefuse::Snapshot& s, const RenderOptions& o);
// One plan in full: ops, groups, kernels with generated source, timings, graphs, history.
std::string render_plan(const livefuse::Snapshot& s, const livefuse::PlanInfo& p);

}  // namespace lfinspect
