#include "kernels/jit/cpu_eval.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

// clang-format off
#include "kernels/cpu/row_sums.hpp"
#include "kernels/cpu/strided_runs.hpp"
#include "kernels/device/lf_math.cuh"
#include "kernels/jit/lf_fused.cuh"
// clang-format on
#include "livefuse/error.hpp"
#include "runtime/registry.hpp"

namespace livefuse::jit::cpu_eval {
namespace {

template <Nat N> struct NatT;
template <> struct NatT<Nat::F32> { using T = float; };
template <> struct NatT<Nat::I32> { using T = int32_t; };
template <> struct NatT<Nat::I64> { using T = int64_t; };

template <class F>
decltype(auto) visit_nat(Nat n, F&& f) {
  switch (n) {
    case Nat::I32: return f(int32_t{});
    case Nat::I64: return f(int64_t{});
    default: return f(float{});
  }
}

// ---- storage <-> natural -------------------------------------------------------------------
template <DType D> struct Storage;
template <> struct Storage<DType::f32> {
  using S = float;
  static float load(S s) { return s; }
  static S store(float v) { return v; }
};
template <> struct Storage<DType::f16> {
  using S = uint16_t;
  static float load(S s) { return lf_h2f(s); }
  static S store(float v) { return lf_f2h(v); }
};
template <> struct Storage<DType::bf16> {
  using S = uint16_t;
  static float load(S s) { return lf_bf2f(s); }
  static S store(float v) { return lf_f2bf(v); }
};
template <> struct Storage<DType::i32> {
  using S = int32_t;
  static int32_t load(S s) { return s; }
  static S store(int32_t v) { return v; }
};
template <> struct Storage<DType::i64> {
  using S = int64_t;
  static int64_t load(S s) { return s; }
  static S store(int64_t v) { return v; }
};
template <> struct Storage<DType::boolean> {
  using S = uint8_t;
  static int32_t load(S s) { return s != 0 ? 1 : 0; }
  static S store(int32_t v) { return v != 0 ? 1 : 0; }
};

template <class F>
decltype(auto) visit_storage(DType d, F&& f) {
  switch (d) {
    case DType::f16: return f(Storage<DType::f16>{});
    case DType::bf16: return f(Storage<DType::bf16>{});
    case DType::i32: return f(Storage<DType::i32>{});
    case DType::i64: return f(Storage<DType::i64>{});
    case DType::boolean: return f(Storage<DType::boolean>{});
    default: return f(Storage<DType::f32>{});
  }
}

// Walks n positions of a strided operand from linear position lo, calling f(j, offset).
template <class F>
void walk(const Shape& shape, const Strides& st, int64_t lo, int64_t n, F&& f) {
  cpu::for_each_run(shape, st.v.data(), lo, n, [&](int64_t done, int64_t off, int64_t m, int64_t s) {
    for (int64_t j = 0; j < m; ++j) f(done + j, off + j * s);
  });
}

bool is_dense_from(const Shape& shape, const Strides& st) {
  return st == contiguous_strides(shape);
}

// ---- natural -> compute type ---------------------------------------------------------------
template <class C, class V> C to_c(V v) {
  if constexpr (std::is_same_v<C, float>) return lf_to_f(static_cast<std::conditional_t<std::is_same_v<V, int64_t>, lf_i64, V>>(v));
  else if constexpr (std::is_same_v<C, int32_t>) return lf_to_i32(static_cast<std::conditional_t<std::is_same_v<V, int64_t>, lf_i64, V>>(v));
  else return lf_to_i64(static_cast<std::conditional_t<std::is_same_v<V, int64_t>, lf_i64, V>>(v));
}

// Operand k of an op as a C array of n elements (in place when it already is one).
template <class C>
const C* as_compute(const TileVal& v, int64_t n, void* tmp, bool truth) {
  return visit_nat(v.nat, [&](auto tag) -> const C* {
    using V = decltype(tag);
    const V* src = static_cast<const V*>(v.p);
    C* dst = static_cast<C*>(tmp);
    if (truth) {
      if (v.uniform) std::fill_n(dst, n, static_cast<C>(lf_truth(src[0])));
      else for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<C>(lf_truth(src[j]));
      return dst;
    }
    if constexpr (std::is_same_v<V, C>) {
      if (!v.uniform) return src;
    }
    if (v.uniform) std::fill_n(dst, n, to_c<C>(src[0]));
    else for (int64_t j = 0; j < n; ++j) dst[j] = to_c<C>(src[j]);
    return dst;
  });
}

// Scalar attribute as compute type, as the eager backend converts it (from double).
template <class C> C scalar_as(double v) {
  if constexpr (std::is_floating_point_v<C>) {
    return static_cast<C>(v);
  } else {
    if (v != v) return 0;
    if (v >= static_cast<double>(std::numeric_limits<C>::max())) return std::numeric_limits<C>::max();
    if (v <= static_cast<double>(std::numeric_limits<C>::min())) return std::numeric_limits<C>::min();
    return static_cast<C>(v);
  }
}

// Converts n compute values into the natural form of dtype dt (in place allowed when the
// natural type equals C).
template <class C>
void naturalize(const C* src, DType dt, int64_t n, void* dst) {
  switch (dt) {
    case DType::f32: {
      float* o = static_cast<float*>(dst);
      for (int64_t j = 0; j < n; ++j) o[j] = lf_to_f(static_cast<std::conditional_t<std::is_same_v<C, int64_t>, lf_i64, C>>(src[j]));
      return;
    }
    case DType::f16: {
      float* o = static_cast<float*>(dst);
      for (int64_t j = 0; j < n; ++j) o[j] = lf_nat_f16(static_cast<float>(src[j]));
      return;
    }
    case DType::bf16: {
      float* o = static_cast<float*>(dst);
      for (int64_t j = 0; j < n; ++j) o[j] = lf_nat_bf16(static_cast<float>(src[j]));
      return;
    }
    case DType::i32: {
      int32_t* o = static_cast<int32_t*>(dst);
      for (int64_t j = 0; j < n; ++j) o[j] = to_c<int32_t>(src[j]);
      return;
    }
    case DType::i64: {
      int64_t* o = static_cast<int64_t*>(dst);
      for (int64_t j = 0; j < n; ++j) o[j] = to_c<int64_t>(src[j]);
      return;
    }
    case DType::boolean: {
      int32_t* o = static_cast<int32_t*>(dst);
      for (int64_t j = 0; j < n; ++j) o[j] = src[j] != C(0) ? 1 : 0;
      return;
    }
  }
}

// One struct per table row: f(a, b, c, s0, s1) is the row's expr (the same tokens the eager
// backends and the renderer use).
#define LF_INTERP_ROW(name, arity, cat, flags, expr)                                       \
  struct Row_##name {                                                                      \
    static constexpr int kArity = arity;                                                   \
    static constexpr bool kIntOk = detail::flags;                                          \
    static constexpr bool kElementwise = OpCategory::cat == OpCategory::Elementwise;       \
    template <class C>                                                                     \
    static C f([[maybe_unused]] C a, [[maybe_unused]] C b, [[maybe_unused]] C c,           \
               [[maybe_unused]] C s0, [[maybe_unused]] C s1) {                             \
      return static_cast<C>(expr);                                                         \
    }                                                                                      \
  };
LF_OP_TABLE(LF_INTERP_ROW)
#undef LF_INTERP_ROW

// The tile loops are cloned for AVX2 and picked at load time (ifunc); AVX2 alone does not
// enable FMA contraction, so results stay bit-identical to the baseline build.
// Not under ThreadSanitizer: the ifunc resolvers are instrumented and run during relocation,
// before the TSan runtime is initialised, so every binary crashed at load.
#if defined(__SANITIZE_THREAD__)
#define LF_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LF_UNDER_TSAN 1
#endif
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(LF_UNDER_TSAN)
#define LF_TILE_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define LF_TILE_LOOP
#endif

template <class Row, class C>
LF_TILE_LOOP void apply_row(const C* a, const C* b, const C* c, C* o, int64_t n, C s0, C s1) {
  if constexpr (Row::kArity == 1) {
    for (int64_t j = 0; j < n; ++j) o[j] = Row::template f<C>(a[j], C(0), C(0), s0, s1);
  } else if constexpr (Row::kArity == 2) {
    for (int64_t j = 0; j < n; ++j) o[j] = Row::template f<C>(a[j], b[j], C(0), s0, s1);
  } else {
    for (int64_t j = 0; j < n; ++j) o[j] = Row::template f<C>(a[j], b[j], c[j], s0, s1);
  }
}

// Binary rows with a scalar right operand: b is a constant, no tile of copies.
template <class Row, class C>
LF_TILE_LOOP void apply_row_scalar(const C* a, C b, C* o, int64_t n, C s0, C s1) {
  for (int64_t j = 0; j < n; ++j) o[j] = Row::template f<C>(a[j], b, C(0), s0, s1);
}

template <class C>
void eval_typed(const Instr& in, const TileVal* args, int64_t n, void* dst, Scratch& sc) {
  const C* ops[3] = {nullptr, nullptr, nullptr};
  for (int k = 0; k < in.nargs; ++k) {
    const bool truth = in.kind == InstrKind::Op && in.op == OpId::where && k == 0;
    ops[k] = as_compute<C>(args[k], n, sc.slot(k), truth);
  }
  const C s0 = scalar_as<C>(in.s[0]), s1 = scalar_as<C>(in.s[1]);
  // Compute in place when the result's natural type is C itself.
  const bool direct = nat_of(in.dtype) == nat_of(in.compute) && in.dtype != DType::boolean;
  C* out = direct ? static_cast<C*>(dst) : static_cast<C*>(sc.slot(3));
  bool scalar_done = false;
  if (in.scalar_operand && in.kind == InstrKind::Op) {
    switch (in.op) {
#define LF_INTERP_SCALAR(name, arity, cat, flags, expr)                                       \
  case OpId::name:                                                                            \
    if constexpr (Row_##name::kElementwise && Row_##name::kArity == 2 &&                     \
                  (std::is_same_v<C, float> || Row_##name::kIntOk)) {                        \
      apply_row_scalar<Row_##name, C>(ops[0], s0, out, n, s0, s1);                            \
      scalar_done = true;                                                                     \
    }                                                                                         \
    break;
      LF_OP_TABLE(LF_INTERP_SCALAR)
#undef LF_INTERP_SCALAR
      default: break;
    }
  }
  if (in.scalar_operand && !scalar_done) {
    C* b = static_cast<C*>(sc.slot(1));
    std::fill_n(b, n, s0);
    ops[1] = b;
  }
  if (scalar_done) {
  } else if (in.kind == InstrKind::Custom) {
    if constexpr (std::is_same_v<C, float>) {
      const CpuScalarFn fn = custom_op(in.custom_id).cpu_fn;
      LF_CHECK(fn != nullptr, custom_op(in.custom_id).name, "custom op has no CPU function");
      for (int64_t j = 0; j < n; ++j)
        out[j] = fn(ops[0][j], in.nargs > 1 ? ops[1][j] : 0.f, in.nargs > 2 ? ops[2][j] : 0.f);
    } else {
      LF_ASSERT(false, "custom op computed in an integer type");
    }
  } else {
    bool done = false;
    switch (in.op) {
#define LF_INTERP_CASE(name, arity, cat, flags, expr)                                         \
  case OpId::name:                                                                            \
    if constexpr (Row_##name::kElementwise && Row_##name::kArity >= 1 &&                     \
                  (std::is_same_v<C, float> || Row_##name::kIntOk)) {                        \
      apply_row<Row_##name, C>(ops[0], ops[1], ops[2], out, n, s0, s1);                       \
      done = true;                                                                            \
    }                                                                                         \
    break;
      LF_OP_TABLE(LF_INTERP_CASE)
#undef LF_INTERP_CASE
      default: break;
    }
    LF_ASSERT(done, "interpreter has no ", op_name(in.op), " in ", dtype_name(in.compute));
  }
  if (direct) {
    if (in.dtype == DType::f16 || in.dtype == DType::bf16) naturalize<C>(out, in.dtype, n, dst);
  } else {
    naturalize<C>(out, in.dtype, n, dst);
  }
}

}  // namespace

int64_t* thread_buffer(int which, size_t elems) {
  struct Buf {
    std::unique_ptr<int64_t[]> p;
    size_t n = 0;
  };
  thread_local Buf bufs[4];
  Buf& b = bufs[which];
  if (b.n < elems) {
    b.p.reset(new int64_t[elems]);
    b.n = elems;
  }
  return b.p.get();
}

void load_tile(const IoGeometry& io, DType dt, const Shape& shape, int64_t lo, int64_t n, void* dst) {
  visit_storage(dt, [&](auto st) {
    using St = decltype(st);
    using S = typename St::S;
    const S* base = static_cast<const S*>(io.data);
    auto* out = static_cast<decltype(St::load(S{}))*>(dst);
    if (is_dense_from(shape, io.strides)) {
      const S* p = base + lo;
      if constexpr (std::is_same_v<S, decltype(St::load(S{}))>) std::memcpy(out, p, n * sizeof(S));
      else for (int64_t j = 0; j < n; ++j) out[j] = St::load(p[j]);
      return;
    }
    walk(shape, io.strides, lo, n, [&](int64_t j, int64_t off) { out[j] = St::load(base[off]); });
  });
}

void store_tile(const IoGeometry& io, DType dt, const Shape& shape, int64_t lo, int64_t n, const void* src) {
  visit_storage(dt, [&](auto st) {
    using St = decltype(st);
    using S = typename St::S;
    using N = decltype(St::load(S{}));
    S* base = static_cast<S*>(io.data);
    const N* in = static_cast<const N*>(src);
    if (is_dense_from(shape, io.strides)) {
      S* p = base + lo;
      if constexpr (std::is_same_v<S, N>) std::memcpy(p, in, n * sizeof(S));
      else for (int64_t j = 0; j < n; ++j) p[j] = St::store(in[j]);
      return;
    }
    walk(shape, io.strides, lo, n, [&](int64_t j, int64_t off) { base[off] = St::store(in[j]); });
  });
}

void load_run(const void* base, int64_t stride, DType dt, int64_t n, void* dst) {
  visit_storage(dt, [&](auto st) {
    using St = decltype(st);
    using S = typename St::S;
    const S* p = static_cast<const S*>(base);
    auto* out = static_cast<decltype(St::load(S{}))*>(dst);
    if (stride == 1) for (int64_t j = 0; j < n; ++j) out[j] = St::load(p[j]);
    else for (int64_t j = 0; j < n; ++j) out[j] = St::load(p[j * stride]);
  });
}

void store_run(void* base, int64_t stride, DType dt, int64_t n, const void* src) {
  visit_storage(dt, [&](auto st) {
    using St = decltype(st);
    using S = typename St::S;
    using N = decltype(St::load(S{}));
    S* p = static_cast<S*>(base);
    const N* in = static_cast<const N*>(src);
    for (int64_t j = 0; j < n; ++j) p[j * stride] = St::store(in[j]);
  });
}

void eval_op(const Instr& in, const TileVal* args, int64_t n, void* dst, Scratch& scratch) {
  switch (in.compute) {
    case DType::i32: return eval_typed<int32_t>(in, args, n, dst, scratch);
    case DType::i64: return eval_typed<int64_t>(in, args, n, dst, scratch);
    default: return eval_typed<float>(in, args, n, dst, scratch);
  }
}

void eval_const(double v, DType dt, int64_t n, void* dst) {
  visit_nat(nat_of(dt), [&](auto tag) {
    using V = decltype(tag);
    V x;
    if constexpr (std::is_same_v<V, float>) x = naturalize_float(static_cast<float>(v), dt);
    else x = scalar_as<V>(v);
    std::fill_n(static_cast<V*>(dst), n, x);
  });
}

double sum_tile(const TileVal& v, int64_t n) {
  const float* p = static_cast<const float*>(v.p);
  if (v.uniform) return static_cast<double>(p[0]) * static_cast<double>(n);
  return cpu::sum_double(p, n);
}

float max_tile(const TileVal& v, int64_t n, float init) {
  const float* p = static_cast<const float*>(v.p);
  float m = init;
  if (v.uniform) return n > 0 ? lf_max(m, p[0]) : m;
  return cpu::max_float(p, n, m);
}

float naturalize_float(float v, DType dt) {
  if (dt == DType::f16) return lf_nat_f16(v);
  if (dt == DType::bf16) return lf_nat_bf16(v);
  return v;
}

}  // namespace livefuse::jit::cpu_eval
