#include "examples/bert/npy.hpp"

#include <cstring>
#include <fstream>
#include <iterator>

namespace livefuse::npy {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

[[noreturn]] void fail(const std::string& what, const std::string& msg) {
  throw Error(detail::concat("[npy] ", what, ": ", msg));
}

// The header is a Python dict literal such as
//   {'descr': '<i8', 'fortran_order': False, 'shape': (2, 128), }
// Only the three keys NumPy writes are understood; the parser is strict about their values
// and tolerant of spacing, since other writers (and older NumPy) space it differently.
class HeaderParser {
 public:
  HeaderParser(std::string_view s, const std::string& what) : s_(s), what_(what) {}

  void parse(std::string& descr, bool& fortran, std::vector<int64_t>& shape) {
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') break;
      const std::string key = quoted();
      expect(':');
      if (key == "descr") {
        descr = quoted();
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran = boolean();
        have_order = true;
      } else if (key == "shape") {
        shape = tuple();
        have_shape = true;
      } else {
        fail(what_, "unknown header key '" + key + "'");
      }
      skip_ws();
      if (peek() == ',') ++pos_;
    }
    if (!have_descr || !have_order || !have_shape)
      fail(what_, "header lacks one of 'descr', 'fortran_order', 'shape'");
  }

 private:
  char peek() {
    if (pos_ >= s_.size()) fail(what_, "header ends early");
    return s_[pos_];
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n')) ++pos_;
  }
  void expect(char c) {
    skip_ws();
    if (peek() != c) fail(what_, detail::concat("header: expected '", c, "' at ", pos_));
    ++pos_;
  }
  std::string quoted() {
    skip_ws();
    const char q = peek();
    if (q != '\'' && q != '"') fail(what_, detail::concat("header: expected a string at ", pos_));
    const size_t end = s_.find(q, pos_ + 1);
    if (end == std::string_view::npos) fail(what_, "header: unterminated string");
    std::string out(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return out;
  }
  bool boolean() {
    skip_ws();
    if (s_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (s_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    fail(what_, "header: fortran_order must be True or False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> out;
    expect('(');
    while (true) {
      skip_ws();
      if (peek() == ')') {
        ++pos_;
        break;
      }
      if (peek() < '0' || peek() > '9') fail(what_, "header: shape must be a tuple of integers");
      int64_t v = 0;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
        if (v > (int64_t{1} << 50)) fail(what_, "header: shape dimension too large");
        v = v * 10 + (s_[pos_++] - '0');
      }
      out.push_back(v);
      skip_ws();
      if (peek() == ',') ++pos_;
    }
    return out;
  }

  std::string_view s_;
  const std::string& what_;
  size_t pos_ = 0;
};

void parse_descr(const std::string& d, const std::string& what, char& kind, int& itemsize) {
  if (d.size() < 3) fail(what, "unsupported dtype '" + d + "'");
  const char order = d[0];
  kind = d[1];
  const std::string size = d.substr(2);
  if (size != "1" && size != "2" && size != "4" && size != "8")
    fail(what, "unsupported dtype '" + d + "'");
  itemsize = std::stoi(size);
  if (order == '>' && itemsize > 1) fail(what, "big-endian dtype '" + d + "' is not supported");
  if (order != '<' && order != '|' && order != '=') fail(what, "unsupported dtype '" + d + "'");
  const bool ok = (kind == 'i' || kind == 'u') || (kind == 'b' && itemsize == 1) ||
                  (kind == 'f' && itemsize >= 2);
  if (!ok) fail(what, "unsupported dtype '" + d + "' (expected int, uint, bool or float)");
}

}  // namespace

int64_t Array::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string Array::descr() const {
  return detail::concat(itemsize == 1 ? '|' : '<', kind, itemsize);
}

std::vector<int64_t> Array::to_int64s() const {
  const int64_t n = numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  if (kind == 'f') {
    const std::vector<double> d = to_doubles();
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(d[i]);
    return out;
  }
  const uint8_t* p = data.data();
  for (int64_t i = 0; i < n; ++i, p += itemsize) {
    int64_t v = 0;
    switch (itemsize) {
      case 1:
        v = kind == 'i' ? int64_t{static_cast<int8_t>(*p)} : int64_t{*p};
        break;
      case 2: {
        int16_t s;
        uint16_t u;
        std::memcpy(&s, p, 2);
        std::memcpy(&u, p, 2);
        v = kind == 'i' ? s : u;
        break;
      }
      case 4: {
        int32_t s;
        uint32_t u;
        std::memcpy(&s, p, 4);
        std::memcpy(&u, p, 4);
        v = kind == 'i' ? s : u;
        break;
      }
      default:
        std::memcpy(&v, p, 8);
        break;
    }
    out[i] = v;
  }
  return out;
}

std::vector<double> Array::to_doubles() const {
  const int64_t n = numel();
  if (kind != 'f') {
    const std::vector<int64_t> iv = to_int64s();
    return std::vector<double>(iv.begin(), iv.end());
  }
  std::vector<double> out(static_cast<size_t>(n));
  if (itemsize == 8) {
    std::memcpy(out.data(), data.data(), n * 8);
  } else if (itemsize == 4) {
    std::vector<float> f(n);
    std::memcpy(f.data(), data.data(), n * 4);
    out.assign(f.begin(), f.end());
  } else {  // f16: let livefuse's own conversion do it
    const std::vector<double> d =
        from_host(data.data(), Shape{n}, DType::f16, Device::cpu()).to_doubles();
    out = d;
  }
  return out;
}

Array parse(const std::vector<uint8_t>& b, const std::string& what) {
  if (b.size() < 10 || std::memcmp(b.data(), kMagic, kMagicLen) != 0)
    fail(what, "not a .npy file (bad magic)");
  const int major = b[6];
  size_t hlen = 0, hstart = 0;
  if (major == 1) {
    hlen = b[8] | (size_t{b[9]} << 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) fail(what, "truncated header");
    hlen = b[8] | (size_t{b[9]} << 8) | (size_t{b[10]} << 16) | (size_t{b[11]} << 24);
    hstart = 12;
  } else {
    fail(what, detail::concat("unsupported .npy version ", major));
  }
  if (hstart + hlen > b.size()) fail(what, "truncated header");
  const std::string_view header(reinterpret_cast<const char*>(b.data()) + hstart, hlen);

  std::string descr;
  bool fortran = false;
  Array a;
  HeaderParser(header, what).parse(descr, fortran, a.shape);
  if (fortran) fail(what, "fortran_order arrays are not supported (save C-contiguous)");
  parse_descr(descr, what, a.kind, a.itemsize);

  // Bound the element count by the file size first so a hostile shape cannot overflow.
  size_t count = 1;
  for (int64_t d : a.shape) {
    if (d != 0 && count > b.size() / static_cast<size_t>(d)) {
      count = b.size() + 1;
      for (int64_t z : a.shape)
        if (z == 0) count = 0;
      break;
    }
    count *= static_cast<size_t>(d);
  }
  if (count > b.size()) fail(what, "truncated data: shape needs more bytes than the file has");
  const size_t need = count * a.itemsize;
  const size_t have = b.size() - hstart - hlen;
  if (have < need)
    fail(what, detail::concat("truncated data: shape needs ", need, " bytes, file has ", have));
  if (have > need)
    fail(what, detail::concat("trailing data: shape needs ", need, " bytes, file has ", have));
  a.data.assign(b.begin() + hstart + hlen, b.end());
  return a;
}

Array read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open file");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return parse(bytes, path);
}

void write(const std::string& path, const void* data, const std::vector<int64_t>& shape, char kind,
           int itemsize) {
  Array probe;
  probe.kind = kind;
  probe.itemsize = itemsize;
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // "(2, 3)"; a 1-tuple keeps "(2,)"
  if (shape.size() == 1) dims.resize(dims.size() - 1);
  std::string header =
      "{'descr': '" + probe.descr() + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Pad so the data starts at a multiple of 64 (what NumPy itself does), ending in '\n'.
  const size_t unpadded = kMagicLen + 2 + 2 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  if (header.size() > 65535) fail(path, "header too long for .npy 1.0");

  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail(path, "cannot open for writing");
  const uint16_t hlen = static_cast<uint16_t>(header.size());
  const char version[2] = {1, 0};
  const char len[2] = {static_cast<char>(hlen & 0xff), static_cast<char>(hlen >> 8)};
  f.write(kMagic, kMagicLen);
  f.write(version, 2);
  f.write(len, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n * itemsize));
  if (!f) fail(path, "write failed");
}

void write_f32(const std::string& path, const std::vector<float>& v,
               const std::vector<int64_t>& shape) {
  write(path, v.data(), shape, 'f', 4);
}

void write_tensor(const std::string& path, const Tensor& t) {
  const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  switch (t.dtype()) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
      write_f32(path, t.to_floats(), shape);
      return;
    case DType::i32:
    case DType::i64:
    case DType::boolean: {
      std::vector<uint8_t> raw(t.nbytes());
      t.copy_to_host(raw.data(), raw.size());
      const char kind = t.dtype() == DType::boolean ? 'b' : 'i';
      write(path, raw.data(), shape, kind, static_cast<int>(dtype_size(t.dtype())));
      return;
    }
  }
}

}  // namespace livefuse::npy
