#pragma once
// The CPU backend's op families; cpu_backend.cpp dispatches an OpCall to one of them.
// Each fills dense contiguous outputs from inputs that may be arbitrary strided views.
#include <memory>
#include <span>

#include "kernels/cpu/cpu_common.hpp"

namespace livefuse::cpu {

void run_elementwise(const OpCall& call, const Tensor& out);  // table rows and custom ops
void run_reduction(const OpCall& call, const Tensor& out);    // sum, mean, max, argmax
void run_topk(const OpCall& call, std::span<const Tensor> outputs);  // values, indices
void run_softmax(const OpCall& call, const Tensor& out);
void run_layer_norm(const OpCall& call, const Tensor& out);
void run_rms_norm(const OpCall& call, const Tensor& out);
void run_matmul(const OpCall& call, const Tensor& out);
void run_linear(const OpCall& call, const Tensor& out);
void run_layout(const OpCall& call, const Tensor& out);  // contiguous, concat, view ops
void run_embedding(const OpCall& call, const Tensor& out);
void run_opaque(const OpCall& call, std::span<const Tensor> outputs);

// Copies `src` into `dst` (same shape and dtype, any strides on both sides).
void strided_copy(const View& src, const View& dst);

// A large view whose innermost dim is strided while another dim has unit stride (a transposed
// view) would be read one cache line per element by row-wise kernels; such a view is copied
// into `temp` (blocked copy, several times cheaper) and the dense copy is returned. Any other
// view is returned as is.
View dense_if_transposed(const View& v, std::unique_ptr<std::byte[]>& temp);

}  // namespace livefuse::cpu
