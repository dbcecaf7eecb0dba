#pragma once
// A small reader/writer for NumPy's .npy format (versions 1.0, 2.0 and 3.0, little-endian,
// C order). Enough for the BERT tool's inputs (ids, masks) and its float32 output; every
// malformed or unsupported file is a livefuse::Error naming the file and what was wrong.
#include <cstdint>
#include <string>
#include <vector>

#include "livefuse/livefuse.hpp"

namespace livefuse::npy {

// One array as stored: element kind ('i' signed int, 'u' unsigned int, 'f' float, 'b' bool),
// bytes per element, shape and the raw little-endian bytes in C order.
struct Array {
  char kind = 'f';
  int itemsize = 4;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  int64_t numel() const;
  std::string descr() const;  // "<i8", "<f4", "|b1", ...
  // Element values converted; integers beyond 2^53 lose precision in to_doubles.
  std::vector<int64_t> to_int64s() const;
  std::vector<double> to_doubles() const;
};

Array read(const std::string& path);
// Parses the bytes of a whole .npy file; `what` names it in errors.
Array parse(const std::vector<uint8_t>& bytes, const std::string& what);

// Writes `data` (numel * itemsize bytes, C order) with the given element type.
void write(const std::string& path, const void* data, const std::vector<int64_t>& shape, char kind,
           int itemsize);
void write_f32(const std::string& path, const std::vector<float>& v,
               const std::vector<int64_t>& shape);
// Any Tensor: f32/f16/bf16 are written as float32 (what .npy consumers expect of a model's
// output), i32/i64/bool as themselves.
void write_tensor(const std::string& path, const Tensor& t);

}  // namespace livefuse::npy
