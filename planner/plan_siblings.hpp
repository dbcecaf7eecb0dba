#pragma once
// Running a merged sibling GEMM step (GemmStep::siblings): plan.cpp's step dispatch calls these.
// Each returns false when the merged form cannot run this time (its concatenated weights could
// not be had during a graph capture, say); the caller then runs the siblings one by one.
#include <memory>
#include <span>
#include <vector>

#include "planner/plan.hpp"

namespace livefuse::planner::detail {

bool run_merged_gemm_cpu(const PlannedSegment& p, const GemmStep& gs,
                         std::span<const Tensor> values);
bool launch_merged_gemm_cuda(const PlannedSegment& p, const GemmStep& gs,
                             std::span<const Tensor> values, void* stream);
// The merged GEMM as one few-row GEMV: with its norm prologue (GemmStep::prologue, `norm` the
// norm's call, or null; round_first for a chain: GemmStep::prologue_chain), writing every
// sibling's output -- or, for a Gated step, act(gate) * up into its final value. False: nothing
// launched; the caller runs the norm, the merged GEMM, then the tail.
bool launch_merged_gemv_cuda(const PlannedSegment& p, const GemmStep& gs, std::span<const Tensor> values,
                             const OpCall* norm, bool round_first, void* stream);
// The merged GEMM as one one-row GEMV that also applies the step's rotary (GemmStep::rotary) to
// the siblings it rotates, writing the rotary's results in their place (rotary_epilogue.hpp);
// `norm` and round_first as above. False: nothing launched; the caller runs the step without
// the rotary, then the rotary's kernel.
bool launch_merged_gemv_rotary_cuda(const PlannedSegment& p, const GemmStep& gs, std::span<const Tensor> values,
                                    const OpCall* norm, bool round_first, void* stream);
// plan.cpp: a pending Materialized value gets dense storage (`s`, or a fresh allocation).
void ensure_storage(const Tensor& t, std::shared_ptr<Storage> s = nullptr);
// A merged step whose siblings have one width and need no split: one strided-batched GEMM (over
// few rows, the GEMV) writes each output in place, the outputs back to back in one run.
bool batched_siblings(const Segment& seg, const GemmStep& gs);
// The value ids of each batched merged step's outputs (batched_siblings): FusedPlan's binding
// sets allocate each list as one run of storages (allocate_storage_run).
std::vector<std::vector<int>> sibling_output_runs(const PlannedSegment& p);

}  // namespace livefuse::planner::detail
