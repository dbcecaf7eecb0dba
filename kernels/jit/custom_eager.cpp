// Eager CUDA execution of one registered custom elementwise op: a one-op pointwise spec,
// rendered, compiled with NVRTC and cached like every fused kernel (once per op and dtype;
// broadcasting and layouts are launch parameters, so they need no new kernel).
#include "kernels/jit/custom_eager.hpp"

#include <map>
#include <mutex>

#include "kernels/jit/cuda_launch.hpp"
#include "kernels/jit/kernel_compiler.hpp"
#include "kernels/jit/tensor_arg.hpp"
#include "livefuse/error.hpp"
#include "runtime/registry.hpp"

namespace livefuse::jit {
namespace {

struct Entry {
  std::shared_ptr<const KernelSpec> spec;
  std::shared_ptr<CompiledKernel> kernel;
};

std::shared_ptr<const KernelSpec> custom_spec(const CustomElementwiseDef& def, const OpCall& call, DType out) {
  auto spec = std::make_shared<KernelSpec>();
  spec->kind = SpecKind::Pointwise;
  spec->name = "custom_" + def.name;
  PartBuilder b;
  int args[3];
  const int n = static_cast<int>(call.inputs.size());
  for (int k = 0; k < n; ++k) args[k] = b.load(call.inputs[k].dtype());
  const int v = b.custom(def.id, std::span<const int>(args, n), out);
  b.store(v, out);
  spec->parts.push_back(b.take());
  return spec;
}

}  // namespace

void launch_custom_eager(const OpCall& call, std::span<const Tensor> outputs, void* stream) {
  const CustomElementwiseDef& def = custom_op(call.attrs.custom_id);
  LF_CHECK(outputs.size() == 1, def.name, "custom op with ", outputs.size(), " outputs");
  const DType out = outputs[0].dtype();
  std::string key = std::to_string(def.id) + ":" + std::string(dtype_name(out));
  for (const auto& t : call.inputs) key.append(":").append(dtype_name(t.dtype()));

  static std::mutex mu;
  static std::map<std::string, Entry>* cache = new std::map<std::string, Entry>();  // per process
  Entry e;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache->find(key); it != cache->end()) e = it->second;
  }
  if (!e.kernel) {
    e.spec = custom_spec(def, call, out);
    CompileResult r = KernelCompiler::global().compile(e.spec, default_compile_options());
    LF_CHECK(r.ok(), def.name, "custom op failed to compile for CUDA: ", r.error, "\n", r.log,
             "\nexpression: ", def.cuda_expr);
    e.kernel = r.kernel;
    std::lock_guard<std::mutex> lock(mu);
    (*cache)[key] = e;
  }
  PartBinding b;
  b.shape = outputs[0].shape();
  for (const auto& t : call.inputs) b.inputs.push_back(tensor_arg(t));
  b.outputs.push_back(tensor_arg(outputs[0]));
  const std::string err = launch_spec_cuda(*e.spec, *e.kernel, std::span<const PartBinding>(&b, 1), stream);
  LF_CHECK(err.empty(), def.name, "custom op launch failed: ", err);
}

}  // namespace livefuse::jit
