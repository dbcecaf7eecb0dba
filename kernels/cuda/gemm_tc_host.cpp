// The tensor-core GEMM's host side (gemm_tc.hpp): a linear call and its outputs as GemmTcArgs.
// The planner's steps call run_linear_tc (gemm.hpp) for merged siblings, for an activation
// cuBLASLt has no epilogue for, and (LIVEFUSE_GEMM_F32X3) for f32 linears; whatever it refuses
// runs as before (cuBLASLt, then the tail).
#include <algorithm>

#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/gemm_tc.hpp"
#include "kernels/cuda/gemm_views.hpp"
#include "livefuse/config.hpp"

namespace livefuse::cuda {

TcAct tc_act_of(OpId op) {
  switch (op) {
    case OpId::relu: return TcAct::relu;
    case OpId::gelu: return TcAct::gelu;
    case OpId::gelu_tanh: return TcAct::gelu_tanh;
    case OpId::silu: return TcAct::silu;
    default: return TcAct::none;
  }
}

int gemm_tc_splits(DType dt, int64_t tiles, int64_t steps, int64_t space_splits, int64_t counters) {
  if (tiles <= 0 || steps <= 1 || tiles > counters || space_splits < 2) return 1;
  int64_t s = 1;
  if (dt == DType::f32) {
    s = (steps + kGemmTcF32SplitSteps - 1) / kGemmTcF32SplitSteps;
  } else if (steps >= kGemmTcSplitFrom) {
    // Only a long K: a split costs its partials' round trip through L2 and the last block's
    // sum, 4-8 us on an H100 -- more than the steps it saves below ~32 (bench/RESULTS.md,
    // session 53: BERT's FFN2, 48 steps, 19.5 us unsplit, 13.6 in 4 splits; Q/K/V and the output
    // projection, 12 steps, slower at every split even on 48 tiles).
    s = (steps + kGemmTcSplitSteps - 1) / kGemmTcSplitSteps;
  }
  return static_cast<int>(std::clamp<int64_t>(std::min(s, space_splits), 1, 8));
}

namespace {

// x, w, bias and the extents of a linear call whose weight is dense and whose input rows run
// along K (false: not such a call).
bool linear_operands(const OpCall& call, GemmTcArgs* a) {
  if (call.op != OpId::linear) return false;
  const Tensor &x = call.inputs[0], &w = call.inputs[1];
  if (w.rank() != 2 || !w.is_contiguous() || x.dtype() != w.dtype()) return false;
  a->dtype = x.dtype();
  a->n = w.shape()[0];
  a->k = w.shape()[1];
  detail::MatView av{}, bv{};
  detail::linear_views(x, w, &av, &bv);
  if (av.strides[av.shape.rank - 1] != 1 || !detail::fold_rows(av, a->k, &a->m, &a->ldx)) return false;
  if (a->m == 1) a->ldx = a->k;  // one row: its stride is never read
  a->x = x.impl()->data();
  a->w = w.impl()->data();
  if (call.attrs.i[0] != 0) {
    const Tensor& b = call.inputs[2];
    if (b.rank() != 1 || b.shape()[0] != a->n || b.dtype() != a->dtype || !b.is_contiguous()) return false;
    a->bias = b.impl()->data();
  }
  return true;
}

}  // namespace

bool run_linear_tc(const OpCall& call, TcAct act, std::span<const Tensor> outs, void* stream) {
  if (call.op != OpId::linear || outs.empty() || outs.size() > static_cast<size_t>(kGemmTcMaxParts)) return false;
  const DType dt = call.inputs[0].dtype();
  if (!(dt == DType::f32 ? config().gemm_f32x3 : config().gemm_tc)) return false;
  GemmTcArgs a;
  if (!linear_operands(call, &a)) return false;
  const Tensor& first = outs[0];
  if (first.dtype() != a.dtype) return false;
  a.act = act;
  a.parts = static_cast<int>(outs.size());
  a.width = first.rank() > 0 ? first.shape()[first.rank() - 1] : 0;
  if (a.width * a.parts != a.n) return false;
  for (int p = 0; p < a.parts; ++p) {
    const Tensor& o = outs[static_cast<size_t>(p)];
    if (o.dtype() != a.dtype || !(o.shape() == first.shape()) || !o.is_contiguous() || o.numel() != a.m * a.width)
      return false;
    a.out[p] = o.impl()->data();
  }
  if (!gemm_tc_supported(a)) return false;
  launch_gemm_tc(a, static_cast<cudaStream_t>(stream));
  return true;
}

}  // namespace livefuse::cuda
