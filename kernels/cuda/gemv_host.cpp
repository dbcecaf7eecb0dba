// The few-row GEMV's host side (gemv.hpp): which matmul / linear calls it takes, their operands
// as GemvArgs, and the entry points the planner's steps call (gemm.hpp: run_gemv_norm,
// run_gemv_split); gemm_nd (gemm_cublaslt.cpp) tries it first for every product.
#include <span>

#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/gemm_views.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/strided.hpp"
#include "livefuse/config.hpp"
#include "runtime/inspect_registry.hpp"

namespace livefuse::cuda {
namespace {

// Registered when the library loads, as cuda.attention's (attention_counts.cpp).
const bool g_registered = [] {
  register_counter_source("cuda.gemv", [](CounterSink& sink) {
    const GemvLaunchCounts c = gemv_launch_counts();
    sink.add("launches", c.launches);
    sink.add("early_weights", c.early_weights);
    sink.add("rotary", c.rotary);
    sink.add("norm_paired", c.norm_paired);
  });
  return true;
}();

}  // namespace

static_assert(static_cast<int>(GemvAct::relu) == static_cast<int>(LtAct::relu) &&
              static_cast<int>(GemvAct::gelu_tanh) == static_cast<int>(LtAct::gelu_tanh));

namespace detail {

bool launch_few_row_batched(const MatView& a, const MatView& b, const OutView& out, cudaStream_t s) {
  const int ra = a.shape.rank, rb = b.shape.rank, ro = out.shape.rank;
  if (!config().gemv || ra < 3 || rb < 3 || ro < 3) return false;
  const int64_t M = a.shape[ra - 2], K = a.shape[ra - 1], N = b.shape[rb - 1];
  if (M < 1 || M > kGemvColsMaxRows || K < 1 || N < 1 || a.strides[ra - 1] != 1) return false;
  // The batch dims as one run per operand (out dense: M x N apart).
  const auto lead = [](const Dims& d, int n) { return Dims(std::span<const int64_t>(d.begin(), n)); };
  StridedLayout l = make_layout(lead(out.shape, ro - 2));
  add_dense_operand(l);
  for (int d = 0; d < l.rank; ++d) l.strides[0][d] *= M * N;
  add_operand(l, lead(a.shape, ra - 2), lead(a.strides, ra - 2));
  add_operand(l, lead(b.shape, rb - 2), lead(b.strides, rb - 2));
  coalesce(l);
  // One product (the plain GEMV's), batch dims that do not fold, or one b for every batch (the
  // fold into more rows serves that better).
  if (l.rank != 1 || l.strides[2][0] == 0) return false;
  // What both kernels' arguments share: x's rows, the output, the batch.
  const auto common = [&](auto& g) {
    g.dtype = out.dtype;
    g.rows = static_cast<int>(M);
    g.n = N, g.k = K;
    g.x = a.ptr, g.ldx = M > 1 ? a.strides[ra - 2] : K;
    g.out = out.ptr, g.ldo = N;
    g.batch = l.sizes[0], g.o_bstride = l.strides[0][0], g.x_bstride = l.strides[1][0];
  };
  if (b.strides[rb - 2] == 1) {  // columns along K: W[N, K]^T, the GEMV proper
    GemvArgs g;
    common(g);
    g.w = b.ptr, g.ldw = b.strides[rb - 1], g.w_bstride = l.strides[2][0];
    if (!gemv_supported(g)) return false;
    launch_gemv(g, s);
    return true;
  }
  if (b.strides[rb - 1] != 1) return false;
  GemvColsArgs g;
  common(g);
  g.b = b.ptr, g.ldb = b.strides[rb - 2], g.b_bstride = l.strides[2][0];
  if (!gemv_cols_supported(g)) return false;
  launch_gemv_cols(g, s);
  return true;
}

bool gemv_args_for(const MatView& a, const MatView& b, const OutView& out, GemvArgs* g,
                   GemvNorm norm) {
  const int ra = a.shape.rank, rb = b.shape.rank;
  if (!config().gemv || rb != 2 || ra < 2 || a.strides[ra - 1] != 1 || b.strides[0] != 1) return false;
  int64_t rows = 1, row_stride = 0;
  for (int d = ra - 2; d >= 0; --d) {  // innermost first: each dim must continue the last
    if (a.shape[d] == 1) continue;
    if (rows == 1) row_stride = a.strides[d];
    else if (a.strides[d] != row_stride * rows) return false;
    rows *= a.shape[d];
  }
  if (rows > kGemvMaxRows || rows * b.shape[1] != out.shape.numel()) return false;
  g->dtype = out.dtype;
  g->rows = static_cast<int>(rows);
  g->n = b.shape[1];
  g->k = a.shape[ra - 1];
  g->x = a.ptr;
  g->ldx = row_stride;
  g->w = b.ptr;
  g->ldw = b.strides[1];
  g->out = out.ptr;
  g->ldo = g->n;
  g->norm = norm;
  return gemv_supported(*g);
}

}  // namespace detail

using detail::MatView;
using detail::OutView;
using detail::epilogue_operands;
using detail::gemv_args_for;
using detail::linear_views;
using detail::out_view;
using detail::out_view_of;

namespace {
// The few-row GEMV of the linear `call` into `out`, over its input -- or, with `norm`, over the
// norm's input, the norm in the GEMV's prologue (the linear's input, the norm's output, may have
// no storage then). *g is filled but for the epilogue and a split of the outputs. False: the
// GEMV cannot take it.
bool gemv_linear_args(const OpCall* norm, const OpCall& call, const OutView& out, GemvArgs* g) {
  if (call.op != OpId::linear) return false;
  if (norm && norm->op != OpId::layer_norm && norm->op != OpId::rms_norm) return false;
  const Tensor& x = norm ? norm->inputs[0] : call.inputs[0];
  const Tensor& w = call.inputs[1];
  MatView a{}, b{};
  linear_views(x, w, &a, &b);
  if (x.dtype() != out.dtype || w.dtype() != out.dtype || a.shape[a.shape.rank - 1] == 0) return false;
  const GemvNorm kind = !norm                          ? GemvNorm::none
                        : norm->op == OpId::layer_norm ? GemvNorm::layer
                                                       : GemvNorm::rms;
  if (!gemv_args_for(a, b, out, g, kind)) return false;
  if (!norm) return true;
  const auto vector_of = [&](size_t i, const void** p) {
    if (i >= norm->inputs.size()) return false;
    const Tensor& t = norm->inputs[i];
    if (t.dtype() != x.dtype() || t.rank() != 1 || t.shape()[0] != g->k ||
        (t.strides()[0] != 1 && g->k > 1))
      return false;
    *p = t.impl()->data();
    return true;
  };
  size_t next = 1;
  if (norm->attrs.i[0] && !vector_of(next++, &g->norm_w)) return false;
  if (norm->op == OpId::layer_norm && norm->attrs.i[1] && !vector_of(next++, &g->norm_b)) return false;
  g->eps = static_cast<float>(norm->attrs.f[0]);
  return true;
}

// The linear's own bias as the GEMV reads it (element by element: any dense vector), or null.
bool linear_bias(const OpCall& call, DType dt, const void** p) {
  *p = nullptr;
  if (call.attrs.i[0] == 0) return true;
  const Tensor& lb = call.inputs[2];
  if (lb.dtype() != dt || lb.rank() != 1 || (lb.strides()[0] != 1 && lb.numel() > 1)) return false;
  *p = lb.impl()->data();
  return true;
}
}  // namespace

bool run_gemv_norm(const OpCall& norm, const OpCall& call, uint8_t act, const Tensor* bias,
                   const Tensor* residual, const Tensor& out, void* stream, bool round_first) {
  const void* bias_ptr = nullptr;
  if (!epilogue_operands(out, act, bias, residual, &bias_ptr)) return false;
  GemvArgs g;
  if (!gemv_linear_args(&norm, call, out_view(out), &g)) return false;
  g.norm_round_first = round_first;
  // An epilogue's bias is the linear's own (pass_gemm_epilogue) or one added to a linear
  // without: without an epilogue the linear's own is added here.
  if (!bias && !linear_bias(call, out.dtype(), &bias_ptr)) return false;
  g.bias = bias_ptr;
  g.residual = residual ? residual->impl()->data() : nullptr;
  g.act = static_cast<GemvAct>(act);
  launch_gemv(g, static_cast<cudaStream_t>(stream));
  return true;
}

bool run_gemv_split(const OpCall* norm, const OpCall& call, std::span<const Tensor> outs,
                    void* stream, bool round_first, const GemvRope* rope) {
  if (outs.empty() || outs.size() > static_cast<size_t>(kGemvMaxParts)) return false;
  GemvArgs g;
  if (rope) g.rope = *rope;
  g.norm_round_first = norm && round_first;
  g.parts = static_cast<int>(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    const Tensor& o = outs[i];
    if (!o.is_contiguous() || o.dtype() != outs[0].dtype() || o.rank() != outs[0].rank() || o.numel() == 0)
      return false;
    g.part_out[i] = o.impl()->data();
    g.begin[i + 1] = g.begin[i] + o.shape()[o.rank() - 1];
  }
  // The merged product's shape; gemv_supported checks the parts cover its columns.
  Shape whole = outs[0].shape();
  whole.v[whole.rank - 1] = g.begin[g.parts];
  const void* bias_ptr = nullptr;
  if (!gemv_linear_args(norm, call, out_view_of(whole, outs[0]), &g) ||
      !linear_bias(call, outs[0].dtype(), &bias_ptr))
    return false;
  g.bias = bias_ptr;
  launch_gemv(g, static_cast<cudaStream_t>(stream));
  return true;
}

bool run_gemv_gated(const OpCall* norm, const OpCall& call, uint8_t act, bool gate_second, const Tensor& out,
                    void* stream, bool round_first) {
  if (!out.is_contiguous() || out.numel() == 0 || out.rank() < 1) return false;
  Shape whole = out.shape();  // the merged product's: both halves
  whole.v[whole.rank - 1] *= 2;
  GemvArgs g;
  const void* bias_ptr = nullptr;
  if (!gemv_linear_args(norm, call, out_view_of(whole, out), &g) || !linear_bias(call, out.dtype(), &bias_ptr))
    return false;
  g.norm_round_first = norm && round_first;
  g.bias = bias_ptr;
  g.gated = true;
  g.gate_second = gate_second;
  g.act = static_cast<GemvAct>(act);
  g.out = out.impl()->data();  // (out_view_of carries no pointer: the merged shape has no storage)
  g.ldo = g.n / 2;
  if (!gemv_supported(g)) return false;
  launch_gemv(g, static_cast<cudaStream_t>(stream));
  return true;
}

}  // namespace livefuse::cuda
