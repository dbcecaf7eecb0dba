// Small value types: errors, dtypes, devices, dims, attrs.
#include <algorithm>
#include <cstring>

#include "livefuse/device.hpp"
#include "livefuse/dtype.hpp"
#include "livefuse/error.hpp"
#include "livefuse/shape.hpp"
#include "runtime/op_call.hpp"

namespace livefuse {

namespace detail {
void assert_fail(const char* cond, const char* file, int line, const std::string& msg) {
  throw Error(concat("[internal] livefuse bug: assertion `", cond, "` failed at ", file, ":", line,
                     msg.empty() ? "" : ": ", msg));
}
}  // namespace detail

DType parse_dtype(std::string_view s) {
  if (s == "f32" || s == "float32" || s == "float") return DType::f32;
  if (s == "f16" || s == "float16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "i32" || s == "int32") return DType::i32;
  if (s == "i64" || s == "int64") return DType::i64;
  if (s == "bool") return DType::boolean;
  throw Error(
      detail::concat("[dtype] unknown dtype '", s, "'; expected f32, f16, bf16, i32, i64 or bool"));
}

std::string Device::str() const {
  return kind == DeviceKind::cpu ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device parse_device(std::string_view s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda" || s == "gpu") return Device::cuda(0);
  if (s.substr(0, 5) == "cuda:" && s.size() > 5 &&
      std::all_of(s.begin() + 5, s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return Device::cuda(std::stoi(std::string(s.substr(5))));
  throw Error(detail::concat("[device] unknown device '", s, "'; expected cpu, cuda or cuda:N"));
}

std::string_view category_name(OpCategory c) {
  switch (c) {
    case OpCategory::Elementwise:
      return "elementwise";
    case OpCategory::Reduction:
      return "reduction";
    case OpCategory::Normalization:
      return "normalization";
    case OpCategory::Matmul:
      return "matmul";
    case OpCategory::Layout:
      return "layout";
    case OpCategory::Gather:
      return "gather";
    case OpCategory::Opaque:
      return "opaque";
  }
  return "?";
}

// ---- Dims ------------------------------------------------------------------------------
Dims::Dims(std::initializer_list<int64_t> il) {
  LF_CHECK(il.size() <= kMaxDims, "shape", "rank ", il.size(), " exceeds the maximum of ",
           kMaxDims);
  for (int64_t x : il) v[rank++] = x;
}
Dims::Dims(std::span<const int64_t> s) {
  LF_CHECK(s.size() <= kMaxDims, "shape", "rank ", s.size(), " exceeds the maximum of ", kMaxDims);
  for (int64_t x : s) v[rank++] = x;
}
void Dims::push_back(int64_t x) {
  LF_CHECK(rank < kMaxDims, "shape", "rank exceeds the maximum of ", kMaxDims);
  v[rank++] = x;
}
bool Dims::operator==(const Dims& o) const {
  return rank == o.rank && std::equal(begin(), end(), o.begin());
}
std::string Dims::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  Shape out;
  out.rank = std::max(a.rank, b.rank);
  for (int i = 0; i < out.rank; ++i) {
    const int ia = a.rank - out.rank + i, ib = b.rank - out.rank + i;
    const int64_t da = ia >= 0 ? a.v[ia] : 1, db = ib >= 0 ? b.v[ib] : 1;
    LF_CHECK(da == db || da == 1 || db == 1, op, "shapes ", a.str(), " and ", b.str(),
             " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out.v[i] = da == 1 ? db : da;
  }
  return out;
}

int normalize_dim(int64_t dim, int rank, const char* op) {
  const int64_t d = dim < 0 ? dim + rank : dim;
  LF_CHECK(d >= 0 && d < std::max(rank, 1), op, "dim ", dim,
           " is out of range for a tensor of rank ", rank, " (expected ", -std::max(rank, 1), "..",
           std::max(rank, 1) - 1, ")");
  return static_cast<int>(d);
}

// ---- Attrs -----------------------------------------------------------------------------
namespace {
inline uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix-style combine: cheap and well distributed.
  v += 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  v ^= v >> 30;
  v *= 0xbf58476d1ce4e5b9ull;
  v ^= v >> 27;
  return h ^ v;
}
}  // namespace

uint64_t Attrs::hash() const {
  uint64_t h = mix(ni, nf);
  for (int k = 0; k < ni; ++k) h = mix(h, static_cast<uint64_t>(i[k]));
  for (int k = 0; k < nf; ++k) {
    uint64_t bits;
    std::memcpy(&bits, &f[k], 8);
    h = mix(h, bits);
  }
  h = mix(h, static_cast<uint64_t>(dtype));
  h = mix(h, scalar_operand);
  return mix(h, custom_id);
}

bool Attrs::operator==(const Attrs& o) const {
  return ni == o.ni && nf == o.nf && dtype == o.dtype && scalar_operand == o.scalar_operand &&
         custom_id == o.custom_id && std::equal(i.begin(), i.begin() + ni, o.i.begin()) &&
         std::equal(f.begin(), f.begin() + nf, o.f.begin());
}

std::string describe_call(const OpCall& call) {
  std::string s(op_name(call.op));
  s += "(";
  for (size_t k = 0; k < call.inputs.size(); ++k) {
    const Tensor& t = call.inputs[k];
    if (k) s += ", ";
    s += t.defined() ? std::string(dtype_name(t.dtype())) + t.shape().str() : "none";
  }
  return s + ")";
}

}  // namespace livefuse
