// The CPU backend's entry point: one switch from op category to kernel family.
#include <memory>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/jit/cpu_eval.hpp"
#include "runtime/registry.hpp"

namespace livefuse::cpu {

void run_opaque(const OpCall& call, std::span<const Tensor> outputs) {
  const OpaqueKernelDef& def = opaque_kernel(call.attrs.custom_id);
  KernelArgs args;
  // The user's kernel sees plain dense buffers: strided inputs are materialised first.
  std::vector<std::unique_ptr<std::byte[]>> temps;
  for (const Tensor& t : call.inputs) {
    const View v = view_of(t);
    args.input_shapes.push_back(v.shape);
    if (t.is_contiguous()) {
      args.inputs.push_back(v.base);
      continue;
    }
    temps.emplace_back(new std::byte[std::max<size_t>(t.nbytes(), 1)]);
    View d = v;
    d.base = temps.back().get();
    d.strides = contiguous_strides(v.shape);
    strided_copy(v, d);
    args.inputs.push_back(d.base);
  }
  for (const Tensor& t : outputs) {
    args.outputs.push_back(out_view(t).base);
    args.output_shapes.push_back(t.shape());
  }
  def.launch(args, nullptr);
}

void prepare_thread() {
  gemm_prepare_thread();
  for (int which = 0; which < 4; ++which) (void)jit::cpu_eval::thread_buffer(which, 1);
}

void run(const OpCall& call, std::span<const Tensor> outputs) {
  if (call.category() == OpCategory::Opaque) return run_opaque(call, outputs);
  if (call.op == OpId::topk) return run_topk(call, outputs);
  LF_ASSERT(outputs.size() == 1, describe_call(call), " expects one output, got ", outputs.size());
  const Tensor& out = outputs[0];
  switch (call.category()) {
    case OpCategory::Elementwise:
      return run_elementwise(call, out);
    case OpCategory::Reduction:
      return run_reduction(call, out);
    case OpCategory::Normalization:
      if (call.op == OpId::softmax) return run_softmax(call, out);
      if (call.op == OpId::layer_norm) return run_layer_norm(call, out);
      if (call.op == OpId::rms_norm) return run_rms_norm(call, out);
      break;
    case OpCategory::Matmul:
      if (call.op == OpId::matmul) return run_matmul(call, out);
      if (call.op == OpId::linear) return run_linear(call, out);
      break;
    case OpCategory::Layout:
      return run_layout(call, out);
    case OpCategory::Gather:
      return run_embedding(call, out);
    case OpCategory::Opaque:
      break;
  }
  LF_ASSERT(false, describe_call(call), " has no CPU kernel");
}

}  // namespace livefuse::cpu
