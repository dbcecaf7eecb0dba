#pragma once
// Device side of StridedLayout: linear index -> per-operand element offsets.
// Dims are kept innermost first so the loop peels dims off the linear index in order.
#include <cstdint>

#include "kernels/cuda/strided.hpp"

namespace livefuse::cuda {

template <class Idx>
struct DivMod;

template <>
struct DivMod<uint32_t> {
  Div32 div;
  __host__ __device__ uint32_t size() const { return div.d; }
  __device__ __forceinline__ uint32_t quot(uint32_t n) const {
    return (__umulhi(n, div.m) + n) >> div.s;
  }
  static DivMod make(int64_t d) { return {make_div32(static_cast<uint32_t>(d))}; }
};

template <>
struct DivMod<int64_t> {
  int64_t d;
  __host__ __device__ int64_t size() const { return d; }
  __device__ __forceinline__ int64_t quot(int64_t n) const { return n / d; }
  static DivMod make(int64_t d) { return {d}; }
};

// Offsets for N operands. Idx = uint32_t (layout fits_uint32) or int64_t.
template <class Idx, int N>
struct OffsetCalc {
  int rank = 0;
  DivMod<Idx> sizes[kMaxDims];
  Idx strides[kMaxDims][N];  // [dim innermost-first][operand]

  // `first` = index of the layout's first operand this calculator serves.
  static OffsetCalc make(const StridedLayout& l, int first) {
    OffsetCalc c;
    c.rank = l.rank;
    for (int d = 0; d < l.rank; ++d) {
      const int src = l.rank - 1 - d;
      c.sizes[d] = DivMod<Idx>::make(l.sizes[src]);
      for (int k = 0; k < N; ++k) c.strides[d][k] = static_cast<Idx>(l.strides[first + k][src]);
    }
    return c;
  }

  __device__ __forceinline__ void get(Idx linear, Idx (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == rank) break;
      Idx r;
      if (d == rank - 1) {  // outermost: no division needed
        r = linear;
      } else {
        const Idx q = sizes[d].quot(linear);
        r = linear - q * sizes[d].size();
        linear = q;
      }
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += r * strides[d][k];
    }
  }
};

}  // namespace livefuse::cuda
