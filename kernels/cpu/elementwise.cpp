// Elementwise ops: every Elementwise row of LF_OP_TABLE, their scalar variants and registered
// custom ops. The per-element function of a row is its `expr` column, compiled here as C++ (the
// CUDA backend and the JIT compile the same tokens), so no formula is written twice.
//
// Execution: the (collapsed) output is cut into tiles of kTile elements. Each operand's tile is
// either read in place (dense and already in the compute type) or gathered into a small buffer
// (broadcast, strided, f16/bf16/bool, or a scalar), the row's function runs over the buffers (a
// plain loop the compiler vectorises), and the result is stored, converting if needed.
#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/strided_runs.hpp"
#include "runtime/registry.hpp"

namespace livefuse::cpu {
namespace {

constexpr int64_t kTile = 1024;

struct Operand {
  const std::byte* base = nullptr;
  DType dtype = DType::f32;
  Strides strides;       // over the collapsed output shape (0 where broadcast)
  bool dense = false;    // tile [lo, lo+n) is base + lo
  bool uniform = false;  // all strides 0: one value for every element
  bool nonzero = false;  // where's condition: any dtype, loaded as 1 (nonzero) or 0
  bool scalar = false;   // the scalar operand of add(x, 2.0) and friends
  double scalar_value = 0;
};

struct Plan {
  Shape shape;  // collapsed output shape
  int64_t numel = 0;
  Operand in[3];
  int n_in = 0;
  std::byte* out = nullptr;
  DType out_dtype = DType::f32;
  double s0 = 0, s1 = 0;
  std::vector<std::unique_ptr<std::byte[]>> temps;  // dense copies of transposed operands
};

Plan make_plan(const OpCall& call, const Tensor& out, int arity) {
  Plan p;
  const View o = out_view(out);
  p.out = o.base;
  p.out_dtype = o.dtype;
  p.numel = o.shape.numel();
  p.n_in = arity;
  Shape shape = o.shape;
  Strides sets[4];
  sets[0] = o.strides;
  const int n_tensors = static_cast<int>(call.inputs.size());
  LF_ASSERT(n_tensors == arity || (call.attrs.scalar_operand && arity == 2 && n_tensors == 1),
            describe_call(call), " reached the cpu backend with ", n_tensors, " inputs");
  for (int k = 0; k < n_tensors; ++k) {
    p.temps.emplace_back();
    const View v = dense_if_transposed(view_of(call.inputs[k]), p.temps.back());
    p.in[k].base = v.base;
    p.in[k].dtype = v.dtype;
    sets[k + 1] = broadcast_strides(v.shape, v.strides, o.shape);
  }
  collapse_dims(shape, sets, n_tensors + 1);
  p.shape = shape;
  for (int k = 0; k < n_tensors; ++k) {
    p.in[k].strides = sets[k + 1];
    p.in[k].dense = sets[k + 1] == sets[0];
    p.in[k].uniform =
        std::all_of(sets[k + 1].begin(), sets[k + 1].end(), [](int64_t s) { return s == 0; });
  }
  if (n_tensors < arity) {
    p.in[1].scalar = true;
    p.in[1].scalar_value = call.attrs.f[0];
  }
  if (call.op == OpId::where) p.in[0].nonzero = true;
  p.s0 = call.attrs.nf > 0 ? call.attrs.f[0] : 0.0;
  p.s1 = call.attrs.nf > 1 ? call.attrs.f[1] : 0.0;
  return p;
}

// Reads n elements of `op` starting at output position lo, walking the strides like an odometer.
template <class C, DType D, bool kNonzero>
void gather(const Operand& op, const Shape& shape, int64_t lo, int64_t n, C* dst) {
  using T = typename DT<D>::T;
  const T* base = reinterpret_cast<const T*>(op.base);
  for_each_run(shape, op.strides.v.data(), lo, n,
               [&](int64_t done, int64_t off, int64_t m, int64_t s) {
                 const T* src = base + off;
                 C* out = dst + done;
                 for (int64_t j = 0; j < m; ++j) {
                   if constexpr (kNonzero)
                     out[j] = load_natural<D>(src + j * s) != 0 ? C(1) : C(0);
                   else
                     out[j] = load_as<D, C>(src + j * s);
                 }
               });
}

// The compute-type values of operand tile [lo, lo+n): in place when possible, else in `buf`.
template <class C>
const C* operand_tile(const Operand& op, const Shape& shape, int64_t lo, int64_t n, C* buf) {
  if (op.scalar) {
    std::fill_n(buf, n, to_compute<C>(op.scalar_value));
    return buf;
  }
  return visit_dtype(op.dtype, [&](auto dt) -> const C* {
    constexpr DType D = decltype(dt)::value;
    using T = typename DT<D>::T;
    if (op.nonzero) {
      gather<C, D, true>(op, shape, lo, n, buf);
      return buf;
    }
    if constexpr (kStoredAs<D, C>) {
      if (op.dense) return reinterpret_cast<const T*>(op.base) + lo;
    }
    if (op.uniform) {
      std::fill_n(buf, n, load_as<D, C>(reinterpret_cast<const T*>(op.base)));
      return buf;
    }
    gather<C, D, false>(op, shape, lo, n, buf);
    return buf;
  });
}

template <class C>
bool out_in_place(DType d) {
  return (d == DType::f32 && std::is_same_v<C, float>) ||
         (d == DType::i32 && std::is_same_v<C, int32_t>) ||
         (d == DType::i64 && std::is_same_v<C, int64_t>);
}

template <class C>
void store_tile(DType d, std::byte* out, int64_t lo, int64_t n, const C* src) {
  visit_dtype(d, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    auto* p = reinterpret_cast<typename DT<D>::T*>(out) + lo;
    for (int64_t i = 0; i < n; ++i) store_as<D, C>(p + i, src[i]);
  });
}

// Runs f(a, b, c, s0, s1) over every element of the plan, in compute type C.
template <class C, int N, class F>
void run_plan(const Plan& p, F f) {
  const C s0 = to_compute<C>(p.s0), s1 = to_compute<C>(p.s1);
  const bool direct = out_in_place<C>(p.out_dtype);
  const int64_t ntiles = (p.numel + kTile - 1) / kTile;
  parallel_range(ntiles, p.numel * N, [&](int64_t t0, int64_t t1) {
    alignas(64) C buf[N][kTile];
    alignas(64) C obuf[kTile];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t lo = t * kTile, n = std::min(kTile, p.numel - lo);
      const C* a = operand_tile<C>(p.in[0], p.shape, lo, n, buf[0]);
      const C* b = N > 1 ? operand_tile<C>(p.in[1], p.shape, lo, n, buf[N > 1 ? 1 : 0]) : nullptr;
      const C* c = N > 2 ? operand_tile<C>(p.in[2], p.shape, lo, n, buf[N > 2 ? 2 : 0]) : nullptr;
      C* o = direct ? reinterpret_cast<C*>(p.out) + lo : obuf;
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (N == 1)
          o[i] = static_cast<C>(f(a[i], C(0), C(0), s0, s1));
        else if constexpr (N == 2)
          o[i] = static_cast<C>(f(a[i], b[i], C(0), s0, s1));
        else
          o[i] = static_cast<C>(f(a[i], b[i], c[i], s0, s1));
      }
      if (!direct) store_tile<C>(p.out_dtype, p.out, lo, n, obuf);
    }
  });
}

enum class ComputeType { f32, i32, i64 };

// Floating if the row is float-only or any value operand (or the output) is floating; otherwise
// the widest integer. Bool computes as 0/1 in int32. where's condition does not take part. An
// integer tensor with a fractional scalar operand computes in the integer type (the scalar is
// truncated toward zero), consistent with an integer output dtype.
ComputeType compute_type(const OpCall& call, const Tensor& out, bool int_ok) {
  if (!int_ok) return ComputeType::f32;
  bool any_f = is_floating(out.dtype()), any_i64 = out.dtype() == DType::i64;
  for (size_t k = call.op == OpId::where ? 1 : 0; k < call.inputs.size(); ++k) {
    any_f |= is_floating(call.inputs[k].dtype());
    any_i64 |= call.inputs[k].dtype() == DType::i64;
  }
  return any_f ? ComputeType::f32 : any_i64 ? ComputeType::i64 : ComputeType::i32;
}

// One struct per table row: f(a, b, c, s0, s1) is the row's expr, for any compute type.
#define LF_EW_ROW(name, arity, cat, flags, expr)                                    \
  struct Row_##name {                                                               \
    template <class C>                                                              \
    static auto f([[maybe_unused]] C a, [[maybe_unused]] C b, [[maybe_unused]] C c, \
                  [[maybe_unused]] C s0, [[maybe_unused]] C s1) {                   \
      return expr;                                                                  \
    }                                                                               \
  };
LF_OP_TABLE(LF_EW_ROW)
#undef LF_EW_ROW

template <class Row, int Arity, bool IntOk>
void run_row(const OpCall& call, const Tensor& out) {
  const Plan p = make_plan(call, out, Arity);
  if (p.numel == 0) return;
  auto f = [](auto a, auto b, auto c, auto s0, auto s1) { return Row::f(a, b, c, s0, s1); };
  switch (compute_type(call, out, IntOk)) {
    case ComputeType::f32:
      return run_plan<float, Arity>(p, f);
    case ComputeType::i32:
      if constexpr (IntOk) return run_plan<int32_t, Arity>(p, f);
      break;
    case ComputeType::i64:
      if constexpr (IntOk) return run_plan<int64_t, Arity>(p, f);
      break;
  }
  LF_ASSERT(false, describe_call(call), " has no integer form");
}

void run_custom(const OpCall& call, const Tensor& out) {
  const CustomElementwiseDef& def = custom_op(call.attrs.custom_id);
  LF_CHECK(def.cpu_fn != nullptr, def.name, "custom op has no CPU function; inputs ",
           describe_call(call));
  const Plan p = make_plan(call, out, def.arity);
  if (p.numel == 0) return;
  const CpuScalarFn fn = def.cpu_fn;
  auto f = [fn](float a, float b, float c, float, float) { return fn(a, b, c); };
  switch (def.arity) {
    case 1:
      return run_plan<float, 1>(p, f);
    case 2:
      return run_plan<float, 2>(p, f);
    case 3:
      return run_plan<float, 3>(p, f);
  }
  LF_ASSERT(false, "custom op ", def.name, " has arity ", def.arity);
}

// Only Elementwise rows with a fixed arity produce a kernel; the rest are never instantiated.
template <class Row, int Arity, bool IntOk, OpCategory Cat>
bool try_row(const OpCall& call, const Tensor& out) {
  if constexpr (Cat == OpCategory::Elementwise && Arity >= 1 && Arity <= 3) {
    run_row<Row, Arity, IntOk>(call, out);
    return true;
  } else {
    return false;
  }
}

}  // namespace

void run_elementwise(const OpCall& call, const Tensor& out) {
  if (call.op == OpId::custom) return run_custom(call, out);
  bool done = false;
  switch (call.op) {
#define LF_EW_CASE(name, arity, cat, flags, expr)                                 \
  case OpId::name:                                                                \
    done = try_row<Row_##name, arity, detail::flags, OpCategory::cat>(call, out); \
    break;
    LF_OP_TABLE(LF_EW_CASE)
#undef LF_EW_CASE
    default:
      break;
  }
  LF_ASSERT(done, describe_call(call), " is not an elementwise op");
}

}  // namespace livefuse::cpu
