#pragma once
// matmul and linear through cuBLASLt.
#include <span>

#include "runtime/op_call.hpp"

namespace livefuse::cuda {

void run_matmul(const OpCall& call, const Tensor& out, void* stream);
void run_linear(const OpCall& call, const Tensor& out, void* stream);

// A matmul/linear call with an activation (and bias) applied in cuBLASLt's epilogue, written
// to the dense `out`: act(call's product (+ bias)), or call's product (+ bias) + residual (read
// as cuBLASLt's C). `act` is an LtAct (gemm_lt.hpp). False when the epilogue cannot take it
// (layouts, dtypes, K == 0): nothing was launched then.
bool run_gemm_epilogue(const OpCall& call, uint8_t act, const Tensor* bias,
                       const Tensor* residual, const Tensor& out, void* stream);

// Bytes of cuBLASLt workspace each stream gets (allocated on the stream's first GEMM).
inline constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

}  // namespace livefuse::cuda
