// embedding: out[i, :] = weight[ids[i], :]. Ids are checked (all of them, before any row is
// written) so a bad id is a user error, never an out-of-bounds read.
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"

namespace livefuse::cpu {
namespace {

template <class I>
void read_ids(const View& ids, std::vector<int64_t>& dst) {
  const StridedIndex idx(ids.shape, ids.strides);
  const I* p = ids.ptr<const I>();
  for (size_t i = 0; i < dst.size(); ++i)
    dst[i] = static_cast<int64_t>(p[idx.offset(static_cast<int64_t>(i))]);
}

}  // namespace

void run_embedding(const OpCall& call, const Tensor& out) {
  const View w = view_of(call.inputs[0]), ids = view_of(call.inputs[1]);
  const View o = out_view(out);
  LF_ASSERT(w.shape.rank == 2, describe_call(call));
  const int64_t num = w.shape.v[0], dim = w.shape.v[1], n = ids.shape.numel();
  std::vector<int64_t> rows(static_cast<size_t>(n));
  if (ids.dtype == DType::i32)
    read_ids<int32_t>(ids, rows);
  else if (ids.dtype == DType::i64)
    read_ids<int64_t>(ids, rows);
  else
    LF_CHECK(false, "embedding", "ids must be i32 or i64, got ", dtype_name(ids.dtype),
             ids.shape.str());
  for (int64_t i = 0; i < n; ++i) {
    LF_CHECK(rows[i] >= 0 && rows[i] < num, "embedding", "id ", rows[i], " at position ", i,
             " of ids ", dtype_name(ids.dtype), ids.shape.str(), " is out of range [0, ", num,
             ") for weight ", dtype_name(w.dtype), w.shape.str());
  }
  if (dim == 0) return;
  const size_t es = w.esize();
  const int64_t rs = w.strides.v[0], cs = w.strides.v[1];
  View src = w, dst = o;
  src.shape = dst.shape = Shape{dim};
  src.strides = Strides{cs};
  dst.strides = Strides{1};
  parallel_range(n, n * dim, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const std::byte* s = w.base + rows[i] * rs * static_cast<int64_t>(es);
      std::byte* d = o.base + i * dim * static_cast<int64_t>(es);
      if (cs == 1) {
        std::memcpy(d, s, static_cast<size_t>(dim) * es);
      } else {
        View sv = src, dv = dst;
        sv.base = const_cast<std::byte*>(s);
        dv.base = d;
        strided_copy(sv, dv);
      }
    }
  });
}

}  // namespace livefuse::cpu
