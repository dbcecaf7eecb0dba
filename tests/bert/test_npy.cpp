// The .npy reader/writer: round trips, files as NumPy writes them (v1 and v2 headers), and
// malformed files.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "examples/bert/npy.hpp"
#include "tests/test_util.hpp"

namespace lf = livefuse;
namespace npy = livefuse::npy;

namespace {

std::string tmp_path(const std::string& name) {
  const char* d = std::getenv("TMPDIR");
  return std::string(d ? d : "/tmp") + "/lf_npy_test_" + name + ".npy";
}

// A .npy file as NumPy lays it out, with the given header dict and version.
std::vector<uint8_t> npy_bytes(const std::string& dict, const std::vector<uint8_t>& data,
                               int major = 1) {
  std::string header = dict;
  const size_t pre = major == 1 ? 10 : 12;
  header.append((64 - (pre + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  const uint32_t n = static_cast<uint32_t>(header.size());
  out.push_back(n & 0xff);
  out.push_back((n >> 8) & 0xff);
  if (major != 1) {
    out.push_back((n >> 16) & 0xff);
    out.push_back(n >> 24);
  }
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

void expect_parse_error(const std::vector<uint8_t>& b, const char* what) {
  CHECK_THROWS_WITH_AS(npy::parse(b, "x.npy"), doctest::Contains(what), lf::Error);
}

}  // namespace

TEST_CASE("npy: float32 and integer tensors round trip through files") {
  const std::string p = tmp_path("f32");
  npy::write_f32(p, {1.5f, -2.f, 3.25f, 0.f, 7.f, -1e-3f}, {2, 3});
  const npy::Array a = npy::read(p);
  CHECK(a.kind == 'f');
  CHECK(a.itemsize == 4);
  CHECK(a.shape == std::vector<int64_t>{2, 3});
  CHECK(a.descr() == "<f4");
  CHECK(a.to_doubles()[2] == 3.25);
  CHECK(a.to_doubles()[5] == doctest::Approx(-1e-3));

  const lf::Tensor ids =
      lf::from_int64s({3, 1, 4, 1, 5, 9, 2, 6}, {2, 4}, lf::DType::i32, lf::Device::cpu());
  npy::write_tensor(p, ids);
  const npy::Array b = npy::read(p);
  CHECK(b.descr() == "<i4");
  CHECK(b.shape == std::vector<int64_t>{2, 4});
  CHECK(b.to_int64s() == ids.to_int64s());

  // f16 tensors are written as float32 (what a consumer of a model's output expects).
  const lf::Tensor h = lf::rand_normal({5}, 4, 0.0, 1.0, lf::DType::f16, lf::Device::cpu());
  npy::write_tensor(p, h);
  const npy::Array c = npy::read(p);
  CHECK(c.descr() == "<f4");
  CHECK(c.shape == std::vector<int64_t>{5});
  CHECK(c.to_doubles() == h.to_doubles());
  std::remove(p.c_str());
}

TEST_CASE("npy: headers as NumPy writes them") {
  const std::vector<int64_t> v = {101, 2054, -1, 1ll << 40};
  const npy::Array a = npy::parse(
      npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }", bytes_of(v)), "a");
  CHECK(a.to_int64s() == v);
  // Version 2 header, int32, double quotes and no trailing comma.
  const std::vector<int32_t> w = {1, 0, 1};
  const npy::Array b = npy::parse(
      npy_bytes("{\"descr\": \"<i4\", \"fortran_order\": False, \"shape\": (3,)}", bytes_of(w), 2),
      "b");
  CHECK(b.shape == std::vector<int64_t>{3});
  CHECK(b.to_int64s() == std::vector<int64_t>{1, 0, 1});
  // Booleans and a scalar shape ().
  const npy::Array c =
      npy::parse(npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (), }", {1}), "c");
  CHECK(c.numel() == 1);
  CHECK(c.to_int64s() == std::vector<int64_t>{1});
  // float16 data goes through livefuse's conversion.
  const std::vector<uint16_t> h = {0x3c00, 0xc000};  // 1.0, -2.0
  CHECK(
      npy::parse(
          npy_bytes("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", bytes_of(h)), "h")
          .to_doubles() == std::vector<double>{1.0, -2.0});
}

TEST_CASE("npy: malformed and unsupported files fail clearly") {
  const std::vector<uint8_t> four = bytes_of(std::vector<int64_t>{1, 2, 3, 4});
  const std::string ok_dict = "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }";
  REQUIRE_NOTHROW(npy::parse(npy_bytes(ok_dict, four), "ok"));

  std::vector<uint8_t> bad_magic = npy_bytes(ok_dict, four);
  bad_magic[1] = 'X';
  expect_parse_error(bad_magic, "bad magic");
  expect_parse_error({0x93, 'N', 'U'}, "bad magic");
  expect_parse_error(npy_bytes(ok_dict, four, 9), "unsupported .npy version 9");
  std::vector<uint8_t> trunc_header = npy_bytes(ok_dict, {});
  trunc_header.resize(30);
  expect_parse_error(trunc_header, "truncated header");
  expect_parse_error(npy_bytes(ok_dict, std::vector<uint8_t>(four.begin(), four.begin() + 20)),
                     "truncated data");
  std::vector<uint8_t> longer = four;
  longer.push_back(0);
  expect_parse_error(npy_bytes(ok_dict, longer), "trailing data");
  expect_parse_error(npy_bytes("{'descr': '<i8', 'fortran_order': True, 'shape': (2, 2), }", four),
                     "fortran_order");
  expect_parse_error(npy_bytes("{'descr': '>i8', 'fortran_order': False, 'shape': (2, 2), }", four),
                     "big-endian");
  expect_parse_error(npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", four),
                     "unsupported dtype '<c8'");
  expect_parse_error(npy_bytes("{'descr': '<i8', 'shape': (2, 2), }", four), "lacks one of");
  expect_parse_error(npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (2, x), }", four),
                     "tuple of integers");
  expect_parse_error(
      npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
                four),
      "truncated data");
  CHECK_THROWS_WITH_AS(npy::read(tmp_path("does_not_exist")), doctest::Contains("cannot open"),
                       lf::Error);
}
