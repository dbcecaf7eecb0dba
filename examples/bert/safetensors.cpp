#include "examples/bert/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace livefuse::safetensors {
namespace {

using nlohmann::json;

// The format's own bound on the header (the reference reader rejects larger ones).
constexpr uint64_t kMaxHeader = 100ull << 20;

[[noreturn]] void fail(const std::string& path, const std::string& msg) {
  throw Error(detail::concat("[safetensors] ", path, ": ", msg));
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

TensorInfo parse_entry(const std::string& path, const std::string& key, const json& e,
                       uint64_t data_size) {
  const auto bad = [&](const std::string& msg) { fail(path, "tensor '" + key + "': " + msg); };
  if (!e.is_object()) bad("header entry is not an object");
  TensorInfo t;
  if (!e.contains("dtype") || !e["dtype"].is_string()) bad("missing or non-string \"dtype\"");
  t.dtype = e["dtype"].get<std::string>();
  const size_t esize = stored_dtype_size(t.dtype);
  if (esize == 0) bad("unknown dtype \"" + t.dtype + "\"");
  if (!e.contains("shape") || !e["shape"].is_array()) bad("missing or non-array \"shape\"");
  uint64_t numel = 1;
  for (const json& d : e["shape"]) {
    if (!d.is_number_unsigned()) bad("shape has a non-integer or negative dimension");
    const uint64_t v = d.get<uint64_t>();
    // Saturating product: a hostile shape must not wrap around to a small size.
    constexpr uint64_t kCap = uint64_t{1} << 62;
    numel = (v != 0 && numel > kCap / v) ? kCap : numel * v;
    t.shape.push_back(static_cast<int64_t>(v));
  }
  if (numel > data_size / esize)
    bad(detail::concat(t.dtype, shape_str(t.shape), " needs more bytes than the data section's ",
                       data_size, ": file truncated?"));
  const json* off = e.contains("data_offsets") ? &e["data_offsets"] : nullptr;
  if (!off || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    bad("\"data_offsets\" must be [begin, end] of non-negative integers");
  t.begin = (*off)[0].get<uint64_t>();
  t.end = (*off)[1].get<uint64_t>();
  if (t.begin > t.end)
    bad(detail::concat("data_offsets [", t.begin, ", ", t.end, "] are reversed"));
  if (t.end > data_size)
    bad(detail::concat("data_offsets end ", t.end, " is past the data section (", data_size,
                       " bytes): file truncated?"));
  if (t.end - t.begin != numel * esize)
    bad(detail::concat("data_offsets span ", t.end - t.begin, " bytes but ", t.dtype,
                       shape_str(t.shape), " needs ", numel * esize));
  return t;
}

// Source bytes -> floats on the host, for sources that are not already the target dtype.
std::vector<float> to_floats(const std::vector<uint8_t>& raw, const TensorInfo& t) {
  const size_t n = raw.size() / stored_dtype_size(t.dtype);
  std::vector<float> out(n);
  if (t.dtype == "F32") {
    std::memcpy(out.data(), raw.data(), n * 4);
  } else if (t.dtype == "F64") {
    for (size_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, raw.data() + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  } else {  // F16 / BF16: livefuse's own conversion, on the CPU
    const DType src = t.dtype == "F16" ? DType::f16 : DType::bf16;
    out = from_host(raw.data(), Shape{static_cast<int64_t>(n)}, src, Device::cpu()).to_floats();
  }
  return out;
}

}  // namespace

size_t stored_dtype_size(const std::string& d) {
  if (d == "BOOL" || d == "U8" || d == "I8" || d == "F8_E5M2" || d == "F8_E4M3") return 1;
  if (d == "I16" || d == "U16" || d == "F16" || d == "BF16") return 2;
  if (d == "I32" || d == "U32" || d == "F32") return 4;
  if (d == "I64" || d == "U64" || d == "F64") return 8;
  return 0;
}

File File::open(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) fail(path, "cannot open file");
  const uint64_t file_size = static_cast<uint64_t>(f.tellg());
  if (file_size < 8)
    fail(path, detail::concat("file is ", file_size, " bytes, too short for a header"));
  f.seekg(0);
  uint8_t len_bytes[8];
  f.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxHeader)
    fail(path, detail::concat("header length ", n,
                              " exceeds the 100 MiB limit (not a safetensors file?)"));
  if (n > file_size - 8)
    fail(path, detail::concat("header length ", n, " is past the end of the file (", file_size,
                              " bytes): truncated or not safetensors"));
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  if (!f) fail(path, "read of the header failed");

  json j;
  try {
    j = json::parse(header);
  } catch (const json::parse_error& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(path, "header is not a JSON object");

  File out;
  out.path_ = path;
  out.data_start_ = 8 + n;
  const uint64_t data_size = file_size - out.data_start_;
  for (const auto& [key, e] : j.items()) {
    if (key == "__metadata__") {
      if (!e.is_object()) fail(path, "__metadata__ is not an object");
      for (const auto& [mk, mv] : e.items()) {
        if (!mv.is_string()) fail(path, "__metadata__ value of '" + mk + "' is not a string");
        out.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    out.tensors_[key] = parse_entry(path, key, e, data_size);
  }

  // Tensors must not share bytes: a writer bug that would silently alias two weights.
  std::vector<std::pair<uint64_t, const std::string*>> by_begin;
  for (const auto& [key, t] : out.tensors_)
    if (t.end > t.begin) by_begin.emplace_back(t.begin, &key);
  std::sort(by_begin.begin(), by_begin.end());
  for (size_t i = 1; i < by_begin.size(); ++i) {
    const TensorInfo& prev = out.tensors_[*by_begin[i - 1].second];
    if (by_begin[i].first < prev.end)
      fail(path, "tensors '" + *by_begin[i - 1].second + "' and '" + *by_begin[i].second +
                     "' overlap in the data section");
  }
  return out;
}

const TensorInfo& File::info(const std::string& key) const {
  const auto it = tensors_.find(key);
  if (it != tensors_.end()) return it->second;
  // Name the stored key that shares the longest prefix: usually the naming scheme differs.
  std::string best;
  size_t best_len = 0;
  for (const auto& [k, t] : tensors_) {
    const size_t l = std::mismatch(k.begin(), k.end(), key.begin(), key.end()).first - k.begin();
    if (l > best_len) {
      best_len = l;
      best = k;
    }
  }
  fail(path_, detail::concat("missing tensor '", key, "' (", tensors_.size(), " tensors stored",
                             best.empty() ? "" : "; closest: '" + best + "'", ")"));
}

std::vector<std::string> File::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, t] : tensors_) out.push_back(k);
  return out;
}

std::vector<uint8_t> File::read_bytes(const std::string& key) const {
  const TensorInfo& t = info(key);
  std::ifstream f(path_, std::ios::binary);
  if (!f) fail(path_, "cannot reopen file");
  std::vector<uint8_t> out(t.end - t.begin);
  f.seekg(static_cast<std::streamoff>(data_start_ + t.begin));
  f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
  if (!f) fail(path_, "tensor '" + key + "': read failed (file changed since it was opened?)");
  return out;
}

Tensor File::load(const std::string& key, const Shape& expected, DType dtype, Device device) const {
  const TensorInfo& t = info(key);
  const std::vector<int64_t> want(expected.begin(), expected.end());
  if (t.shape != want)
    fail(path_,
         "tensor '" + key + "' has shape " + shape_str(t.shape) + ", expected " + shape_str(want));
  const bool float_src =
      t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16" || t.dtype == "F64";
  const bool int_src = t.dtype == "I32" || t.dtype == "I64";
  if (is_floating(dtype) && !float_src)
    fail(path_, "tensor '" + key + "' is " + t.dtype + ", expected a floating dtype");
  if (is_integral(dtype) && !int_src)
    fail(path_, "tensor '" + key + "' is " + t.dtype + ", expected I32 or I64");
  LF_CHECK(dtype != DType::boolean, "safetensors", "loading as bool is not supported");

  const std::vector<uint8_t> raw = read_bytes(key);
  const std::string native = dtype == DType::f32    ? "F32"
                             : dtype == DType::f16  ? "F16"
                             : dtype == DType::bf16 ? "BF16"
                             : dtype == DType::i32  ? "I32"
                                                    : "I64";
  if (t.dtype == native) return from_host(raw.data(), expected, dtype, device);
  if (is_floating(dtype)) return from_floats(to_floats(raw, t), expected, dtype, device);
  // Integer conversion between I32 and I64.
  std::vector<int64_t> v(raw.size() / stored_dtype_size(t.dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t.dtype == "I32") {
      int32_t x;
      std::memcpy(&x, raw.data() + 4 * i, 4);
      v[i] = x;
    } else {
      std::memcpy(&v[i], raw.data() + 8 * i, 8);
    }
  }
  return from_int64s(v, expected, dtype, device);
}

void write(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
           const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    LF_CHECK(name != "__metadata__", "safetensors", "a tensor may not be named __metadata__");
    const char* dt = nullptr;
    switch (t.dtype()) {
      case DType::f32:
        dt = "F32";
        break;
      case DType::f16:
        dt = "F16";
        break;
      case DType::bf16:
        dt = "BF16";
        break;
      case DType::i32:
        dt = "I32";
        break;
      case DType::i64:
        dt = "I64";
        break;
      case DType::boolean:
        dt = "BOOL";
        break;
    }
    std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    header[name] = {
        {"dtype", dt}, {"shape", shape}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail(path, "cannot open for writing");
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{h.size()} >> (8 * i));
  f.write(reinterpret_cast<const char*>(len), 8);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& [name, t] : tensors) {
    std::vector<uint8_t> raw(t.nbytes());
    t.copy_to_host(raw.data(), raw.size());
    f.write(reinterpret_cast<const char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
  }
  if (!f) fail(path, "write failed");
}

}  // namespace livefuse::safetensors
