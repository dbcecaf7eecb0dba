#pragma once
// A decode layer's rotary inside its Q/K/V GEMV. After pass_gemm_siblings made Q, K and V one
// merged GEMM and pass_rotary made the rotaries of q and k one step, a one-row product (a decode
// step at batch 1) can apply the rotary as the GEMV writes q and k (kernels/cuda/gemv.hpp,
// GemvRope): a head's columns j and j + d/2 are computed by one block, their sums meeting in
// shared memory, and the rotary is no launch of its own (Llama: one of a layer's eight). The
// values stay eager's bit for bit: the GEMV sums as it does for the linear alone, and rounds as
// the linear, the two muls and the add round.
//
// Planning folds the RotaryStep into the GemmStep (GemmStep::rotary) where the shapes allow it;
// running checks the bound tensors again, and a call the GEMV cannot take runs the GEMM, then
// the rotary's own kernel -- the step's values are the same either way.
#include <span>
#include <vector>

#include "kernels/rotary_args.hpp"
#include "planner/plan.hpp"
#if LIVEFUSE_HAS_CUDA
#include "kernels/cuda/gemv.hpp"
#endif

namespace livefuse::planner {

// CUDA, one-row products: each rotary step whose parts rotate the views of a merged GEMM's
// first siblings (q and k of Q/K/V), and nothing else reads those outputs, moves into that GEMM
// step. Called by plan_segment after the norms fold (the GEMV then normalizes, multiplies and
// rotates in one launch).
void fold_rotary_epilogues(PlannedSegment& p);

#if LIVEFUSE_HAS_CUDA
// The GEMV's rotary for a GEMM step's bound rotary parts `parts` (bind_rotary) with their
// results `results`, the merged product's sibling outputs `outs` (in column order) and its one
// row: false where the GEMV cannot take it (layouts, a part that is not a dense view of a
// leading sibling's output, parts that disagree on cos / sin). On success each rotated
// sibling's entry of `outs` is replaced by its rotary result, seen in the sibling's shape:
// what the GEMV writes.
bool gemv_rope_of(std::span<const RotaryArgs> parts, std::span<const Tensor> results, std::vector<Tensor>& outs,
                  cuda::GemvRope* rope);
#endif

}  // namespace livefuse::planner
