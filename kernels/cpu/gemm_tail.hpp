#pragma once
// A plan's GEMM step on the CPU with its pointwise tail applied inside the GEMM's tile loop,
// while the results are still in the f32 tile: no second pass over the output.
#include <span>

#include "kernels/jit/kernel_spec.hpp"
#include "livefuse/tensor.hpp"
#include "runtime/op_call.hpp"

namespace livefuse::cpu {

// `tail` is the step's fused tail (one pointwise part); its input `product_input` is the GEMM's
// result, `inputs` are the tail's input tensors (that one included), `out` its only output.
// The tile loop takes tails of the form [unary op of the product] [+ a tensor of the output's
// shape], all in f32, writing `out` dense; the GEMM's own result is then never written (the
// planner gives a GEMM a tail only when nothing else reads its result). Returns false, having
// run nothing, for any other tail.
bool run_gemm_with_tail(const OpCall& call, const jit::KernelPart& tail, int product_input,
                        std::span<const Tensor> inputs, const Tensor& out);

// GEMMs run with their tail in the tile loop so far (for tests and benchmarks).
uint64_t gemm_tails_run();

}  // namespace livefuse::cpu
