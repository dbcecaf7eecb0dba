#include "planner/rotary_step.hpp"

#include "livefuse/error.hpp"
#include "planner/plan_siblings.hpp"

namespace livefuse::planner {
namespace {

// Strides of `t` seen as [n0, n1, n2, d] = `want` (right-aligned; stride 0 where it broadcasts).
void strides4(const Tensor& t, const int64_t want[4], const char* what, int64_t out[4]) {
  const Shape& s = t.shape();
  LF_CHECK(s.rank <= 4, "rotary", what, " of shape ", s.str(), " has more than 4 dims");
  for (int d = 0; d < 4; ++d) {
    const int src = s.rank - 4 + d;
    const int64_t size = src >= 0 ? s.v[src] : 1;
    LF_CHECK(size == want[d] || (size == 1 && d < 3), "rotary", what, " of shape ", s.str(),
             " does not broadcast to [", want[0], ", ", want[1], ", ", want[2], ", ", want[3], "]");
    out[d] = src >= 0 && size != 1 ? t.strides().v[src] : 0;
  }
}

}  // namespace

RotaryArgs rotary_args(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out) {
  const Shape& xs = x.shape();
  LF_CHECK(xs.rank >= 1 && xs.rank <= 4 && out.shape() == xs && out.is_contiguous(), "rotary", "x of shape ",
           xs.str(), " and result of shape ", out.shape().str(), ": a dense result of x's shape, rank 1..4, expected");
  LF_CHECK(x.dtype() == cos.dtype() && x.dtype() == sin.dtype() && x.dtype() == out.dtype(), "rotary",
           "operands of one dtype expected, got x ", dtype_name(x.dtype()), ", cos ", dtype_name(cos.dtype()),
           ", sin ", dtype_name(sin.dtype()));
  RotaryArgs a;
  a.dtype = x.dtype();
  int64_t want[4];
  for (int d = 0; d < 4; ++d) want[d] = d + xs.rank >= 4 ? xs.v[d + xs.rank - 4] : 1;
  a.n[0] = want[0], a.n[1] = want[1], a.n[2] = want[2];
  a.d = want[3];
  LF_CHECK(a.d % 2 == 0, "rotary", "x of shape ", xs.str(), ": the last dim must be even");
  strides4(x, want, "x", a.x_st);
  strides4(cos, want, "cos", a.cos_st);
  strides4(sin, want, "sin", a.sin_st);
  const bool empty = xs.numel() == 0;
  a.x = empty ? nullptr : x.impl()->data();
  a.cos = empty ? nullptr : cos.impl()->data();
  a.sin = empty ? nullptr : sin.impl()->data();
  a.out = empty ? nullptr : out.impl()->data();
  return a;
}

int bind_rotary(const RotaryStep& r, std::span<const Tensor> values, RotaryArgs* out, Tensor* results) {
  int n = 0;
  const auto value = [&](int v) -> const Tensor& {
    LF_ASSERT(v >= 0 && static_cast<size_t>(v) < values.size() && values[v].defined(), "value ", v, " not bound");
    return values[v];
  };
  for (const RotaryOperands& o : r.parts) {
    const Tensor& res = value(o.out);
    detail::ensure_storage(res);
    for (int v : {o.x, o.cos, o.sin})
      LF_CHECK(value(v).impl()->storage != nullptr || value(v).numel() == 0, "plan", "a rotary input has no storage");
    if (results) results[n] = res;
    out[n++] = rotary_args(value(o.x), value(o.cos), value(o.sin), res);
  }
  return n;
}

}  // namespace livefuse::planner
