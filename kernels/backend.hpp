#pragma once
// The eager backends. The executor validates the call (infer_outputs), allocates each output
// as a dense contiguous tensor on the call's device, and asks the backend to fill them.
// Inputs may be views (any strides, offset); a backend materialises where it must.
// Layout ops that are pure views (reshape of a contiguous tensor, permute, slice) never reach
// a backend; `contiguous` and `concat` do.
#include <span>

#include "runtime/op_call.hpp"

namespace livefuse::cpu {
void run(const OpCall& call, std::span<const Tensor> outputs);
}  // namespace livefuse::cpu

namespace livefuse::cuda {
// Enqueues the op on `stream` (a cudaStream_t). Never synchronises.
void run(const OpCall& call, std::span<const Tensor> outputs, void* stream);
}  // namespace livefuse::cuda
