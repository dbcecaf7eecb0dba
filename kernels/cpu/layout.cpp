// Layout ops that move data: contiguous, concat, and reshape/permute/slice when they reach the
// backend (the runtime serves them as views when it can). All are one strided copy.
#include <cstring>

#include "kernels/cpu/cpu_kernels.hpp"

namespace livefuse::cpu {
namespace {

template <class T>
void copy_run(const std::byte* src, int64_t ss, std::byte* dst, int64_t ds, int64_t n) {
  const T* s = reinterpret_cast<const T*>(src);
  T* d = reinterpret_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
}

}  // namespace

void strided_copy(const View& src, const View& dst) {
  LF_ASSERT(src.shape == dst.shape && src.dtype == dst.dtype, "strided_copy of ",
            dtype_name(src.dtype), src.shape.str(), " into ", dtype_name(dst.dtype), dst.shape.str());
  const int64_t numel = src.shape.numel();
  if (numel == 0) return;
  const size_t es = src.esize();
  Shape shape = src.shape;
  Strides st[2] = {src.strides, dst.strides};
  collapse_dims(shape, st, 2);
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
        case 1: copy_run<uint8_t>(s, ss, d, ds, inner); break;
        case 2: copy_run<uint16_t>(s, ss, d, ds, inner); break;
        case 4: copy_run<uint32_t>(s, ss, d, ds, inner); break;
        case 8: copy_run<uint64_t>(s, ss, d, ds, inner); break;
        default: LF_ASSERT(false, "element size ", es);
      }
    }
  });
}

void run_layout(const OpCall& call, const Tensor& out) {
  const View o = out_view(out);
  if (o.shape.numel() == 0) return;
  const Attrs& at = call.attrs;
  switch (call.op) {
    case OpId::contiguous: return strided_copy(view_of(call.inputs[0]), o);
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
    case OpId::concat: {
      const int d = static_cast<int>(at.i[0]);
      int64_t at_dim = 0;
      for (const Tensor& t : call.inputs) {
        const View x = view_of(t);
        View dst = o;
        dst.shape = x.shape;
        dst.base += at_dim * o.strides.v[d] * static_cast<int64_t>(o.esize());
        at_dim += x.shape.v[d];
        strided_copy(x, dst);
      }
      LF_ASSERT(at_dim == o.shape.v[d], describe_call(call), " concat sizes do not add up");
      return;
    }
    default: break;
  }
  LF_ASSERT(false, describe_call(call), " is not a layout op the cpu backend runs");
}

}  // namespace livefuse::cpu
