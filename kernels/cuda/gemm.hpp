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

// The same with a layer_norm / rms_norm call `norm` whose output is the linear's input applied
// first, inside the few-row GEMV (gemv.hpp, its prologue): out = epilogue(norm(x) W^T (+ b)).
// The norm's output is not written. False when the GEMV cannot take it (rows, layouts, dtypes):
// nothing was launched then; the caller runs the norm and the GEMM.
bool run_gemv_norm(const OpCall& norm, const OpCall& call, uint8_t act, const Tensor* bias,
                   const Tensor* residual, const Tensor& out, void* stream);

// A merged sibling linear `call` (its weight the siblings' concatenated, its bias too) as one
// few-row GEMV writing each sibling's dense output: the product's columns in the order of
// `outs`, their widths `outs`' last dims; with `norm` (or null) in its prologue as above. False:
// nothing was launched (the caller's product + split path runs).
bool run_gemv_split(const OpCall* norm, const OpCall& call, std::span<const Tensor> outs,
                    void* stream);

// A merged sibling linear `call` (weights [parts * N, K] concatenated, bias [parts * N] too) as
// one strided-batched GEMM: batch i multiplies the input by weight rows [i N, (i + 1) N) and
// writes `outs[i]`, so every sibling's output is written dense where it lives, and no product
// is split afterwards. Takes siblings of one width N whose outputs are dense, of one dtype, and
// evenly spaced in memory (outs[i] at outs[0] + i * stride: FusedPlan allocates them so); the
// input's rows must fold to one evenly spaced run read along K. False: nothing was launched.
bool run_sibling_linears(const OpCall& call, std::span<const Tensor> outs, void* stream);

// Bytes of cuBLASLt workspace each stream gets (allocated on the stream's first GEMM).
inline constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

}  // namespace livefuse::cuda
