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
// Makes this thread's per-thread kernel buffers now. A thread_local destroyed at thread exit
// goes in the reverse order of construction: an object made right after this call (the
// matcher's thread state, whose destructor runs deferred calls) is destroyed while the
// buffers those calls use are still alive.
void prepare_thread();
}  // namespace livefuse::cpu

namespace livefuse::cuda {
// Enqueues the op on `stream` (a cudaStream_t). Never synchronises.
void run(const OpCall& call, std::span<const Tensor> outputs, void* stream);
// dsts[i] <- srcs[i] for every i (same shapes and dtypes, any strides; none reads what another
// writes) in as few launches as their kinds allow: held in-place writes (runtime/write_batch.hpp).
void run_copies(std::span<const Tensor> dsts, std::span<const Tensor> srcs, void* stream);
}  // namespace livefuse::cuda
