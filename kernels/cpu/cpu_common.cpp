// Strided views and dimension collapsing for the CPU kernels.
#include "kernels/cpu/cpu_common.hpp"

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

namespace livefuse::cpu {

int cpu_workers() {
  const size_t cap = tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
  return std::max(1, std::min(tbb::this_task_arena::max_concurrency(), static_cast<int>(cap)));
}

View view_of(const Tensor& t) {
  TensorImpl* impl = t.impl();
  LF_ASSERT(impl != nullptr, "cpu backend got an undefined tensor");
  LF_ASSERT(impl->device.is_cpu(), "cpu backend got a tensor on ", impl->device.str());
  View v;
  v.base = static_cast<std::byte*>(impl->data());
  v.dtype = impl->dtype;
  v.shape = impl->shape;
  v.strides = impl->strides;
  return v;
}

View out_view(const Tensor& t) {
  View v = view_of(t);
  LF_ASSERT(t.numel() == 0 || t.is_contiguous(), "cpu backend expects dense outputs, got ",
            t.str());
  v.strides = contiguous_strides(v.shape);
  return v;
}

Strides broadcast_strides(const Shape& in, const Strides& strides, const Shape& out) {
  LF_ASSERT(in.rank <= out.rank, "broadcast of rank ", in.rank, " to rank ", out.rank);
  Strides s;
  s.rank = out.rank;
  const int lead = out.rank - in.rank;
  for (int d = 0; d < out.rank; ++d) {
    const int di = d - lead;
    if (di < 0 || (in.v[di] == 1 && out.v[d] != 1))
      s.v[d] = 0;
    else
      s.v[d] = strides.v[di];
  }
  return s;
}

void collapse_dims(Shape& shape, Strides* sets, int nsets) {
  // Built innermost-first, then reversed.
  Shape ns;
  Strides nst[4];
  LF_ASSERT(nsets <= 4, "collapse_dims supports up to 4 stride sets");
  for (int d = shape.rank - 1; d >= 0; --d) {
    const int64_t n = shape.v[d];
    if (n == 1) continue;
    bool merge = ns.rank > 0;
    for (int k = 0; k < nsets && merge; ++k) {
      const int last = ns.rank - 1;
      merge = sets[k].v[d] == nst[k].v[last] * ns.v[last];
    }
    if (merge) {
      ns.v[ns.rank - 1] *= n;
    } else {
      ns.v[ns.rank] = n;
      for (int k = 0; k < nsets; ++k) nst[k].v[ns.rank] = sets[k].v[d];
      ++ns.rank;
    }
  }
  if (ns.rank == 0) {  // a single element: keep one dim so loops stay uniform
    ns.v[0] = 1;
    for (int k = 0; k < nsets; ++k) nst[k].v[0] = 0;
    ns.rank = 1;
  }
  shape.rank = ns.rank;
  for (int i = 0; i < ns.rank; ++i) shape.v[i] = ns.v[ns.rank - 1 - i];
  for (int k = 0; k < nsets; ++k) {
    sets[k].rank = ns.rank;
    for (int i = 0; i < ns.rank; ++i) sets[k].v[i] = nst[k].v[ns.rank - 1 - i];
  }
}

}  // namespace livefuse::cpu
