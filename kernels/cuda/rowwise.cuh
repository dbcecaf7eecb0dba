#pragma once
// Shared pieces of the row-wise kernels: the argument block, row addressing, chunked loads
// (V elements at a time: 1 for strided rows, 16 bytes for contiguous aligned rows) and the
// host-side choice between the two and between a warp and a block per row.
#include <cstdint>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/launch_util.hpp"
#include "kernels/cuda/offset_calc.cuh"
#include "kernels/cuda/rowwise.hpp"
#include "kernels/cuda/warp.cuh"

namespace livefuse::cuda {

struct RowArgs {
  const void* x;
  void* out;
  const void* mask;
  const void* w;
  const void* b;
  DType mask_dt, w_dt, b_dt;
  int64_t rows, n;
  int64_t x_cs, mask_cs, w_cs, b_cs;  // strides along the row
  float scale, eps;
  int group;                  // threads per row: 32 or blockDim.x
  OffsetCalc<int64_t, 2> oc;  // row -> (x offset, mask offset)
};

inline constexpr int kRowThreads = 256;

// Loads chunk j (elements [j*V, j*V+V)) of a row as floats.
template <class S, int V>
__device__ __forceinline__ void load_chunk(const void* row, int64_t cs, int64_t j, float (&v)[V]) {
  using Bits = typename S::Bits;
  if constexpr (V == 1) {
    v[0] = S::to(static_cast<const Bits*>(row)[j * cs]);
  } else {
    const Vec16<Bits> x = reinterpret_cast<const Vec16<Bits>*>(row)[j];
#pragma unroll
    for (int t = 0; t < V; ++t) v[t] = S::to(x.v[t]);
  }
}

// Same for an operand whose dtype is only known at run time (V == 1) or equals S (V > 1).
template <class S, int V>
__device__ __forceinline__ void load_chunk_rt(const void* row, DType dt, int64_t cs, int64_t j,
                                              float (&v)[V]) {
  if constexpr (V == 1) {
    v[0] = load_as<float>(row, j * cs, dt);
  } else {
    load_chunk<S, V>(row, cs, j, v);
  }
}

template <class S, int V>
__device__ __forceinline__ void store_chunk(void* row, int64_t j, const float (&v)[V]) {
  using Bits = typename S::Bits;
  if constexpr (V == 1) {
    static_cast<Bits*>(row)[j] = S::from(v[0]);
  } else {
    Vec16<Bits> y;
#pragma unroll
    for (int t = 0; t < V; ++t) y.v[t] = S::from(v[t]);
    reinterpret_cast<Vec16<Bits>*>(row)[j] = y;
  }
}

template <class S>
__device__ __forceinline__ const void* elem_ptr(const void* base, int64_t off) {
  return static_cast<const typename S::Bits*>(base) + off;
}

// Host: everything the kernels need. *vec_ok says whether 16-byte chunks (V = vec_width) are
// usable: unit strides, n a multiple of V, every row start and 1-D operand aligned, and the
// 1-D operands of x's dtype.
inline RowArgs make_row_args(const RowPlan& p, int vec_width, bool* vec_ok) {
  RowArgs a{};
  a.x = p.x;
  a.out = p.out;
  a.mask = p.mask.ptr;
  a.w = p.weight.ptr;
  a.b = p.bias.ptr;
  a.mask_dt = p.mask.dtype;
  a.w_dt = p.weight.dtype;
  a.b_dt = p.bias.dtype;
  a.rows = p.rows;
  a.n = p.n;
  a.x_cs = p.x_col_stride;
  a.mask_cs = p.mask.col_stride;
  a.w_cs = p.weight.col_stride;
  a.b_cs = p.bias.col_stride;
  a.scale = p.scale;
  a.eps = p.eps;
  a.oc = OffsetCalc<int64_t, 2>::make(p.outer, 0);
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  bool ok = p.n % vec_width == 0 && p.x_col_stride == 1 && aligned(p.x) && aligned(p.out);
  for (int d = 0; d < p.outer.rank; ++d) {
    ok = ok && p.outer.strides[0][d] % vec_width == 0;
    if (p.mask.ptr) ok = ok && p.outer.strides[1][d] % vec_width == 0;
  }
  for (const RowOperand* o : {&p.mask, &p.weight, &p.bias})
    if (o->ptr) ok = ok && o->col_stride == 1 && o->dtype == p.dtype && aligned(o->ptr);
  *vec_ok = ok;
  return a;
}

// Host: a warp per row for short rows (8 rows per block, no barriers), a block per row for
// long rows or when there are too few rows to fill the GPU with warps. Grid-stride over rows.
inline unsigned row_grid(RowArgs& a, int64_t chunks_per_row) {
  const DeviceInfo& info = current_device_info();
  const bool block_mode =
      chunks_per_row > 256 || (chunks_per_row > 32 && a.rows < int64_t{info.sm_count} * 16);
  a.group = block_mode ? kRowThreads : 32;
  const int64_t rows_per_block = kRowThreads / a.group;
  const int64_t need = (a.rows + rows_per_block - 1) / rows_per_block;
  const int64_t cap = int64_t{info.sm_count} * (info.max_threads_per_sm / kRowThreads) * 4;
  return static_cast<unsigned>(std::clamp<int64_t>(need, 1, cap));
}

// Rows of up to 32 * kCachedFloats elements are read once into registers (kCachedFloats per
// lane of one warp) and reduced and written from there: one read of the row from memory
// instead of two or three, which is what bounds the multi-pass kernels for BERT-sized rows.
inline constexpr int kCachedFloats = 32;

inline bool row_fits_registers(int64_t n) { return n <= 32 * kCachedFloats; }

// Host: a warp per row, 8 rows per block, grid-stride.
inline unsigned warp_row_grid(RowArgs& a) {
  const DeviceInfo& info = current_device_info();
  a.group = 32;
  const int64_t rows_per_block = kRowThreads / 32;
  const int64_t need = (a.rows + rows_per_block - 1) / rows_per_block;
  const int64_t cap = int64_t{info.sm_count} * (info.max_threads_per_sm / kRowThreads) * 4;
  return static_cast<unsigned>(std::clamp<int64_t>(need, 1, cap));
}

__device__ __forceinline__ float warp_max(float v) {
  return warp_all_reduce(v, [](float a, float b) { return fmaxf(a, b); });
}

// Group-wide reduction of one float (warp shuffle, then shared memory across the warps of a
// block-mode group). `smem`: 32 floats. All threads of the block must call it together.
__device__ __forceinline__ float group_sum(float v, int group, float* smem) {
  return group == 32 ? warp_sum(v) : block_sum(v, smem);
}

}  // namespace livefuse::cuda
