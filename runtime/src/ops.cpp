// The op API: each function builds one OpCall and submits it (the single dispatch path).
#include "livefuse/ops.hpp"

#include <atomic>

#include "livefuse/error.hpp"
#include "runtime/executor.hpp"

namespace livefuse {

namespace {
std::atomic<bool> g_allow_tf32{false};

Tensor call1(OpId op, const Tensor& a, Attrs attrs = {}) {
  OpCall c;
  c.op = op;
  c.inputs.push_back(a);
  c.attrs = attrs;
  return Executor::submit1(c);
}
Tensor call2(OpId op, const Tensor& a, const Tensor& b) {
  OpCall c;
  c.op = op;
  c.inputs.push_back(a);
  c.inputs.push_back(b);
  return Executor::submit1(c);
}
Tensor scalar2(OpId op, const Tensor& a, double b) {
  Attrs at;
  at.scalar_operand = true;
  at.push_float(b);
  return call1(op, a, at);
}
Attrs dim_attrs(int64_t dim, bool keepdim) {
  Attrs at;
  at.push_int(dim);
  at.push_int(keepdim ? 1 : 0);
  return at;
}
}  // namespace

#define LF_UNARY(name) \
  Tensor name(const Tensor& x) { return call1(OpId::name, x); }
LF_UNARY(neg)
LF_UNARY(abs)
LF_UNARY(exp)
LF_UNARY(log)
LF_UNARY(sqrt)
LF_UNARY(rsqrt)
LF_UNARY(tanh)
LF_UNARY(sigmoid)
LF_UNARY(relu)
LF_UNARY(gelu)
LF_UNARY(gelu_tanh)
LF_UNARY(silu)
LF_UNARY(erf)
LF_UNARY(sin)
LF_UNARY(cos)
#undef LF_UNARY

#define LF_BINARY(name)                                                             \
  Tensor name(const Tensor& a, const Tensor& b) { return call2(OpId::name, a, b); } \
  Tensor name(const Tensor& a, double b) { return scalar2(OpId::name, a, b); }
LF_BINARY(add)
LF_BINARY(sub)
LF_BINARY(mul)
LF_BINARY(div)
LF_BINARY(maximum)
LF_BINARY(minimum)
LF_BINARY(pow)
LF_BINARY(lt)
LF_BINARY(le)
LF_BINARY(gt)
LF_BINARY(ge)
LF_BINARY(eq)
#undef LF_BINARY

Tensor cast(const Tensor& x, DType to) {
  Attrs at;
  at.dtype = to;
  return call1(OpId::cast, x, at);
}

Tensor clamp(const Tensor& x, double lo, double hi) {
  Attrs at;
  at.push_float(lo);
  at.push_float(hi);
  return call1(OpId::clamp, x, at);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  OpCall c;
  c.op = OpId::where;
  c.inputs = {cond, a, b};
  return Executor::submit1(c);
}

Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  return call1(OpId::sum, x, dim_attrs(dim, keepdim));
}
Tensor mean(const Tensor& x, int64_t dim, bool keepdim) {
  return call1(OpId::mean, x, dim_attrs(dim, keepdim));
}
Tensor max(const Tensor& x, int64_t dim, bool keepdim) {
  return call1(OpId::max, x, dim_attrs(dim, keepdim));
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return call1(OpId::argmax, x, dim_attrs(dim, keepdim));
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k) {
  OpCall c;
  c.op = OpId::topk;
  c.inputs.push_back(x);
  c.attrs.push_int(k);
  TensorList outs = Executor::submit(c);
  return {std::move(outs[0]), std::move(outs[1])};
}

Tensor softmax(const Tensor& x, double scale, const Tensor& mask) {
  OpCall c;
  c.op = OpId::softmax;
  c.inputs.push_back(x);
  if (mask.defined()) c.inputs.push_back(mask);
  c.attrs.push_float(scale);
  c.attrs.push_int(mask.defined() ? 1 : 0);
  return Executor::submit1(c);
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  OpCall c;
  c.op = OpId::layer_norm;
  c.inputs.push_back(x);
  if (weight.defined()) c.inputs.push_back(weight);
  if (bias.defined()) c.inputs.push_back(bias);
  c.attrs.push_float(eps);
  c.attrs.push_int(weight.defined());
  c.attrs.push_int(bias.defined());
  return Executor::submit1(c);
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  OpCall c;
  c.op = OpId::rms_norm;
  c.inputs.push_back(x);
  if (weight.defined()) c.inputs.push_back(weight);
  c.attrs.push_float(eps);
  c.attrs.push_int(weight.defined());
  return Executor::submit1(c);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  OpCall c;
  c.op = OpId::matmul;
  c.inputs = {a, b};
  c.attrs.push_int(0);
  c.attrs.push_int(allow_tf32());
  return Executor::submit1(c);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  OpCall c;
  c.op = OpId::linear;
  c.inputs = {x, w};
  if (b.defined()) c.inputs.push_back(b);
  c.attrs.push_int(b.defined());
  c.attrs.push_int(allow_tf32());
  return Executor::submit1(c);
}

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

Tensor reshape(const Tensor& x, const Shape& shape) {
  Attrs at;
  for (int64_t d : shape) at.push_int(d);
  return call1(OpId::reshape, x, at);
}

Tensor permute(const Tensor& x, const Dims& dims) {
  Attrs at;
  for (int64_t d : dims) at.push_int(d);
  return call1(OpId::permute, x, at);
}
Tensor permute(const Tensor& x, std::initializer_list<int64_t> dims) {
  return permute(x, Dims(dims));
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  LF_CHECK(x.defined(), "transpose", "input is an undefined Tensor");
  const int a = normalize_dim(d0, x.rank(), "transpose"),
            b = normalize_dim(d1, x.rank(), "transpose");
  Dims perm;
  for (int k = 0; k < x.rank(); ++k) perm.push_back(k);
  std::swap(perm[a], perm[b]);
  return permute(x, perm);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  Attrs at;
  at.push_int(dim);
  at.push_int(start);
  at.push_int(end);
  at.push_int(step);
  return call1(OpId::slice, x, at);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  LF_CHECK(shape.rank <= 10, "expand", "target shape ", shape.str(), " has too many dims");
  Attrs at;
  for (int64_t d : shape) at.push_int(d);
  return call1(OpId::expand, x, at);
}

Tensor contiguous(const Tensor& x) {
  LF_CHECK(x.defined(), "contiguous", "input is an undefined Tensor");
  if (x.is_contiguous()) return x;
  return call1(OpId::contiguous, x);
}

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  LF_CHECK(!xs.empty(), "concat", "needs at least one input");
  OpCall c;
  c.op = OpId::concat;
  for (const Tensor& t : xs) c.inputs.push_back(t);
  c.attrs.push_int(dim);
  return Executor::submit1(c);
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  return call2(OpId::embedding, weight, ids);
}

}  // namespace livefuse
