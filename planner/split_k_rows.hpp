#pragma once
// Pass "split_k_rows" (CUDA): a linear whose only reader is one row kernel -- a layer's FFN2,
// read by the residual add + layer_norm of the seam -- and that cuBLASLt would run as a split-K
// GEMM (partial products over slices of K, then a reduction kernel adding them up: 3.7 of a BERT
// layer's 49 us on the H200) instead writes its f32 partial products into the value's storage
// (cuda::run_linear_partials), and the row kernel adds them up with the bias where it loads the
// product: one launch fewer, and the product is not written in its dtype and read back.
// Semantics: the row kernel rounds sum + bias to the product's dtype before anything reads it,
// as cuBLASLt's epilogue rounds; only the order the partials are summed in differs, as between
// any two GEMM algorithms.
#include "kernels/jit/kernel_spec.hpp"
#include "planner/plan.hpp"

namespace livefuse::planner {

// `part` with input `k` (the product) read as the sum of `slices` f32 inputs k .. k + slices - 1
// (the inputs after k move up by slices - 1) plus, when `with_bias`, an input appended last of
// the product's dtype (the bias, broadcast over rows), rounded to the product's dtype.
jit::KernelPart read_as_partials(const jit::KernelPart& part, int k, int slices, bool with_bias);

// The pass over a planned segment (planner.cpp runs it after the steps are made): needs
// opts.cuda and opts.split_k.
void fold_split_k_into_rows(PlannedSegment& p, const PlannerOptions& opts);

// `reader` (a row kernel adding partial products) did not compile and runs unfused: the GEMM
// steps among `steps` that write its partials write their product again.
void undo_partials(PlannedSegment& p, std::vector<Step>& steps, const FusedKernelStep& reader);

}  // namespace livefuse::planner
