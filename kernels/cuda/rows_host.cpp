// OpCall -> plans for reductions and the row-wise ops (softmax, layer_norm, rms_norm).
#include "kernels/cuda/ops_host.hpp"
#include "kernels/cuda/reduce.hpp"
#include "kernels/cuda/rowwise.hpp"

namespace livefuse::cuda {
namespace {

ReduceKind reduce_kind(OpId op) {
  switch (op) {
    case OpId::sum:
      return ReduceKind::sum;
    case OpId::mean:
      return ReduceKind::mean;
    case OpId::max:
      return ReduceKind::max;
    case OpId::argmax:
      return ReduceKind::argmax;
    default:
      LF_ASSERT(false, "not a reduction: ", op_name(op));
  }
}

RowOperand row_operand(const Tensor& t) {
  return {t.impl()->data(), t.dtype(), t.shape()[0] == 1 ? 0 : t.strides()[0]};
}

}  // namespace

void run_reduction(const OpCall& call, const Tensor& out, cudaStream_t s) {
  const Tensor& x = call.inputs[0];
  const int dim = static_cast<int>(call.attrs.i[0]);
  ReducePlan p;
  p.kind = reduce_kind(call.op);
  p.int_acc = !is_floating(x.dtype());
  p.in = x.impl()->data();
  p.in_dtype = x.dtype();
  p.out = out.impl()->data();
  p.out_dtype = out.dtype();
  p.r = x.shape()[dim];
  p.r_stride = p.r == 1 ? 1 : x.strides()[dim];
  Shape kept;
  Strides kept_strides;
  for (int k = 0; k < x.rank(); ++k) {
    if (k == dim) continue;
    kept.push_back(x.shape()[k]);
    kept_strides.push_back(x.strides()[k]);
  }
  p.n_out = kept.numel();
  p.outer = make_layout(kept);
  add_operand(p.outer, kept, kept_strides);
  coalesce(p.outer);  // output order is unchanged: merging only joins neighbouring dims
  launch_reduce(p, s);
}

void run_normalization(const OpCall& call, const Tensor& out, cudaStream_t s) {
  const Tensor& x = call.inputs[0];
  const int r = x.rank();
  RowPlan p;
  p.x = x.impl()->data();
  p.dtype = x.dtype();
  p.out = out.impl()->data();
  p.n = x.shape()[r - 1];
  if (p.n == 0) return;
  p.rows = x.numel() / p.n;
  p.x_col_stride = p.n == 1 ? 1 : x.strides()[r - 1];
  const Shape lead(std::span<const int64_t>(x.shape().begin(), r - 1));
  const Strides lead_strides(std::span<const int64_t>(x.strides().begin(), r - 1));
  p.outer = make_layout(lead);
  add_operand(p.outer, lead, lead_strides);
  switch (call.op) {
    case OpId::softmax: {
      p.scale = static_cast<float>(call.attrs.f[0]);
      if (call.attrs.i[0]) {
        const Tensor& m = call.inputs[1];
        const int mr = m.rank();
        p.mask.ptr = m.impl()->data();
        p.mask.dtype = m.dtype();
        p.mask.col_stride = mr == 0 || m.shape()[mr - 1] == 1 ? 0 : m.strides()[mr - 1];
        const int ml = mr == 0 ? 0 : mr - 1;
        add_operand(p.outer, Shape(std::span<const int64_t>(m.shape().begin(), ml)),
                    Strides(std::span<const int64_t>(m.strides().begin(), ml)));
      } else {
        add_operand(p.outer, Shape{}, Strides{});
      }
      coalesce(p.outer);
      return launch_softmax(p, s);
    }
    case OpId::layer_norm:
    case OpId::rms_norm: {
      add_operand(p.outer, Shape{}, Strides{});
      coalesce(p.outer);
      p.eps = static_cast<float>(call.attrs.f[0]);
      size_t next = 1;
      if (call.attrs.i[0]) p.weight = row_operand(call.inputs[next++]);
      if (call.op == OpId::layer_norm) {
        if (call.attrs.i[1]) p.bias = row_operand(call.inputs[next++]);
        return launch_layer_norm(p, s);
      }
      return launch_rms_norm(p, s);
    }
    default:
      LF_ASSERT(false, "not a normalization: ", op_name(call.op));
  }
}

}  // namespace livefuse::cuda
