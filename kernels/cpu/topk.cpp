// topk over the last dim: a partial sort of each row's indices by (value descending, NaN first,
// index ascending) -- the order the CUDA kernel (kernels/cuda/topk.cu) produces pass by pass.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"

namespace livefuse::cpu {

void run_topk(const OpCall& call, std::span<const Tensor> outputs) {
  LF_ASSERT(outputs.size() == 2, describe_call(call), " expects values and indices");
  const View x = view_of(call.inputs[0]);
  const View vals = out_view(outputs[0]), idx = out_view(outputs[1]);
  const int r = x.shape.rank;
  const int64_t n = x.shape.v[r - 1], k = call.attrs.i[0], stride = x.strides.v[r - 1];
  Shape outer = x.shape;
  Strides ost = x.strides;
  outer.rank = ost.rank = r - 1;
  const StridedIndex rows_at(outer, ost);
  const int64_t rows = outer.numel();
  parallel_range(rows, rows * n, [&](int64_t r0, int64_t r1) {
    std::vector<float> v(static_cast<size_t>(n));
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::vector<float> top(static_cast<size_t>(k));
    for (int64_t row = r0; row < r1; ++row) {
      load_floats(x.base, x.dtype, rows_at.offset(row), n, stride, v.data());
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
        const bool na = std::isnan(v[a]), nb = std::isnan(v[b]);
        if (na != nb) return na;
        if (!na && v[a] != v[b]) return v[a] > v[b];
        return a < b;
      });
      for (int64_t j = 0; j < k; ++j) {
        top[j] = v[order[j]];
        idx.ptr<int64_t>()[row * k + j] = order[j];
      }
      store_floats(vals.base, vals.dtype, row * k, k, top.data());
    }
  });
}

}  // namespace livefuse::cpu
