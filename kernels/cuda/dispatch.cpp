// livefuse::cuda::run -- the eager CUDA backend's entry: one switch over the op's category.
#include "kernels/backend.hpp"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/ops_host.hpp"
#include "kernels/cuda/preload.hpp"
#include "kernels/jit/custom_eager.hpp"
#include "livefuse/config.hpp"

namespace livefuse::cuda {

void run(const OpCall& call, std::span<const Tensor> outputs, void* stream) {
  LF_ASSERT(!outputs.empty(), "cuda::run without outputs for ", op_name(call.op));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const Tensor& out = outputs[0];
  if (out.numel() == 0) return;
  if (call.op == OpId::topk) return run_topk(call, outputs, s);
  switch (call.category()) {
    case OpCategory::Elementwise:
      if (call.op == OpId::custom) return jit::launch_custom_eager(call, outputs, stream);
      return run_elementwise(call, out, s);
    case OpCategory::Reduction:
      return run_reduction(call, out, s);
    case OpCategory::Normalization:
      return run_normalization(call, out, s);
    case OpCategory::Matmul:
      // The kernels plans launch load before the first plan runs (preload.hpp, the Note).
      if (config().mode == Mode::on) preload_plan_kernels(out.dtype());
      return call.op == OpId::matmul ? run_matmul(call, out, stream)
                                     : run_linear(call, out, stream);
    case OpCategory::Layout:
      return run_layout(call, out, s);
    case OpCategory::Gather:
      return run_embedding(call, out, s);
    case OpCategory::Opaque:
      break;  // the executor launches opaque kernels itself
  }
  LF_ASSERT(false, "op ", op_name(call.op), " should not reach the CUDA backend");
}

}  // namespace livefuse::cuda
