#pragma once
// matmul and linear through cuBLASLt.
#include <span>

#include "runtime/op_call.hpp"

namespace livefuse::cuda {

void run_matmul(const OpCall& call, const Tensor& out, void* stream);
void run_linear(const OpCall& call, const Tensor& out, void* stream);

// Bytes of cuBLASLt workspace each stream gets (allocated on the stream's first GEMM).
inline constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

}  // namespace livefuse::cuda
