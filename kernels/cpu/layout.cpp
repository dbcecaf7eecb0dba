// Layout ops that move data: contiguous, concat, and reshape/permute/slice when they reach the
// backend (the runtime serves them as views when it can). All are one strided copy.
#include <cstring>

#include "kernels/cpu/cpu_kernels.hpp"
#include "runtime/append.hpp"

namespace livefuse::cpu {
namespace {

template <class T>
void copy_run(const std::byte* src, int64_t ss, std::byte* dst, int64_t ds, int64_t n) {
  const T* s = reinterpret_cast<const T*>(src);
  T* d = reinterpret_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
}

template <class T>
void copy_tile(const std::byte* src, int64_t si, int64_t sj, std::byte* dst, int64_t di, int64_t dj,
               int64_t ni, int64_t nj) {
  const T* s = reinterpret_cast<const T*>(src);
  T* d = reinterpret_cast<T*>(dst);
  for (int64_t i = 0; i < ni; ++i)
    for (int64_t j = 0; j < nj; ++j) d[i * di + j * dj] = s[i * si + j * sj];
}

// A transpose-like copy (one side walks dim p with unit stride, the other the innermost dim):
// copying row by row would touch a new cache line (and often a new page) per element on the
// strided side, so copy kTile x kTile blocks that fit in L1 instead.
bool blocked_copy(const View& src, const View& dst, const Shape& shape, const Strides* st) {
  constexpr int64_t kTile = 32;
  const int r = shape.rank;
  const int64_t inner = shape.v[r - 1];
  int p = -1;
  for (int d = 0; d < r - 1; ++d)
    if ((st[0].v[d] == 1 || st[1].v[d] == 1) && shape.v[d] >= 8) p = d;
  if (p < 0 || inner < 8 || (st[0].v[r - 1] == 1 && st[1].v[r - 1] == 1)) return false;
  Shape os;
  Strides oss, ods;
  for (int d = 0; d < r - 1; ++d) {
    if (d == p) continue;
    os.push_back(shape.v[d]);
    oss.push_back(st[0].v[d]);
    ods.push_back(st[1].v[d]);
  }
  const StridedIndex src_outer(os, oss), dst_outer(os, ods);
  const int64_t np = shape.v[p], bi = (np + kTile - 1) / kTile, bj = (inner + kTile - 1) / kTile;
  const int64_t es = static_cast<int64_t>(src.esize());
  const int64_t si = st[0].v[p], sj = st[0].v[r - 1], di = st[1].v[p], dj = st[1].v[r - 1];
  const int64_t tiles = os.numel() * bi * bj;
  parallel_range(tiles, shape.numel(), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / (bi * bj), i0 = (t / bj) % bi * kTile, j0 = t % bj * kTile;
      const std::byte* s = src.base + (src_outer.offset(o) + i0 * si + j0 * sj) * es;
      std::byte* d = dst.base + (dst_outer.offset(o) + i0 * di + j0 * dj) * es;
      const int64_t ni = std::min(kTile, np - i0), nj = std::min(kTile, inner - j0);
      switch (es) {
        case 1:
          copy_tile<uint8_t>(s, si, sj, d, di, dj, ni, nj);
          break;
        case 2:
          copy_tile<uint16_t>(s, si, sj, d, di, dj, ni, nj);
          break;
        case 4:
          copy_tile<uint32_t>(s, si, sj, d, di, dj, ni, nj);
          break;
        case 8:
          copy_tile<uint64_t>(s, si, sj, d, di, dj, ni, nj);
          break;
        default:
          LF_ASSERT(false, "element size ", es);
      }
    }
  });
  return true;
}

}  // namespace

void strided_copy(const View& src, const View& dst) {
  LF_ASSERT(src.shape == dst.shape && src.dtype == dst.dtype, "strided_copy of ",
            dtype_name(src.dtype), src.shape.str(), " into ", dtype_name(dst.dtype),
            dst.shape.str());
  const int64_t numel = src.shape.numel();
  if (numel == 0) return;
  const size_t es = src.esize();
  Shape shape = src.shape;
  Strides st[2] = {src.strides, dst.strides};
  collapse_dims(shape, st, 2);
  if (numel >= 4096 && blocked_copy(src, dst, shape, st)) return;
  const int r = shape.rank;
  const int64_t inner = shape.v[r - 1], ss = st[0].v[r - 1], ds = st[1].v[r - 1];
  Shape outer_shape = shape;
  outer_shape.rank = r - 1;
  Strides so = st[0], dso = st[1];
  so.rank = dso.rank = r - 1;
  const StridedIndex src_rows(outer_shape, so), dst_rows(outer_shape, dso);
  const int64_t rows = numel / inner;
  parallel_range(rows, numel, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      const std::byte* s = src.base + src_rows.offset(row) * static_cast<int64_t>(es);
      std::byte* d = dst.base + dst_rows.offset(row) * static_cast<int64_t>(es);
      if (ss == 1 && ds == 1) {
        std::memcpy(d, s, static_cast<size_t>(inner) * es);
        continue;
      }
      switch (es) {
        case 1:
          copy_run<uint8_t>(s, ss, d, ds, inner);
          break;
        case 2:
          copy_run<uint16_t>(s, ss, d, ds, inner);
          break;
        case 4:
          copy_run<uint32_t>(s, ss, d, ds, inner);
          break;
        case 8:
          copy_run<uint64_t>(s, ss, d, ds, inner);
          break;
        default:
          LF_ASSERT(false, "element size ", es);
      }
    }
  });
}

View dense_if_transposed(const View& v, std::unique_ptr<std::byte[]>& temp) {
  if (v.shape.numel() < 16384) return v;
  Shape s = v.shape;
  Strides st = v.strides;
  collapse_dims(s, &st, 1);
  const int64_t last = st.v[s.rank - 1];
  if (last == 0 || last == 1) return v;
  bool unit_elsewhere = false;
  for (int d = 0; d + 1 < s.rank; ++d) unit_elsewhere |= st.v[d] == 1;
  if (!unit_elsewhere) return v;
  temp.reset(new std::byte[static_cast<size_t>(v.shape.numel()) * v.esize()]);
  View d = v;
  d.base = temp.get();
  d.strides = contiguous_strides(v.shape);
  strided_copy(v, d);
  return d;
}

namespace {
void run_concat(const OpCall& call, const View& o) {
  const int d = static_cast<int>(call.attrs.i[0]);
  int64_t at_dim = 0;
  for (const Tensor& t : call.inputs) {
    const View x = view_of(t);
    View dst = o;
    dst.shape = x.shape;
    dst.base += at_dim * o.strides.v[d] * static_cast<int64_t>(o.esize());
    at_dim += x.shape.v[d];
    if (x.shape.numel() > 0 && !append::same_place(x.base, x.strides, dst.base, dst.strides, x.shape))
      strided_copy(x, dst);
  }
  LF_ASSERT(at_dim == o.shape.v[d], describe_call(call), " concat sizes do not add up");
}
}  // namespace

void run_layout(const OpCall& call, const Tensor& out) {
  // `contiguous` writes through the output's own strides: copy_into hands it a view of the
  // destination (runtime/src/copy_into.cpp); the op's own outputs are dense.
  if (call.op == OpId::contiguous) {
    if (out.numel() > 0) strided_copy(view_of(call.inputs[0]), view_of(out));
    return;
  }
  // A concat writes through its output's strides too: a growing cache's have room
  // (runtime/append.hpp), and an input already in place there (the cache it grows, whose block
  // the output took over) is not copied.
  if (call.op == OpId::concat) {
    if (out.numel() > 0) run_concat(call, view_of(out));
    return;
  }
  const View o = out_view(out);
  if (o.shape.numel() == 0) return;
  const Attrs& at = call.attrs;
  switch (call.op) {
    case OpId::reshape: {  // a dense copy in the input's logical order is the reshaped value
      const View x = view_of(call.inputs[0]);
      View d = o;
      d.shape = x.shape;
      d.strides = contiguous_strides(x.shape);
      return strided_copy(x, d);
    }
    case OpId::permute: {
      const View x = view_of(call.inputs[0]);
      View s = x;
      for (int d = 0; d < x.shape.rank; ++d) {
        s.shape.v[d] = x.shape.v[at.i[d]];
        s.strides.v[d] = x.strides.v[at.i[d]];
      }
      return strided_copy(s, o);
    }
    case OpId::slice: {
      View s = view_of(call.inputs[0]);
      const int d = static_cast<int>(at.i[0]);
      s.base += at.i[1] * s.strides.v[d] * static_cast<int64_t>(s.esize());
      s.strides.v[d] *= at.i[3];
      s.shape.v[d] = o.shape.v[d];
      return strided_copy(s, o);
    }
    default:
      break;
  }
  LF_ASSERT(false, describe_call(call), " is not a layout op the cpu backend runs");
}

}  // namespace livefuse::cpu
