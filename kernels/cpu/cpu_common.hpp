#pragma once
// Shared pieces of the CPU backend: dtype traits and conversions (through lf_math.cuh, the same
// helpers every backend uses), strided views, and the parallel-for policy.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/device/lf_math.cuh"
#include "livefuse/error.hpp"
#include "runtime/op_call.hpp"

namespace livefuse::cpu {

// exp(x - shift) as 2^((x - shift) log2 e) through lf_exp2, which vectorises where libm's expf
// is a call per element (a third of the CPU attention's time, and of the eager softmax's).
// Within 1.2 ulp of exp plus the rounding of the product; exp2(-inf) is exactly 0 and NaN
// propagates, as with exp. The softmax and the fused attention take it alike.
inline float exp_shifted(float x, float shift) {
  constexpr float kLog2e = 1.4426950408889634f;
  return lf_exp2((x - shift) * kLog2e);
}

// ---- dtypes ------------------------------------------------------------------------------
// T: storage type. C: natural compute type (f16/bf16 compute in float, bool as 0/1 int32).
template <DType D>
struct DT;
template <>
struct DT<DType::f32> {
  using T = float;
  using C = float;
};
template <>
struct DT<DType::f16> {
  using T = uint16_t;
  using C = float;
};
template <>
struct DT<DType::bf16> {
  using T = uint16_t;
  using C = float;
};
template <>
struct DT<DType::i32> {
  using T = int32_t;
  using C = int32_t;
};
template <>
struct DT<DType::i64> {
  using T = int64_t;
  using C = int64_t;
};
template <>
struct DT<DType::boolean> {
  using T = uint8_t;
  using C = int32_t;
};

// Calls f(std::integral_constant<DType, D>{}) for the runtime dtype d.
template <class F>
decltype(auto) visit_dtype(DType d, F&& f) {
  switch (d) {
    case DType::f32:
      return f(std::integral_constant<DType, DType::f32>{});
    case DType::f16:
      return f(std::integral_constant<DType, DType::f16>{});
    case DType::bf16:
      return f(std::integral_constant<DType, DType::bf16>{});
    case DType::i32:
      return f(std::integral_constant<DType, DType::i32>{});
    case DType::i64:
      return f(std::integral_constant<DType, DType::i64>{});
    case DType::boolean:
      return f(std::integral_constant<DType, DType::boolean>{});
  }
  LF_ASSERT(false, "unknown dtype ", static_cast<int>(d));
  return f(std::integral_constant<DType, DType::f32>{});  // unreachable
}

// Float -> integer without UB: NaN gives 0, out-of-range values saturate.
template <class I>
inline I saturate_to(double v) {
  if (v != v) return 0;
  if (v >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  if (v <= static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  return static_cast<I>(v);
}

// Any arithmetic value -> compute type C (float, int32_t or int64_t).
template <class C, class V>
inline C to_compute(V v) {
  if constexpr (std::is_floating_point_v<C> || !std::is_floating_point_v<V>) {
    return static_cast<C>(v);
  } else {
    return saturate_to<C>(static_cast<double>(v));
  }
}

template <DType D>
inline typename DT<D>::C load_natural(const typename DT<D>::T* p) {
  if constexpr (D == DType::f16)
    return lf_h2f(*p);
  else if constexpr (D == DType::bf16)
    return lf_bf2f(*p);
  else if constexpr (D == DType::boolean)
    return *p != 0 ? 1 : 0;
  else
    return *p;
}

template <DType D, class C>
inline C load_as(const typename DT<D>::T* p) {
  return to_compute<C>(load_natural<D>(p));
}

template <DType D, class C>
inline void store_as(typename DT<D>::T* p, C v) {
  if constexpr (D == DType::f32)
    *p = static_cast<float>(v);
  else if constexpr (D == DType::f16)
    *p = lf_f2h(static_cast<float>(v));
  else if constexpr (D == DType::bf16)
    *p = lf_f2bf(static_cast<float>(v));
  else if constexpr (D == DType::boolean)
    *p = v != C(0) ? 1 : 0;  // NaN != 0: true, like torch
  else
    *p = to_compute<typename DT<D>::T>(v);
}

// True when values of dtype D are stored exactly as C (so kernels may read/write in place).
template <DType D, class C>
inline constexpr bool kStoredAs = std::is_same_v<typename DT<D>::T, C>;

// ---- strided views ---------------------------------------------------------------------------
// A tensor as kernels see it: element (i0, .., ik) lives at base + sum(i * stride) elements.
struct View {
  std::byte* base = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Strides strides;
  size_t esize() const { return dtype_size(dtype); }
  template <class T>
  T* ptr() const {
    return reinterpret_cast<T*>(base);
  }
};

View view_of(const Tensor& t);
// Dense row-major view of an output tensor (outputs are contiguous, but for a concat's, which may
// have room to grow: runtime/append.hpp; kernels/cpu/layout.cpp writes those through its strides).
View out_view(const Tensor& t);

// `strides` of a tensor of shape `in` as seen broadcast to `out` (0 where broadcast).
Strides broadcast_strides(const Shape& in, const Strides& strides, const Shape& out);

// Maps a linear (row-major) index over `shape` to an element offset through `strides`.
struct StridedIndex {
  Shape shape;
  Strides strides;
  StridedIndex() = default;
  StridedIndex(const Shape& s, const Strides& st) : shape(s), strides(st) {}
  int64_t offset(int64_t linear) const {
    int64_t off = 0;
    for (int d = shape.rank - 1; d >= 0 && linear > 0; --d) {
      const int64_t n = shape.v[d];
      off += (linear % n) * strides.v[d];
      linear /= n;
    }
    return off;
  }
};

// Drops size-1 dims and merges neighbours that are contiguous for every stride set in `sets`
// (all of the same rank as `shape`), so loops run over as few, as long dims as possible.
void collapse_dims(Shape& shape, Strides* sets, int nsets);

// n values of a strided run (element `off`, step `stride`) of dtype d, as floats.
inline void load_floats(const std::byte* base, DType d, int64_t off, int64_t n, int64_t stride,
                        float* dst) {
  visit_dtype(d, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    const auto* p = reinterpret_cast<const typename DT<D>::T*>(base) + off;
    if (stride == 1) {
      for (int64_t i = 0; i < n; ++i) dst[i] = load_as<D, float>(p + i);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = load_as<D, float>(p + i * stride);
    }
  });
}

// n floats into a dense run of dtype d starting at element `off`.
inline void store_floats(std::byte* base, DType d, int64_t off, int64_t n, const float* src) {
  visit_dtype(d, [&](auto dt) {
    constexpr DType D = decltype(dt)::value;
    auto* p = reinterpret_cast<typename DT<D>::T*>(base) + off;
    for (int64_t i = 0; i < n; ++i) store_as<D, float>(p + i, src[i]);
  });
}

// ---- parallelism -----------------------------------------------------------------------------
// Work below this many "element operations" runs on the calling thread: a TBB dispatch costs a
// few microseconds, more than small tensors take in total.
inline constexpr int64_t kParallelWork = 32 * 1024;

// Threads the CPU kernels may run on: the arena's, capped by LIVEFUSE_CPU_THREADS.
int cpu_workers();

// f(begin, end) over [0, n), split across TBB threads when `work` (a rough count of element
// operations for the whole range) is large enough.
template <class F>
void parallel_range(int64_t n, int64_t work, F&& f) {
  if (n <= 0) return;
  if (n == 1 || work < kParallelWork) {
    f(int64_t{0}, n);
    return;
  }
  const int64_t per_item = std::max<int64_t>(1, work / n);
  const int64_t grain = std::max<int64_t>(1, kParallelWork / 4 / per_item);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<int64_t>& r) { f(r.begin(), r.end()); });
}

}  // namespace livefuse::cpu
