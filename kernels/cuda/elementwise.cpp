// Plans an eager elementwise call: compute type, broadcast layout, fast or strided path.
#include <cstdint>

#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/ops_host.hpp"

namespace livefuse::cuda {
namespace {

// What the expression computes in: float for floating outputs (f16/bf16 convert at load and
// store), the integer type otherwise. cast is exact: through float when either side is
// floating (so 0.5 -> bool is true), through int64 between integers and bool.
Compute compute_type(OpId op, DType out, DType in0) {
  if (op == OpId::cast) return is_floating(out) || is_floating(in0) ? Compute::f32 : Compute::i64;
  if (is_floating(out)) return Compute::f32;
  return out == DType::i64 ? Compute::i64 : Compute::i32;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool vec_storage_matches(Compute c, DType t) {
  switch (c) {
    case Compute::f32: return is_floating(t);
    case Compute::i32: return t == DType::i32;
    case Compute::i64: return t == DType::i64;
  }
  return false;
}

}  // namespace

void launch_elementwise(const EwPlan& p, cudaStream_t s) {
  if (p.numel == 0) return;
  if (launch_ew_binary(p, s) || launch_ew_int_unary(p, s) || launch_ew_float_unary(p, s)) return;
  LF_ASSERT(false, "no eager CUDA kernel for elementwise op ", op_name(p.op));
}

void run_elementwise(const OpCall& call, const Tensor& out, cudaStream_t s) {
  EwPlan p;
  p.op = call.op;
  p.arity = op_info(call.op).arity;
  LF_ASSERT(p.arity >= 1 && p.arity <= 3, "elementwise arity ", p.arity, " for ", op_name(call.op));
  p.out = out.impl()->data();
  p.out_dtype = out.dtype();
  p.numel = out.numel();
  if (p.numel == 0) return;
  p.layout = make_layout(out.shape());
  add_dense_operand(p.layout);
  size_t t = 0;
  for (int k = 0; k < p.arity; ++k) {
    if (call.attrs.scalar_operand && k == 1) {
      p.kind[k] = EwKind::immediate;
      p.imm[k] = call.attrs.f[0];
      p.in_dtype[k] = out.dtype();
      add_operand(p.layout, Shape{}, Strides{});
      continue;
    }
    LF_ASSERT(t < call.inputs.size(), "missing input ", t, " for ", op_name(call.op));
    const Tensor& x = call.inputs[t++];
    p.in[k] = x.impl()->data();
    p.in_dtype[k] = x.dtype();
    p.kind[k] = EwKind::dense;
    add_operand(p.layout, x.shape(), x.strides());
  }
  if (call.op == OpId::clamp) {
    p.s0 = call.attrs.f[0];
    p.s1 = call.attrs.f[1];
  }
  p.compute = compute_type(call.op, p.out_dtype, p.in_dtype[0]);
  LF_ASSERT(p.compute == Compute::f32 || op_info(call.op).int_ok, op_name(call.op),
            " is float-only but was planned with integer output ", dtype_name(p.out_dtype));
  coalesce(p.layout);
  p.idx32 = fits_uint32(p.layout);

  // Fast path: rank <= 1 after coalescing, every tensor operand either walks the output
  // densely (stride 1) or is one element (stride 0), one storage dtype, 16-byte aligned.
  bool vec = call.op != OpId::cast && call.op != OpId::where && p.layout.rank <= 1 &&
             vec_storage_matches(p.compute, p.out_dtype) && aligned16(p.out);
  for (int k = 0; k < p.arity && vec; ++k) {
    if (p.kind[k] == EwKind::immediate) continue;
    const int64_t st = p.layout.rank == 0 ? 0 : p.layout.strides[1 + k][0];
    if (st == 0) {
      p.kind[k] = EwKind::broadcast;
    } else {
      vec = st == 1 && aligned16(p.in[k]);
    }
    vec = vec && p.in_dtype[k] == p.out_dtype;
  }
  if (!vec)
    for (int k = 0; k < p.arity; ++k)
      if (p.kind[k] == EwKind::broadcast) p.kind[k] = EwKind::dense;
  p.vec = vec;
  launch_elementwise(p, s);
}

}  // namespace livefuse::cuda
