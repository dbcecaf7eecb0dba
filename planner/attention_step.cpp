#include "planner/attention_step.hpp"

#include "livefuse/error.hpp"

namespace livefuse::planner {
namespace {

// Strides of `t` seen as [batch, heads, rows, cols], its leading dims broadcast to
// [batch, heads] (stride 0 along a dim of size 1, and along missing leading dims).
void strides4(const Tensor& t, int64_t batch, int64_t heads, int64_t rows, int64_t cols, const char* what,
              int64_t out[4]) {
  const Shape& s = t.shape();
  const Strides& st = t.strides();
  const int64_t want[4] = {batch, heads, rows, cols};
  for (int d = 0; d < 4; ++d) {
    const int src = s.rank - 4 + d;
    const int64_t size = src >= 0 ? s.v[src] : 1;
    LF_CHECK(size == want[d] || (size == 1 && d < 2), "attention", what, " of shape ", s.str(), " does not fit [", batch, ", ", heads, ", ", rows, ", ", cols, "]");
    out[d] = src >= 0 && size != 1 ? st.v[src] : 0;
  }
}

// A mask broadcasts like eager softmax's: any dim of size 1, leading dims missing.
void mask_strides(const Tensor& m, const int64_t want[4], int64_t out[4]) {
  const Shape& s = m.shape();
  for (int d = 0; d < 4; ++d) {
    const int src = s.rank - 4 + d;
    const int64_t size = src >= 0 ? s.v[src] : 1;
    LF_CHECK(size == want[d] || size == 1, "attention", "mask of shape ", s.str(), " does not broadcast to [", want[0],
             ", ", want[1], ", ", want[2], ", ", want[3], "]");
    out[d] = src >= 0 && size != 1 ? m.strides().v[src] : 0;
  }
}

int64_t dim_from_end(const Shape& s, int k) { return s.rank >= k ? s.v[s.rank - k] : 1; }

}  // namespace

AttentionArgs attention_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Tensor& out,
                             bool heads_inner, double scale) {
  AttentionArgs a;
  const Shape &qs = q.shape(), &ks = k.shape(), &vs = v.shape(), &os = out.shape();
  LF_CHECK(qs.rank >= 2 && qs.rank <= 4 && ks.rank >= 2 && ks.rank <= 4 && vs.rank >= 2 && vs.rank <= 4 &&
               os.rank <= 4,
           "attention", "operands of rank 2..4 expected, got q ", qs.str(), " k ", ks.str(), " v ", vs.str());
  LF_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype() && q.dtype() == out.dtype() &&
               (!mask.defined() || mask.dtype() == q.dtype()),
           "attention", "operands of one dtype expected");
  a.dtype = q.dtype();
  a.sq = dim_from_end(qs, 2);
  a.d = dim_from_end(qs, 1);
  a.sk = dim_from_end(ks, 2);
  a.dv = dim_from_end(vs, 1);
  LF_CHECK(dim_from_end(ks, 1) == a.d && dim_from_end(vs, 2) == a.sk, "attention", "q ", qs.str(), ", k ", ks.str(),
           " and v ", vs.str(), " do not fit together");
  // The result's layout names the batch and head counts.
  if (heads_inner && os.rank == 3) {  // [b, s, heads * dv], dense
    LF_CHECK(os.v[1] == a.sq && a.dv > 0 && os.v[2] % a.dv == 0 && out.is_contiguous(), "attention", "result of shape ",
             os.str(), " is not [b, ", a.sq, ", heads * ", a.dv, "]");
    a.batch = os.v[0];
    a.heads = os.v[2] / a.dv;
    a.out_st[0] = os.v[1] * os.v[2], a.out_st[1] = a.dv, a.out_st[2] = os.v[2], a.out_st[3] = 1;
  } else if (heads_inner) {
    LF_CHECK(os.rank == 4 && os.v[1] == a.sq && os.v[3] == a.dv, "attention", "result of shape ", os.str(),
             " is not [b, ", a.sq, ", heads, ", a.dv, "]");
    a.batch = os.v[0];
    a.heads = os.v[2];
    const Strides& st = out.strides();
    a.out_st[0] = st.v[0], a.out_st[1] = st.v[2], a.out_st[2] = st.v[1], a.out_st[3] = st.v[3];
  } else {
    LF_CHECK(os.rank >= 2 && dim_from_end(os, 2) == a.sq && dim_from_end(os, 1) == a.dv, "attention",
             "result of shape ", os.str(), " is not [.., ", a.sq, ", ", a.dv, "]");
    a.batch = dim_from_end(os, 4);
    a.heads = dim_from_end(os, 3);
    strides4(out, a.batch, a.heads, a.sq, a.dv, "the result", a.out_st);
  }
  strides4(q, a.batch, a.heads, a.sq, a.d, "q", a.q_st);
  strides4(k, a.batch, a.heads, a.sk, a.d, "k", a.k_st);
  strides4(v, a.batch, a.heads, a.sk, a.dv, "v", a.v_st);
  if (mask.defined()) {
    const int64_t want[4] = {a.batch, a.heads, a.sq, a.sk};
    mask_strides(mask, want, a.mask_st);
  }
  a.scale = static_cast<float>(scale);
  const bool empty = a.batch * a.heads * a.sq * a.dv == 0;
  a.q = empty ? nullptr : q.impl()->data();
  a.k = empty || a.sk == 0 ? nullptr : k.impl()->data();
  a.v = empty || a.sk == 0 ? nullptr : v.impl()->data();
  a.mask = mask.defined() && !empty && a.sk > 0 ? mask.impl()->data() : nullptr;
  a.out = empty ? nullptr : out.impl()->data();
  return a;
}

}  // namespace livefuse::planner
