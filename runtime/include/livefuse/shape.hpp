#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace livefuse {

inline constexpr int kMaxDims = 8;

// Fixed-capacity dims (no heap on the hot path). Used for shapes and (element) strides.
struct Dims {
  std::array<int64_t, kMaxDims> v{};
  int rank = 0;

  Dims() = default;
  Dims(std::initializer_list<int64_t> il);
  explicit Dims(std::span<const int64_t> s);
  int64_t operator[](int i) const { return v[i]; }
  int64_t& operator[](int i) { return v[i]; }
  int size() const { return rank; }
  const int64_t* begin() const { return v.data(); }
  const int64_t* end() const { return v.data() + rank; }
  // Product (1 for rank 0). Inline, as contiguous_strides below: both run for every output of
  // every op call, where a call into the library cost as much as the loop.
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= v[i];
    return n;
  }
  void push_back(int64_t x);
  bool operator==(const Dims& o) const;
  std::string str() const;  // "[2, 3]"
};
using Shape = Dims;
using Strides = Dims;

// Row-major strides of `s` (a dim of 0 counts as 1: an empty tensor keeps nonzero strides).
inline Strides contiguous_strides(const Shape& s) {
  Strides st;
  st.rank = s.rank;
  int64_t acc = 1;
  for (int i = s.rank - 1; i >= 0; --i) {
    st.v[i] = acc;
    acc *= s.v[i] > 1 ? s.v[i] : 1;
  }
  return st;
}
// NumPy broadcast of two shapes; throws Error naming `op` when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Normalises a possibly negative dim against rank; throws Error naming `op` if out of range.
int normalize_dim(int64_t dim, int rank, const char* op);

}  // namespace livefuse
