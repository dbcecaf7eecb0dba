// The rotary template on the CPU (kernels/rotary_args.hpp): per row of d columns, column c < h
// pairs with c + h; out[c] = x[c] cos[c] - x[c + h] sin[c], out[c + h] = x[c + h] cos[c + h] +
// x[c] sin[c + h], each product rounded to the dtype before the sum as eager's mul, mul, add
// round them.
#include "kernels/cpu/cpu_common.hpp"
#include "kernels/rotary_args.hpp"

namespace livefuse::cpu {
namespace {

// GCC contracts a * b + c * d into an FMA in C++ under -march=native (-ffp-contract=fast is its
// C++ default, ISO mode or not), which would skip eager's rounding of the first product.
#if defined(__GNUC__) && !defined(__clang__)
#define LF_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define LF_NO_CONTRACT
#endif

template <DType D>
LF_NO_CONTRACT void rotary_rows(const RotaryArgs& a, int64_t r0, int64_t r1) {
  using T = typename DT<D>::T;
  const auto* x = static_cast<const T*>(a.x);
  const auto* cs = static_cast<const T*>(a.cos);
  const auto* sn = static_cast<const T*>(a.sin);
  auto* out = static_cast<T*>(a.out);
  const int64_t d = a.d, h = d / 2;
  // Rounds v to the dtype and back (eager stores every op's result in it).
  const auto round = [](float v) {
    T t;
    store_as<D, float>(&t, v);
    return load_as<D, float>(&t);
  };
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t i2 = r % a.n[2], i1 = (r / a.n[2]) % a.n[1], i0 = r / (a.n[2] * a.n[1]);
    const T* xr = x + i0 * a.x_st[0] + i1 * a.x_st[1] + i2 * a.x_st[2];
    const T* cr = cs + i0 * a.cos_st[0] + i1 * a.cos_st[1] + i2 * a.cos_st[2];
    const T* sr = sn + i0 * a.sin_st[0] + i1 * a.sin_st[1] + i2 * a.sin_st[2];
    T* o = out + r * d;
    for (int64_t c = 0; c < d; ++c) {
      const int64_t partner = c < h ? c + h : c - h;
      const float xc = load_as<D, float>(xr + c * a.x_st[3]);
      const float xp = load_as<D, float>(xr + partner * a.x_st[3]);
      const float rot = c < h ? -xp : xp;
      const float p1 = round(xc * load_as<D, float>(cr + c * a.cos_st[3]));
      const float p2 = round(rot * load_as<D, float>(sr + c * a.sin_st[3]));
      store_as<D, float>(o + c, p1 + p2);
    }
  }
}

}  // namespace

void run_rotary(const RotaryArgs* parts, int count) {
  for (int p = 0; p < count; ++p) {
    const RotaryArgs& a = parts[p];
    if (a.rows() == 0 || a.d == 0) continue;
    parallel_range(a.rows(), a.rows() * a.d * 4, [&](int64_t r0, int64_t r1) {
      visit_dtype(a.dtype, [&](auto tag) {
        constexpr DType D = decltype(tag)::value;
        if constexpr (D == DType::f32 || D == DType::f16 || D == DType::bf16) rotary_rows<D>(a, r0, r1);
      });
    });
  }
}

}  // namespace livefuse::cpu
