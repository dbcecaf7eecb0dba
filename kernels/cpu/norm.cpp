// Row-wise normalisations over the last dim: softmax (scale, optional additive mask broadcast to
// x), layer_norm and rms_norm. Each row is loaded into an f32 buffer (any dtype, any stride),
// statistics accumulate in double, and the row is stored once, converted to the output dtype.
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/row_sums.hpp"

namespace livefuse::cpu {
namespace {

// The rows of a view over its last dim: row r starts at lead.offset(r), steps by `step`.
struct Rows {
  const std::byte* base = nullptr;
  DType dtype = DType::f32;
  StridedIndex lead;
  int64_t step = 1;
  void load(int64_t r, int64_t n, float* dst) const {
    load_floats(base, dtype, lead.offset(r), n, step, dst);
  }
};

Rows rows_of(const View& v, const Shape& as_shape) {
  const Strides st = broadcast_strides(v.shape, v.strides, as_shape);
  Rows r;
  r.base = v.base;
  r.dtype = v.dtype;
  Shape ls;
  Strides lst;
  for (int d = 0; d + 1 < as_shape.rank; ++d) {
    ls.push_back(as_shape.v[d]);
    lst.push_back(st.v[d]);
  }
  r.lead = StridedIndex(ls, lst);
  r.step = as_shape.rank > 0 ? st.v[as_shape.rank - 1] : 1;
  return r;
}

// Loads an optional per-column vector (weight or bias of shape [L]) as floats.
std::vector<float> column_vector(const OpCall& call, int input, bool present, int64_t L,
                                 float fallback) {
  std::vector<float> v(static_cast<size_t>(L), fallback);
  if (!present) return v;
  const View w = view_of(call.inputs[input]);
  load_floats(w.base, w.dtype, 0, L, w.shape.rank > 0 ? w.strides.v[w.shape.rank - 1] : 0,
              v.data());
  return v;
}

// f(row_index, buffer) for every row, rows spread over threads; `cost` ~ flops per element.
// The buffer holds 2 * L floats (the row, and scratch such as the mask row).
template <class F>
void for_rows(int64_t n_rows, int64_t L, int64_t cost, F&& f) {
  parallel_range(n_rows, n_rows * L * cost, [&](int64_t r0, int64_t r1) {
    std::vector<float> buf(2 * static_cast<size_t>(L));
    for (int64_t r = r0; r < r1; ++r) f(r, buf.data());
  });
}

}  // namespace

void run_softmax(const OpCall& call, const Tensor& out) {
  std::unique_ptr<std::byte[]> temp;
  const View x = dense_if_transposed(view_of(call.inputs[0]), temp);
  const View o = out_view(out);
  if (o.shape.numel() == 0) return;
  const int64_t L = x.shape.rank > 0 ? x.shape.v[x.shape.rank - 1] : 1;
  const int64_t n_rows = o.shape.numel() / L;
  const Rows xr = rows_of(x, x.shape);
  const bool has_mask = call.attrs.ni > 0 && call.attrs.i[0] != 0;
  Rows mr;
  if (has_mask) mr = rows_of(view_of(call.inputs[1]), x.shape);
  const float scale = static_cast<float>(call.attrs.f[0]);
  for_rows(n_rows, L, 8, [&](int64_t r, float* v) {
    xr.load(r, L, v);
    for (int64_t i = 0; i < L; ++i) v[i] *= scale;
    if (has_mask) {
      float* m = v + L;
      mr.load(r, L, m);
      for (int64_t i = 0; i < L; ++i) v[i] += m[i];
    }
    const float mx = max_float(v, L, -std::numeric_limits<float>::infinity());
    // A row of all -inf gives (-inf) - (-inf) = NaN, as in PyTorch.
    for (int64_t i = 0; i < L; ++i) v[i] = exp_shifted(v[i], mx);
    const double sum = sum_double(v, L);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < L; ++i) v[i] *= inv;
    store_floats(o.base, o.dtype, r * L, L, v);
  });
}

void run_layer_norm(const OpCall& call, const Tensor& out) {
  std::unique_ptr<std::byte[]> temp;
  const View x = dense_if_transposed(view_of(call.inputs[0]), temp);
  const View o = out_view(out);
  if (o.shape.numel() == 0) return;
  const int64_t L = x.shape.v[x.shape.rank - 1];
  const int64_t n_rows = o.shape.numel() / L;
  const bool has_w = call.attrs.i[0] != 0, has_b = call.attrs.i[1] != 0;
  const std::vector<float> w = column_vector(call, 1, has_w, L, 1.0f);
  const std::vector<float> b = column_vector(call, has_w ? 2 : 1, has_b, L, 0.0f);
  const double eps = call.attrs.f[0];
  const Rows xr = rows_of(x, x.shape);
  for_rows(n_rows, L, 6, [&](int64_t r, float* v) {
    xr.load(r, L, v);
    const double mean = sum_double(v, L) / static_cast<double>(L);
    const double ss = sum_sq_dev_double(v, L, mean);
    const float rstd = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(L) + eps));
    const float m = static_cast<float>(mean);
    for (int64_t i = 0; i < L; ++i) v[i] = (v[i] - m) * rstd * w[i] + b[i];
    store_floats(o.base, o.dtype, r * L, L, v);
  });
}

void run_rms_norm(const OpCall& call, const Tensor& out) {
  std::unique_ptr<std::byte[]> temp;
  const View x = dense_if_transposed(view_of(call.inputs[0]), temp);
  const View o = out_view(out);
  if (o.shape.numel() == 0) return;
  const int64_t L = x.shape.v[x.shape.rank - 1];
  const int64_t n_rows = o.shape.numel() / L;
  const bool has_w = call.attrs.i[0] != 0;
  const std::vector<float> w = column_vector(call, 1, has_w, L, 1.0f);
  const double eps = call.attrs.f[0];
  const Rows xr = rows_of(x, x.shape);
  for_rows(n_rows, L, 4, [&](int64_t r, float* v) {
    xr.load(r, L, v);
    const double ss = sum_sq_double(v, L);
    const float rs = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(L) + eps));
    for (int64_t i = 0; i < L; ++i) v[i] = v[i] * rs * w[i];
    store_floats(o.base, o.dtype, r * L, L, v);
  });
}

}  // namespace livefuse::cpu
