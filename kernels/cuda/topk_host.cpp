// OpCall -> TopkPlan: a strided input is made dense first (one copy), then one block per row.
#include "kernels/cuda/layout.hpp"
#include "kernels/cuda/ops_host.hpp"
#include "kernels/cuda/topk.hpp"

namespace livefuse::cuda {

void run_topk(const OpCall& call, std::span<const Tensor> outputs, cudaStream_t s) {
  LF_ASSERT(outputs.size() == 2, describe_call(call), " expects values and indices");
  const Tensor& x = call.inputs[0];
  Tensor dense = x;
  if (!x.is_contiguous()) {
    dense = empty(x.shape(), x.dtype(), x.device());
    StridedLayout l = make_layout(x.shape());
    add_dense_operand(l);
    add_operand(l, x.shape(), x.strides());
    launch_copy(dense.impl()->data(), x.impl()->data(), dtype_size(x.dtype()), l, s);
  }
  TopkPlan p;
  p.in = dense.impl()->data();
  p.dtype = x.dtype();
  p.values = outputs[0].impl()->data();
  p.indices = static_cast<int64_t*>(outputs[1].impl()->data());
  p.n = x.shape()[x.rank() - 1];
  p.rows = p.n > 0 ? x.numel() / p.n : 0;
  p.k = static_cast<int>(call.attrs.i[0]);
  launch_topk(p, s);
}

}  // namespace livefuse::cuda
