#pragma once
// The planner's front door: Segment -> PlannedSegment (passes, then each group emitted by its
// strategy in dependency order), and compile_plan for CUDA.
#include "kernels/jit/kernel_compiler.hpp"
#include "planner/plan.hpp"

namespace livefuse::planner {

// Options for plans that run on `device`: its cost model, LIVEFUSE_FUSION, and (with
// LIVEFUSE_LOG=debug) the IR printed to stderr after every pass.
PlannerOptions default_planner_options(Device device);

PlannedSegment plan_segment(const Segment& seg, const PlannerOptions& opts);
inline PlannedSegment plan_segment(const Segment& seg) { return plan_segment(seg, default_planner_options(Device::cpu())); }

// Compiles every fused kernel of `p` (on the compiler's arena; this waits), all of them
// submitted as one batch: one NVRTC program, and one link for the pointwise kernels the op
// library covers (LIVEFUSE_JIT, kernel_compiler.hpp). A kernel that fails to compile (or spills in
// every variant) is replaced by single steps for its nodes, with the reason as a Decision.
// Returns the number of kernels that failed.
int compile_plan(PlannedSegment& p, jit::KernelCompiler& compiler, const jit::CompileOptions& opts);
// The same for several plans, their kernels in one batch; returns the failures of each plan.
std::vector<int> compile_plans(const std::vector<PlannedSegment*>& plans, jit::KernelCompiler& compiler,
                               const jit::CompileOptions& opts);

}  // namespace livefuse::planner
