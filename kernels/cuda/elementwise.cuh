#pragma once
// Eager elementwise kernels, derived from LF_OP_TABLE: every Elementwise row's expr becomes a
// functor, so the math is never typed twice (the JIT renderer compiles the same tokens).
//
// Three kernels per (op, compute type), chosen by the host plan (elementwise.cpp):
//  * ew_vec_kernel: all operands contiguous over the output (or one broadcast element, or an
//    immediate), one storage dtype; 16-byte loads/stores, grid-stride. The bandwidth path.
//  * ew_vec_strided_kernel: the innermost dim is contiguous (or broadcast) for every operand,
//    e.g. x[M, H] + bias[H] or a sliced row view: still 16-byte vectors along that dim, with
//    32-bit magic-division offsets for the outer dims (once per vector, not per element).
//  * ew_strided_kernel: anything else (transposed views, mixed dtypes as in cast / where):
//    up to 8 coalesced dims, 32-bit index math when the layout fits, 64-bit otherwise;
//    storage dtypes are a runtime switch (dtype_io.cuh). Each thread keeps 4 elements in
//    flight: with 2-byte elements one load per thread is far too little memory parallelism.
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/launch_util.hpp"
#include "kernels/cuda/offset_calc.cuh"

namespace livefuse::cuda {

// ---- functors from the table ------------------------------------------------------------
#define LF_EW_FUNCTOR(name, arity_, cat, flags, expr)                          \
  struct EwOp_##name {                                                         \
    static constexpr OpId kId = OpId::name;                                    \
    static constexpr int kArity = (arity_) < 1 ? 1 : (arity_);                 \
    static constexpr bool kIntOk = ::livefuse::detail::flags;                  \
    template <class T>                                                         \
    __device__ __forceinline__ T operator()(T a, T b, T c, T s0, T s1) const { \
      (void)a;                                                                 \
      (void)b;                                                                 \
      (void)c;                                                                 \
      (void)s0;                                                                \
      (void)s1;                                                                \
      return static_cast<T>(expr);                                             \
    }                                                                          \
  };
LF_OP_TABLE(LF_EW_FUNCTOR)
#undef LF_EW_FUNCTOR

// ---- vectorised contiguous path ---------------------------------------------------------
template <class S, class T>
struct VecArgs {
  typename S::Bits* out;
  const typename S::Bits* in[3];
  EwKind kind[3];
  T imm[3];
  int64_t n;
  T s0, s1;
};

template <class Op, class S, class T>
__global__ void __launch_bounds__(kEwThreads) ew_vec_kernel(VecArgs<S, T> a) {
  using Bits = typename S::Bits;
  using V = Vec16<Bits>;
  constexpr int kN = V::kN;
  constexpr int kA = Op::kArity;
  T bval[3] = {T(0), T(0), T(0)};
#pragma unroll
  for (int k = 0; k < kA; ++k) {
    if (a.kind[k] == EwKind::broadcast) bval[k] = S::to(a.in[k][0]);
    if (a.kind[k] == EwKind::immediate) bval[k] = a.imm[k];
  }
  const int64_t nvec = a.n / kN;
  const int64_t tid = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t v = tid; v < nvec; v += step) {
    V x[kA];
#pragma unroll
    for (int k = 0; k < kA; ++k)
      if (a.kind[k] == EwKind::dense) x[k] = reinterpret_cast<const V*>(a.in[k])[v];
    V y;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      T o[3] = {bval[0], bval[1], bval[2]};
#pragma unroll
      for (int k = 0; k < kA; ++k)
        if (a.kind[k] == EwKind::dense) o[k] = S::to(x[k].v[j]);
      y.v[j] = S::from(Op{}(o[0], o[1], o[2], a.s0, a.s1));
    }
    reinterpret_cast<V*>(a.out)[v] = y;
  }
  // Tail (n not a multiple of the vector width): the first threads take one element each.
  const int64_t i = nvec * kN + tid;
  if (i < a.n) {
    T o[3] = {bval[0], bval[1], bval[2]};
#pragma unroll
    for (int k = 0; k < kA; ++k)
      if (a.kind[k] == EwKind::dense) o[k] = S::to(a.in[k][i]);
    a.out[i] = S::from(Op{}(o[0], o[1], o[2], a.s0, a.s1));
  }
}

template <class Op, class S, class T>
VecArgs<S, T> make_vec_args(const EwPlan& p) {
  using Bits = typename S::Bits;
  VecArgs<S, T> a{};
  a.out = static_cast<Bits*>(p.out);
  for (int k = 0; k < 3; ++k) {
    a.in[k] = static_cast<const Bits*>(p.in[k]);
    a.kind[k] = p.kind[k];
    a.imm[k] = scalar_to<T>(p.imm[k]);
  }
  a.n = p.numel;
  a.s0 = scalar_to<T>(p.s0);
  a.s1 = scalar_to<T>(p.s1);
  return a;
}

template <class Op, class S, class T>
void launch_vec(const EwPlan& p, cudaStream_t s) {
  const VecArgs<S, T> a = make_vec_args<Op, S, T>(p);
  constexpr int kN = Vec16<typename S::Bits>::kN;
  const int64_t items = p.numel / kN > 0 ? p.numel / kN : 1;
  ew_vec_kernel<Op, S, T><<<grid_for(items), kEwThreads, 0, s>>>(a);
  LF_CUDA_LAUNCH_CHECK("ew_vec_kernel");
}

// ---- vectors along a contiguous innermost dim ---------------------------------------------
template <class S, class T, int N>
struct VecStridedArgs {
  typename S::Bits* out;
  const typename S::Bits* in[N];
  EwKind kind[N];
  T imm[N];
  uint32_t nvec;
  T s0, s1;
  OffsetCalc<uint32_t, N> oc;  // element offsets of the inputs (output: dense)
};

template <class Op, class S, class T>
__global__ void __launch_bounds__(kEwThreads)
    ew_vec_strided_kernel(const VecStridedArgs<S, T, Op::kArity> a) {
  using V = Vec16<typename S::Bits>;
  constexpr int kN = V::kN;
  constexpr int kA = Op::kArity;
  const uint32_t step = gridDim.x * blockDim.x;
  for (uint32_t v = blockIdx.x * blockDim.x + threadIdx.x; v < a.nvec; v += step) {
    uint32_t off[kA];
    a.oc.get(v * kN, off);
    T x[3][kN];
#pragma unroll
    for (int k = 0; k < 3; ++k) {
#pragma unroll
      for (int j = 0; j < kN; ++j) x[k][j] = T(0);
    }
#pragma unroll
    for (int k = 0; k < kA; ++k) {
      if (a.kind[k] == EwKind::dense) {
        const V in = *reinterpret_cast<const V*>(a.in[k] + off[k]);
#pragma unroll
        for (int j = 0; j < kN; ++j) x[k][j] = S::to(in.v[j]);
      } else {
        const T b = a.kind[k] == EwKind::immediate ? a.imm[k] : S::to(a.in[k][off[k]]);
#pragma unroll
        for (int j = 0; j < kN; ++j) x[k][j] = b;
      }
    }
    V y;
#pragma unroll
    for (int j = 0; j < kN; ++j) y.v[j] = S::from(Op{}(x[0][j], x[1][j], x[2][j], a.s0, a.s1));
    reinterpret_cast<V*>(a.out)[v] = y;
  }
}

template <class Op, class S, class T>
void launch_vec_strided(const EwPlan& p, cudaStream_t s) {
  using Bits = typename S::Bits;
  constexpr int kA = Op::kArity;
  constexpr int kN = Vec16<Bits>::kN;
  VecStridedArgs<S, T, kA> a{};
  a.out = static_cast<Bits*>(p.out);
  for (int k = 0; k < kA; ++k) {
    a.in[k] = static_cast<const Bits*>(p.in[k]);
    a.kind[k] = p.kind[k];
    a.imm[k] = scalar_to<T>(p.imm[k]);
  }
  a.nvec = static_cast<uint32_t>(p.numel / kN);
  a.s0 = scalar_to<T>(p.s0);
  a.s1 = scalar_to<T>(p.s1);
  a.oc = OffsetCalc<uint32_t, kA>::make(p.layout, 1);
  ew_vec_strided_kernel<Op, S, T><<<grid_for(a.nvec), kEwThreads, 0, s>>>(a);
  LF_CUDA_LAUNCH_CHECK("ew_vec_strided_kernel");
}

// ---- general strided path ---------------------------------------------------------------
inline constexpr int kStridedUnroll = 4;

template <class T, class Idx, int N>
struct StridedArgs {
  void* out;
  const void* in[N];
  DType out_dt;
  DType in_dt[N];
  EwKind kind[N];
  T imm[N];
  Idx n;
  T s0, s1;
  OffsetCalc<Idx, N> oc;  // input offsets; the output is dense (offset = linear index)
};

template <class Op, class T, class Idx>
__global__ void __launch_bounds__(kEwThreads)
    ew_strided_kernel(const StridedArgs<T, Idx, Op::kArity> a) {
  constexpr int kA = Op::kArity;
  constexpr int kU = kStridedUnroll;
  const Idx step = static_cast<Idx>(gridDim.x) * blockDim.x * kU;
  for (Idx base = static_cast<Idx>(blockIdx.x) * blockDim.x * kU + threadIdx.x; base < a.n;
       base += step) {
    T o[kU][3];
#pragma unroll
    for (int u = 0; u < kU; ++u) {  // all loads first: kU elements in flight per thread
      o[u][0] = o[u][1] = o[u][2] = T(0);
      const Idx i = base + static_cast<Idx>(u) * blockDim.x;
      if (i >= a.n) continue;
      Idx off[kA];
      a.oc.get(i, off);
#pragma unroll
      for (int k = 0; k < kA; ++k) {
        if (a.kind[k] == EwKind::immediate) {
          o[u][k] = a.imm[k];
        } else if (Op::kId == OpId::where && k == 0) {
          o[u][k] = load_truth(a.in[k], off[k], a.in_dt[k]) ? T(1) : T(0);
        } else {
          o[u][k] = load_as<T>(a.in[k], off[k], a.in_dt[k]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const Idx i = base + static_cast<Idx>(u) * blockDim.x;
      if (i < a.n) store_as<T>(a.out, i, a.out_dt, Op{}(o[u][0], o[u][1], o[u][2], a.s0, a.s1));
    }
  }
}

template <class Op, class T, class Idx>
void launch_strided(const EwPlan& p, cudaStream_t s) {
  constexpr int kA = Op::kArity;
  StridedArgs<T, Idx, kA> a{};
  a.out = p.out;
  a.out_dt = p.out_dtype;
  for (int k = 0; k < kA; ++k) {
    a.in[k] = p.in[k];
    a.in_dt[k] = p.in_dtype[k];
    a.kind[k] = p.kind[k];
    a.imm[k] = scalar_to<T>(p.imm[k]);
  }
  a.n = static_cast<Idx>(p.numel);
  a.s0 = scalar_to<T>(p.s0);
  a.s1 = scalar_to<T>(p.s1);
  a.oc = OffsetCalc<Idx, kA>::make(p.layout, 1);
  const int64_t items = (p.numel + kStridedUnroll - 1) / kStridedUnroll;
  ew_strided_kernel<Op, T, Idx><<<grid_for(items), kEwThreads, 0, s>>>(a);
  LF_CUDA_LAUNCH_CHECK("ew_strided_kernel");
}

// ---- dispatch -------------------------------------------------------------------------
template <class Op, class S, class T>
void launch_vector_path(const EwPlan& p, cudaStream_t s) {
  if (p.path == EwPath::vec) return launch_vec<Op, S, T>(p, s);
  return launch_vec_strided<Op, S, T>(p, s);
}

template <class Op, class T>
void launch_ew_typed(const EwPlan& p, cudaStream_t s) {
  // cast converts between storage dtypes by nature: always the strided kernel (rank 1 when
  // contiguous), which converts per element.
  if constexpr (Op::kId != OpId::cast) {
    if (p.path != EwPath::strided) {
      if constexpr (std::is_same_v<T, float>) {
        switch (p.out_dtype) {
          case DType::f16:
            return launch_vector_path<Op, F16, T>(p, s);
          case DType::bf16:
            return launch_vector_path<Op, BF16, T>(p, s);
          default:
            return launch_vector_path<Op, F32, T>(p, s);
        }
      } else if constexpr (std::is_same_v<T, int32_t>) {
        return launch_vector_path<Op, I32, T>(p, s);
      } else {
        return launch_vector_path<Op, I64, T>(p, s);
      }
    }
  }
  if (p.idx32) {
    launch_strided<Op, T, uint32_t>(p, s);
  } else {
    launch_strided<Op, T, int64_t>(p, s);
  }
}

template <class Op>
void launch_ew_op(const EwPlan& p, cudaStream_t s) {
  if (p.compute == Compute::f32) return launch_ew_typed<Op, float>(p, s);
  if constexpr (Op::kIntOk) {
    if (p.compute == Compute::i32) return launch_ew_typed<Op, int32_t>(p, s);
    return launch_ew_typed<Op, int64_t>(p, s);
  } else {
    LF_ASSERT(false, "integer compute planned for float-only op ", op_name(Op::kId));
  }
}

// Launches p.op if Pred::take(arity, int_ok, id) selects it for this translation unit.
template <class Pred>
bool launch_group(const EwPlan& p, cudaStream_t s) {
  switch (p.op) {
#define LF_EW_CASE(name, arity, cat, flags, expr)                                             \
  case OpId::name:                                                                            \
    if constexpr (OpCategory::cat == OpCategory::Elementwise && OpId::name != OpId::custom && \
                  Pred::take(arity, ::livefuse::detail::flags, OpId::name)) {                 \
      launch_ew_op<EwOp_##name>(p, s);                                                        \
      return true;                                                                            \
    } else {                                                                                  \
      return false;                                                                           \
    }
    LF_OP_TABLE(LF_EW_CASE)
#undef LF_EW_CASE
    default:
      return false;
  }
}

}  // namespace livefuse::cuda
