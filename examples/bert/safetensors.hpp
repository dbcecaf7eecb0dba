#pragma once
// A reader (and a small writer) for the safetensors format:
//   8 bytes   little-endian u64 N, the header's length
//   N bytes   JSON: {"__metadata__": {...}?, "name": {"dtype": "F32", "shape": [..],
//                    "data_offsets": [begin, end]}, ...}
//   rest      the tensors' raw little-endian bytes; offsets are relative to its start
// Everything the header claims is checked against the file when it is opened (dtype known,
// end - begin == numel * size, inside the file, no overlaps), so a bad file fails at open
// with its name and the offending key, not later with garbage weights.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "livefuse/livefuse.hpp"

namespace livefuse::safetensors {

struct TensorInfo {
  std::string dtype;  // as stored: "F32", "F16", "BF16", "F64", "I64", "I32", "BOOL", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

class File {
 public:
  // Reads and validates the header; tensor bytes are read on demand.
  static File open(const std::string& path);

  const std::string& path() const { return path_; }
  bool contains(const std::string& key) const { return tensors_.count(key) != 0; }
  // Throws naming the file and the key (and a close key, when one exists).
  const TensorInfo& info(const std::string& key) const;
  std::vector<std::string> keys() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The raw bytes of one tensor.
  std::vector<uint8_t> read_bytes(const std::string& key) const;
  // The tensor converted to `dtype` (floating targets accept F64/F32/F16/BF16 sources;
  // integer targets accept I64/I32) on `device`, after checking its shape is `expected`.
  Tensor load(const std::string& key, const Shape& expected, DType dtype, Device device) const;

 private:
  std::string path_;
  uint64_t data_start_ = 0;  // 8 + N
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (f32, f16, bf16, i32, i64, bool) under their names, in the given order.
void write(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
           const std::map<std::string, std::string>& metadata = {});

// Bytes per element of a stored dtype name, or 0 when the name is unknown.
size_t stored_dtype_size(const std::string& dtype);

}  // namespace livefuse::safetensors
