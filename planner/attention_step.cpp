#include "planner/attention_step.hpp"

#include "livefuse/error.hpp"
#include "runtime/append.hpp"

namespace livefuse::planner {
namespace {

// Strides of `t` seen as [batch, heads, rows, cols], its leading dims broadcast to
// [batch, heads] (stride 0 along a dim of size 1, and along missing leading dims).
void strides4(const Tensor& t, int64_t batch, int64_t heads, int64_t rows, int64_t cols,
              const char* what, int64_t out[4]) {
  const Shape& s = t.shape();
  const Strides& st = t.strides();
  const int64_t want[4] = {batch, heads, rows, cols};
  for (int d = 0; d < 4; ++d) {
    const int src = s.rank - 4 + d;
    const int64_t size = src >= 0 ? s.v[src] : 1;
    LF_CHECK(size == want[d] || (size == 1 && d < 2), "attention", what, " of shape ", s.str(),
             " does not fit [", batch, ", ", heads, ", ", rows, ", ", cols, "]");
    out[d] = src >= 0 && size != 1 ? st.v[src] : 0;
  }
}

// A mask broadcasts like eager softmax's: any dim of size 1, leading dims missing. Seen as
// [batch, heads, groups, rows, keys]; plain scores are [batch, heads, rows, keys], and the
// mask's dims align with those (the groups dim is then 1, stride 0).
void mask_strides(const Tensor& m, const int64_t want[5], bool grouped, int64_t out[5]) {
  const Shape& s = m.shape();
  const int n = grouped ? 5 : 4;
  LF_CHECK(s.rank <= n, "attention", "mask of shape ", s.str(), " has more than ", n, " dims");
  for (int d = 0; d < 5; ++d) {
    out[d] = 0;
    if (!grouped && d == 2) continue;
    const int pos = grouped || d < 2 ? d : d - 1;  // position among the n dims
    const int src = s.rank - n + pos;
    const int64_t size = src >= 0 ? s.v[src] : 1;
    LF_CHECK(size == want[d] || size == 1, "attention", "mask of shape ", s.str(),
             " does not broadcast to [", want[0], ", ", want[1], ", ", want[2], ", ", want[3], ", ",
             want[4], "]");
    out[d] = src >= 0 && size != 1 ? m.strides().v[src] : 0;
  }
}

int64_t dim_from_end(const Shape& s, int k) { return s.rank >= k ? s.v[s.rank - k] : 1; }

}  // namespace

AttentionArgs attention_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             const Tensor& out, bool heads_inner, double scale, int64_t groups) {
  AttentionArgs a;
  const Shape &qs = q.shape(), &ks = k.shape(), &vs = v.shape(), &os = out.shape();
  LF_CHECK(qs.rank >= 2 && qs.rank <= 4 && ks.rank >= 2 && ks.rank <= 4 && vs.rank >= 2 &&
               vs.rank <= 4 && os.rank <= 4,
           "attention", "operands of rank 2..4 expected, got q ", qs.str(), " k ", ks.str(), " v ",
           vs.str());
  LF_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype() && q.dtype() == out.dtype() &&
               (!mask.defined() || mask.dtype() == q.dtype()),
           "attention", "operands of one dtype expected");
  a.dtype = q.dtype();
  a.sq = dim_from_end(qs, 2);
  a.d = dim_from_end(qs, 1);
  a.sk = dim_from_end(ks, 2);
  a.dv = dim_from_end(vs, 1);
  LF_CHECK(dim_from_end(ks, 1) == a.d && dim_from_end(vs, 2) == a.sk, "attention", "q ", qs.str(),
           ", k ", ks.str(), " and v ", vs.str(), " do not fit together");
  // Grouped-query: the rows are `groups` blocks of t query rows each.
  LF_CHECK(groups >= 1 && a.sq % groups == 0, "attention", groups, " query groups do not divide ",
           a.sq, " rows");
  const int64_t t = a.sq / groups;
  a.rows_t = t;
  // The result's layout names the batch and head counts (heads: of K/V).
  if (heads_inner && os.rank == 3) {  // [b, t, query heads * dv], dense
    LF_CHECK(os.v[1] == t && a.dv > 0 && os.v[2] % (a.dv * groups) == 0 && out.is_contiguous(),
             "attention", "result of shape ", os.str(), " is not [b, ", t, ", heads * ", a.dv, "]");
    a.batch = os.v[0];
    a.heads = os.v[2] / a.dv / groups;
    a.out_st[0] = os.v[1] * os.v[2], a.out_st[1] = groups * a.dv, a.out_st[2] = os.v[2],
    a.out_st[3] = 1;
    a.out_st_g = a.dv;
  } else if (heads_inner) {  // [b, t, query heads, dv]
    LF_CHECK(os.rank == 4 && os.v[1] == t && os.v[3] == a.dv && os.v[2] % groups == 0, "attention",
             "result of shape ", os.str(), " is not [b, ", t, ", heads, ", a.dv, "]");
    a.batch = os.v[0];
    a.heads = os.v[2] / groups;
    const Strides& st = out.strides();
    a.out_st[0] = st.v[0], a.out_st[1] = groups * st.v[2], a.out_st[2] = st.v[1],
    a.out_st[3] = st.v[3];
    a.out_st_g = st.v[2];
  } else {
    LF_CHECK(os.rank >= 2 && dim_from_end(os, 2) == a.sq && dim_from_end(os, 1) == a.dv,
             "attention", "result of shape ", os.str(), " is not [.., ", a.sq, ", ", a.dv, "]");
    a.batch = dim_from_end(os, 4);
    a.heads = dim_from_end(os, 3);
    strides4(out, a.batch, a.heads, a.sq, a.dv, "the result", a.out_st);
    a.out_st_g = t * a.out_st[2];  // the rows as they come
  }
  strides4(q, a.batch, a.heads, a.sq, a.d, "q", a.q_st);
  strides4(k, a.batch, a.heads, a.sk, a.d, "k", a.k_st);
  strides4(v, a.batch, a.heads, a.sk, a.dv, "v", a.v_st);
  if (mask.defined()) {
    const int64_t want[5] = {a.batch, a.heads, groups, t, a.sk};
    int64_t st[5];
    // A 5-D mask is seen as grouped even at one query head a K/V head (G = 1: the decoders'
    // reshape to [b, kv heads, G, t, sk] is still there).
    mask_strides(mask, want, groups > 1 || mask.shape().rank == 5, st);
    a.mask_st[0] = st[0], a.mask_st[1] = st[1], a.mask_st_g = st[2], a.mask_st[2] = st[3],
    a.mask_st[3] = st[4];
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

void bind_append(AttentionArgs& a, const Tensor& k, const Tensor& v, const Tensor& k_old, const Tensor& k_new,
                 const Tensor& v_old, const Tensor& v_new) {
  const Shape &ko = k_old.shape(), &vo = v_old.shape();
  LF_CHECK(ko.rank == 4 && vo.rank == 4 && ko.v[2] == vo.v[2] && ko.v[2] <= a.sk, "attention",
           "the caches appended to, k ", ko.str(), " and v ", vo.str(), ", do not hold the same keys (of ", a.sk,
           ")");
  a.first_new = ko.v[2];
  const int64_t added = a.sk - a.first_new;
  const auto data = [](const Tensor& t) -> const void* { return t.numel() > 0 ? t.impl()->data() : nullptr; };
  // (a.k / a.v are null when there are no query rows; the caches still grow.)
  a.k_dst = const_cast<void*>(data(k)), a.v_dst = const_cast<void*>(data(v));
  for (int i = 0; i < 4; ++i) a.k_dst_st[i] = a.k_st[i], a.v_dst_st[i] = a.v_st[i];
  strides4(k_old, a.batch, a.heads, a.first_new, a.d, "the old k cache", a.k_st);
  strides4(v_old, a.batch, a.heads, a.first_new, a.dv, "the old v cache", a.v_st);
  strides4(k_new, a.batch, a.heads, added, a.d, "the step's k", a.k_new_st);
  strides4(v_new, a.batch, a.heads, added, a.dv, "the step's v", a.v_new_st);
  a.k = data(k_old), a.v = data(v_old), a.k_new = data(k_new), a.v_new = data(v_new);
  // Grown in place (runtime/append.hpp, Note 2): the old rows already are the grown cache's first
  // rows -- the concat's own test (its copy kernels skip such an input).
  a.copy_old_k = !append::same_place(a.k, k_old.strides(), a.k_dst, k.strides(), ko);
  a.copy_old_v = !append::same_place(a.v, v_old.strides(), a.v_dst, v.strides(), vo);
}

}  // namespace livefuse::planner
