// Registries of user ops. Ids are dense and never reused; entries live for the process
// (leaked on purpose: plans and compiled kernels refer to them until exit).
#include <deque>
#include <mutex>

#include "livefuse/error.hpp"
#include "runtime/executor.hpp"
#include "runtime/registry.hpp"

namespace livefuse {

namespace {
struct Registry {
  std::mutex mu;
  std::deque<CustomElementwiseDef> customs;  // deque: references stay valid as it grows
  std::deque<OpaqueKernelDef> opaques;
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}
bool valid_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char ch : s)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_')) return false;
  return true;
}
}  // namespace

const CustomElementwiseDef& custom_op(uint32_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  LF_CHECK(id >= 1 && id <= r.customs.size(), "custom", "unknown custom op id ", id,
           " (use register_elementwise to create one)");
  return r.customs[id - 1];
}

const OpaqueKernelDef& opaque_kernel(uint32_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  LF_CHECK(id >= 1 && id <= r.opaques.size(), "opaque", "unknown opaque kernel id ", id,
           " (use wrap_kernel to create one)");
  return r.opaques[id - 1];
}

CustomOp register_elementwise(const std::string& name, int arity, const std::string& cuda_expr,
                              CpuScalarFn cpu_fn) {
  LF_CHECK(valid_identifier(name), "register_elementwise", "name '", name,
           "' must be a C identifier");
  LF_CHECK(arity >= 1 && arity <= 3, "register_elementwise", "op '", name,
           "': arity must be 1, 2 or 3, got ", arity);
  LF_CHECK(!cuda_expr.empty(), "register_elementwise", "op '", name, "': empty CUDA expression");
  LF_CHECK(cpu_fn != nullptr, "register_elementwise", "op '", name, "': null CPU function");
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  for (const CustomElementwiseDef& d : r.customs) {
    if (d.name != name) continue;
    LF_CHECK(d.arity == arity && d.cuda_expr == cuda_expr && d.cpu_fn == cpu_fn,
             "register_elementwise", "op '", name,
             "' is already registered with a different definition");
    return CustomOp(d.id);
  }
  const uint32_t id = static_cast<uint32_t>(r.customs.size() + 1);
  r.customs.push_back({id, name, arity, cuda_expr, cpu_fn});
  return CustomOp(id);
}

namespace {
Tensor apply_custom(uint32_t id, std::initializer_list<Tensor> xs) {
  OpCall c;
  c.op = OpId::custom;
  c.attrs.custom_id = id;
  for (const Tensor& t : xs) c.inputs.push_back(t);
  return Executor::submit1(c);
}
}  // namespace

Tensor CustomOp::operator()(const Tensor& a) const { return apply_custom(id_, {a}); }
Tensor CustomOp::operator()(const Tensor& a, const Tensor& b) const {
  return apply_custom(id_, {a, b});
}
Tensor CustomOp::operator()(const Tensor& a, const Tensor& b, const Tensor& c) const {
  return apply_custom(id_, {a, b, c});
}

OpaqueKernel wrap_kernel(const std::string& name, LaunchFn launch, bool capturable) {
  LF_CHECK(!name.empty(), "wrap_kernel", "a kernel needs a name");
  LF_CHECK(static_cast<bool>(launch), "wrap_kernel", "kernel '", name, "': empty launch function");
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  const uint32_t id = static_cast<uint32_t>(r.opaques.size() + 1);
  r.opaques.push_back({id, name, std::move(launch), capturable});
  return OpaqueKernel(id);
}

std::vector<Tensor> OpaqueKernel::operator()(const std::vector<Tensor>& inputs,
                                             const std::vector<OutputSpec>& outputs) const {
  OpCall c;
  c.op = OpId::opaque;
  c.attrs.custom_id = id_;
  for (const Tensor& t : inputs) c.inputs.push_back(t);
  c.out_specs = &outputs;
  TensorList outs = Executor::submit(c);
  return std::vector<Tensor>(outs.begin(), outs.end());
}

}  // namespace livefuse
