#pragma once
// Counter groups of the report (livefuse::counters(), runtime/inspect_registry.hpp) that the
// planning service registers when it starts: what the kernel compiler and its caches did, and
// what the plans' CUDA graphs did (replays, captures, and captures that could not be kept).
namespace livefuse::planner {

void register_kernel_cache_counters();  // group "kernel_cache"
void register_graph_counters();         // group "graphs"

}  // namespace livefuse::planner
