#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace livefuse {

// Storage dtypes. Floating types compute in f32 (f16/bf16 are converted at load/store).
enum class DType : uint8_t { f32, f16, bf16, i32, i64, boolean };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::boolean:
      return 1;
  }
  return 0;
}
constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}
constexpr bool is_integral(DType t) { return t == DType::i32 || t == DType::i64; }
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::boolean:
      return "bool";
  }
  return "?";
}
// Parses "f32", "float32", "f16", "half", "bf16", ...; throws Error on anything else.
DType parse_dtype(std::string_view s);

}  // namespace livefuse
