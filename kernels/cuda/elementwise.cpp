// Plans an eager elementwise call: compute type, broadcast layout, fast or strided path.
#include "kernels/cuda/elementwise.hpp"

#include <cstdint>
#include <cstdio>

#include "kernels/cuda/ops_host.hpp"
#include "livefuse/config.hpp"

namespace livefuse::cuda {
namespace {

// What the expression computes in: float for floating outputs (f16/bf16 convert at load and
// store), the integer type otherwise. cast is exact: through float when either side is
// floating (so 0.5 -> bool is true), through int64 between integers and bool.
Compute compute_type(OpId op, DType out, DType in0) {
  if (op == OpId::cast) return is_floating(out) || is_floating(in0) ? Compute::f32 : Compute::i64;
  // A comparison's bool result says nothing about its operands: it compares in theirs.
  if (is_comparison(op))
    return is_floating(in0) ? Compute::f32 : in0 == DType::i64 ? Compute::i64 : Compute::i32;
  if (is_floating(out)) return Compute::f32;
  return out == DType::i64 ? Compute::i64 : Compute::i32;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool vec_storage_matches(Compute c, DType t) {
  switch (c) {
    case Compute::f32:
      return is_floating(t);
    case Compute::i32:
      return t == DType::i32;
    case Compute::i64:
      return t == DType::i64;
  }
  return false;
}

// The vector paths need one storage dtype throughout, 16-byte aligned vectors, and every
// tensor operand's innermost dim either contiguous (a dense vector load) or broadcast
// (stride 0: one element splat). Marks each operand's kind as a side effect.
EwPath choose_path(EwPlan& p) {
  const auto fallback = [&p] {
    for (int k = 0; k < p.arity; ++k)
      if (p.kind[k] == EwKind::broadcast) p.kind[k] = EwKind::dense;
    return EwPath::strided;
  };
  if (p.op == OpId::cast || !vec_storage_matches(p.compute, p.out_dtype) || !aligned16(p.out))
    return EwPath::strided;
  const StridedLayout& l = p.layout;
  const int64_t vec_n = 16 / static_cast<int64_t>(dtype_size(p.out_dtype));
  const int inner = l.rank - 1;
  const bool flat = l.rank <= 1;
  if (!flat && (!fits_uint32(l) || l.sizes[inner] % vec_n != 0)) return EwPath::strided;
  for (int k = 0; k < p.arity; ++k) {
    if (p.kind[k] == EwKind::immediate) continue;
    if (p.in_dtype[k] != p.out_dtype) return fallback();
    const int64_t* st = l.strides[1 + k];
    const int64_t inner_stride = inner < 0 ? 0 : st[inner];
    if (inner_stride == 0) {
      // flat: the whole operand is one element; otherwise one element per row of vectors.
      p.kind[k] = EwKind::broadcast;
      continue;
    }
    if (inner_stride != 1 || !aligned16(p.in[k])) return fallback();
    for (int d = 0; d < inner; ++d)
      if (st[d] % vec_n != 0) return fallback();
  }
  return flat ? EwPath::vec : EwPath::vec_strided;
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

  p.path = choose_path(p);
  if (config().log == LogLevel::debug) {  // which kernel an op takes, and why not a faster one
    static const char* const kPaths[] = {"vec", "vec_strided", "strided"};
    std::fprintf(stderr, "[cuda] ew %s %s%s rank %d -> %s%s (out %% 16 = %d, in0 %% 16 = %d)\n",
                 std::string(op_name(p.op)).c_str(), std::string(dtype_name(p.out_dtype)).c_str(),
                 out.shape().str().c_str(), p.layout.rank, kPaths[static_cast<int>(p.path)],
                 p.idx32 ? "" : " (64-bit index)",
                 static_cast<int>(reinterpret_cast<uintptr_t>(p.out) % 16),
                 static_cast<int>(reinterpret_cast<uintptr_t>(p.in[0]) % 16));
  }
  launch_elementwise(p, s);
}

}  // namespace livefuse::cuda
