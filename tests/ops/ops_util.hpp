#pragma once
// Helpers of the op suite: random inputs (never all zeros), float64 references over N-d
// indices, output poisoning and result checks.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/test_util.hpp"

namespace opstest {

using lf::Device;
using lf::DType;
using lf::Shape;
using lf::Tensor;

inline const std::vector<DType>& float_dtypes() {
  static const std::vector<DType> v{DType::f32, DType::f16, DType::bf16};
  return v;
}
inline const std::vector<DType>& int_dtypes() {
  static const std::vector<DType> v{DType::i32, DType::i64};
  return v;
}
inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> v{DType::f32, DType::f16, DType::bf16,
                                    DType::i32, DType::i64, DType::boolean};
  return v;
}

// Values uniform in [lo, hi): floats for floating dtypes, integers for integral ones, 0/1 for
// bool (both present as soon as there are a few elements). Created on `dev`.
inline Tensor rand_tensor(const Shape& s, DType t, Device dev, uint64_t seed, double lo = -2.0,
                          double hi = 2.0) {
  std::mt19937_64 g(seed * 0x9E3779B97F4A7C15ull + 12345);
  const int64_t n = s.numel();
  if (lf::is_floating(t)) {
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = static_cast<float>(u(g));
    return lf::from_floats(v, s, t, dev);
  }
  std::vector<int64_t> v(static_cast<size_t>(n));
  if (t == DType::boolean) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = (g() >> 17) & 1;
  } else {
    std::uniform_int_distribution<int64_t> u(static_cast<int64_t>(std::ceil(lo)),
                                             static_cast<int64_t>(std::floor(hi)) - 1);
    for (int64_t& x : v) x = u(g);
  }
  return lf::from_int64s(v, s, t, dev);
}

inline Tensor floats(const std::vector<float>& v, const Shape& s, DType t, Device dev) {
  return lf::from_floats(v, s, t, dev);
}

// Fills the runtime's free memory of the size class of an `nbytes` output with a poison
// pattern: all-ones bytes (NaN in every floating dtype) for floating outputs, 0x5A bytes for
// the others. The pools hand freed blocks back first, so an output that is not fully written
// shows the poison.
inline void poison(size_t nbytes, DType out_dtype, Device dev) {
  const int64_t words = static_cast<int64_t>((nbytes + 3) / 4);
  if (words == 0) return;
  const double pattern = lf::is_floating(out_dtype) ? -1.0 : 1515870810.0;  // 0x5A5A5A5A
  Tensor t = lf::full(Shape{words}, pattern, DType::i32, dev);
  lf::synchronize(dev);
}

// ---- N-d indexing for references ---------------------------------------------------------
inline std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(static_cast<size_t>(s.rank));
  for (int d = s.rank - 1; d >= 0; --d) {
    idx[d] = s[d] ? i % s[d] : 0;
    i = s[d] ? i / s[d] : 0;
  }
  return idx;
}

// Linear index into a dense tensor of shape `in` broadcast to an index over a larger shape
// (aligned right; size-1 dims read index 0).
inline int64_t ravel_bcast(const std::vector<int64_t>& idx, const Shape& in) {
  const int lead = static_cast<int>(idx.size()) - in.rank;
  int64_t off = 0;
  for (int d = 0; d < in.rank; ++d) off = off * in[d] + (in[d] == 1 ? 0 : idx[lead + d]);
  return off;
}

inline int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t off = 0;
  for (int d = 0; d < s.rank; ++d) off = off * s[d] + idx[d];
  return off;
}

inline Shape broadcast(const Shape& a, const Shape& b) {
  return lf::broadcast_shapes(a, b, "test");
}

// Compares `got` with a float64 reference: shape, dtype, then values (NaN matches NaN, infs
// must be equal). `what` names the case in failure messages.
inline void check_close(const Tensor& got, const std::vector<double>& want, const Shape& shape,
                        DType dtype, double rtol, double atol, const std::string& what) {
  INFO(what);
  REQUIRE(got.defined());
  INFO("shape " << got.shape().str() << " (want " << shape.str() << "), dtype "
                << lf::dtype_name(got.dtype()) << " (want " << lf::dtype_name(dtype) << ")");
  CHECK(got.shape() == shape);
  CHECK(got.dtype() == dtype);
  const std::vector<double> g = got.to_doubles();
  REQUIRE(g.size() == want.size());
  size_t bad = 0;
  const bool ok = lftest::allclose(g, want, rtol, atol, &bad);
  std::string detail;
  if (!ok && bad < g.size())
    detail = "first mismatch at flat index " + std::to_string(bad) + ": got " +
             std::to_string(g[bad]) + ", want " + std::to_string(want[bad]);
  INFO(detail);
  CHECK(ok);
}

// Exact comparison (integer and bool results, layout ops).
inline void check_equal(const Tensor& got, const std::vector<double>& want, const Shape& shape,
                        DType dtype, const std::string& what) {
  check_close(got, want, shape, dtype, 0.0, 0.0, what);
}

inline std::string case_name(const char* op, DType t, Device d, const std::string& extra = "") {
  return std::string(op) + " " + std::string(lf::dtype_name(t)) + " on " + d.str() +
         (extra.empty() ? "" : " " + extra);
}

// The message of the livefuse::Error `f` throws ("" when it does not throw one).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const lf::Error& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace opstest
