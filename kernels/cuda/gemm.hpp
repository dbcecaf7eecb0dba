#pragma once
// matmul and linear through cuBLASLt.
#include <span>

#include "kernels/cuda/gemm_tc.hpp"
#include "runtime/op_call.hpp"

namespace livefuse::cuda {

struct GemvRope;  // gemv.hpp

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
// The norm's output is not written. round_first: the normalized element is rounded to the
// dtype before the norm's weight scales it (GemvArgs::norm_round_first). False when the GEMV
// cannot take it (rows, layouts, dtypes): nothing was launched then; the caller runs the norm
// and the GEMM.
bool run_gemv_norm(const OpCall& norm, const OpCall& call, uint8_t act, const Tensor* bias,
                   const Tensor* residual, const Tensor& out, void* stream, bool round_first = false);

// A merged sibling linear `call` (its weight the siblings' concatenated, its bias too) as one
// few-row GEMV writing each sibling's dense output: the product's columns in the order of
// `outs`, their widths `outs`' last dims; with `norm` (or null) in its prologue as above. False:
// nothing was launched (the caller's product + split path runs). `rope` (or null): a rotary on
// the product's first rope->cols columns as it is written (gemv.hpp, GemvRope; the caller gives
// those parts' outputs as the rotary's results).
bool run_gemv_split(const OpCall* norm, const OpCall& call, std::span<const Tensor> outs,
                    void* stream, bool round_first = false, const GemvRope* rope = nullptr);

// A merged gate/up pair `call` (weights [2 N, K] concatenated, bias [2 N] too) as one few-row
// GEMV writing act(gate) * up to the dense `out` [.., N] (gemv.hpp, GemvArgs::gated): `act` a
// GemvAct, the gate the second half when gate_second; `norm` (or null) and round_first as for
// run_gemv_norm. Neither half's own output is written. False: nothing was launched.
bool run_gemv_gated(const OpCall* norm, const OpCall& call, uint8_t act, bool gate_second, const Tensor& out,
                    void* stream, bool round_first = false);

// A merged sibling linear `call` (weights [parts * N, K] concatenated, bias [parts * N] too) as
// one strided-batched GEMM: batch i multiplies the input by weight rows [i N, (i + 1) N) and
// writes `outs[i]`, so every sibling's output is written dense where it lives, and no product
// is split afterwards. Takes siblings of one width N whose outputs are dense, of one dtype, and
// evenly spaced in memory (outs[i] at outs[0] + i * stride: FusedPlan allocates them so); the
// input's rows must fold to one evenly spaced run read along K. False: nothing was launched.
bool run_sibling_linears(const OpCall& call, std::span<const Tensor> outs, void* stream);

// A linear `call` (x's rows folding to one run read along K, w [N, K] dense, its bias if any) as
// the tensor-core GEMM (gemm_tc.hpp), `act` applied after the bias: one dense output, or
// siblings of one width -- outs[i] takes the product's columns [i W, (i + 1) W), W = N /
// outs.size(), dense wherever it lives (the merged Q/K/V's outputs in one launch). False:
// nothing was launched (LIVEFUSE_GEMM_TC=0 for f16 / bf16, LIVEFUSE_GEMM_F32X3=0 for f32, or the
// kernel does not take the call); the caller runs cuBLASLt (and the activation's kernel).
bool run_linear_tc(const OpCall& call, TcAct act, std::span<const Tensor> outs, void* stream);
// The tensor-core GEMM's activation computing op `op` (relu, gelu, gelu_tanh, silu); none else.
TcAct tc_act_of(OpId op);

// linear(x, w) without its bias as `slices` partial products over K, in f32: partial s is
// x[.., s K/S : (s+1) K/S] w[:, s K/S : (s+1) K/S]^T, dense [rows, N] at partials + s * rows * N
// floats, rows = x's rows folded. Their sum is the product before rounding: the consumer adds
// them (and the bias) where it reads the product anyway -- the row kernel after a layer's
// FFN2 (planner/split_k_rows.hpp) -- so no split-K reduction kernel runs. One strided-batched
// cuBLASLt call reading both operands in place. Takes f16/bf16 operands whose rows fold to one
// evenly spaced run read along K, a dense weight, K % (8 * slices) == 0. False: nothing launched.
bool run_linear_partials(const OpCall& call, int slices, float* partials, void* stream);
// The K splits of the algorithm cuBLASLt picks first for a dense linear of rows x K by N x K
// (with its bias epilogue when `bias`) if it adds them in a reduction of its own (a second
// kernel); 1 if it does not split, or K does not cut into that many 8-element multiples.
int linear_split_k(int64_t rows, int64_t n, int64_t k, DType dtype, bool bias);

// Bytes of cuBLASLt workspace each stream gets (allocated on the stream's first GEMM).
inline constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

}  // namespace livefuse::cuda
