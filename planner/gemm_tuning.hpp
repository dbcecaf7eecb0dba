#pragma once
// Timed cuBLASLt algorithm choice for a CUDA plan's GEMMs, at plan time, on the planner thread
// (kernels/cuda/gemm_lt.cpp, [ Note -- tuned algorithms ]). The service calls it after a plan's
// kernels are compiled and loaded, before the plan is published.
#include "livefuse/device.hpp"
#include "planner/plan.hpp"

namespace livefuse::planner {

// Runs every GemmStep of `p` once on scratch operands laid out as the plan's (dense node
// outputs, externals with their representative strides, views built by the view ops
// themselves) on a stream of the planner's own, under cuda::GemmTuning: each GEMM shape the
// plan will run gets its fastest algorithm into the process-wide table the plan's launches
// read. Never throws (a failure is recorded as a decision and counted; the plan then runs the
// heuristic's choice). Does nothing without CUDA, with LIVEFUSE_GEMM_TUNE=0, or on a CPU device.
void tune_plan_gemms(const PlannedSegment& p, Device d);

// Registers the "gemm_tuning" counter group once (CUDA builds; the service calls it).
void register_gemm_tuning_counters();

}  // namespace livefuse::planner
