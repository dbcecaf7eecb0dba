// The safetensors reader on files this test writes itself: good ones (through the writer and
// by hand) and malformed ones, each of which must fail at open/load with a message that says
// what is wrong.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "examples/bert/safetensors.hpp"
#include "tests/test_util.hpp"

namespace lf = livefuse;
namespace st = livefuse::safetensors;

namespace {

std::string tmp_path(const std::string& name) {
  const char* d = std::getenv("TMPDIR");
  return std::string(d ? d : "/tmp") + "/lf_st_test_" + name + ".safetensors";
}

// Writes [u64 length][header][data]; `len` overrides the stored header length.
std::string write_raw(const std::string& name, const std::string& header,
                      const std::vector<uint8_t>& data, int64_t len = -1) {
  const std::string path = tmp_path(name);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const uint64_t n = len < 0 ? header.size() : static_cast<uint64_t>(len);
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>(n >> (8 * i)));
  f << header;
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  return path;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

void expect_open_error(const std::string& path, const char* what) {
  CAPTURE(path);
  CHECK_THROWS_WITH_AS(st::File::open(path), doctest::Contains(what), lf::Error);
  std::remove(path.c_str());
}

}  // namespace

TEST_CASE("safetensors: writer and reader round trip every dtype") {
  const lf::Device cpu = lf::Device::cpu();
  const lf::Tensor a = lf::rand_normal({2, 3}, 1, 0.0, 1.0, lf::DType::f32, cpu);
  const lf::Tensor h = lf::rand_normal({4}, 2, 0.0, 1.0, lf::DType::f16, cpu);
  const lf::Tensor bf = lf::rand_normal({2, 2}, 3, 0.0, 1.0, lf::DType::bf16, cpu);
  const lf::Tensor i64 = lf::from_int64s({-5, 7, 1ll << 40}, {3}, lf::DType::i64, cpu);
  const lf::Tensor i32 = lf::from_int64s({9, -9}, {1, 2}, lf::DType::i32, cpu);
  const std::string path = tmp_path("roundtrip");
  st::write(path, {{"a", a}, {"h", h}, {"bf", bf}, {"i64", i64}, {"i32", i32}}, {{"format", "pt"}});

  const st::File f = st::File::open(path);
  CHECK(f.keys() == std::vector<std::string>{"a", "bf", "h", "i32", "i64"});
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.info("a").dtype == "F32");
  CHECK(f.info("a").shape == std::vector<int64_t>{2, 3});
  CHECK(f.info("h").dtype == "F16");
  CHECK(f.info("bf").dtype == "BF16");
  CHECK(f.info("i64").end - f.info("i64").begin == 24);
  CHECK(f.load("a", {2, 3}, lf::DType::f32, cpu).to_doubles() == a.to_doubles());
  // Conversions on load: f16 -> f32 exact, f32 -> bf16 is the bf16 rounding, i32 -> i64.
  CHECK(f.load("h", {4}, lf::DType::f32, cpu).to_doubles() == h.to_doubles());
  CHECK(f.load("a", {2, 3}, lf::DType::bf16, cpu).to_doubles() ==
        lf::cast(a, lf::DType::bf16).to_doubles());
  CHECK(f.load("bf", {2, 2}, lf::DType::bf16, cpu).to_doubles() == bf.to_doubles());
  CHECK(f.load("i64", {3}, lf::DType::i64, cpu).to_int64s() == i64.to_int64s());
  CHECK(f.load("i32", {1, 2}, lf::DType::i64, cpu).to_int64s() == std::vector<int64_t>{9, -9});

  // Load-time checks: shape, dtype kind, missing key (with the closest stored name).
  CHECK_THROWS_WITH_AS(f.load("a", {3, 2}, lf::DType::f32, cpu),
                       doctest::Contains("'a' has shape [2, 3], expected [3, 2]"), lf::Error);
  CHECK_THROWS_WITH_AS(f.load("i64", {3}, lf::DType::f32, cpu),
                       doctest::Contains("expected a floating dtype"), lf::Error);
  CHECK_THROWS_WITH_AS(f.load("a", {2, 3}, lf::DType::i64, cpu),
                       doctest::Contains("expected I32 or I64"), lf::Error);
  CHECK_THROWS_WITH_AS(f.info("i6"), doctest::Contains("missing tensor 'i6'"), lf::Error);
  CHECK_THROWS_WITH_AS(f.info("i6"), doctest::Contains("closest: 'i64'"), lf::Error);
  std::remove(path.c_str());
}

TEST_CASE("safetensors: a hand-written file with F64 data, metadata and spaced JSON") {
  const double vals[3] = {1.5, -2.25, 1e-3};
  std::vector<uint8_t> data(24);
  std::memcpy(data.data(), vals, 24);
  const std::string header =
      "{ \"__metadata__\" : {\"who\": \"test\"},\n \"x\": {\"dtype\": \"F64\", \"shape\": [3], "
      "\"data_offsets\": [0, 24]} }   ";
  const std::string path = write_raw("f64", header, data);
  const st::File f = st::File::open(path);
  const auto got = f.load("x", {3}, lf::DType::f32, lf::Device::cpu()).to_doubles();
  CHECK(got[0] == 1.5);
  CHECK(got[1] == -2.25);
  CHECK(got[2] == doctest::Approx(1e-3).epsilon(1e-6));
  CHECK(f.read_bytes("x") == data);
  std::remove(path.c_str());
}

TEST_CASE("safetensors: malformed files fail at open, naming the problem") {
  const std::vector<uint8_t> six = f32_bytes({1, 2, 3, 4, 5, 6});
  const auto entry = [](const std::string& body) { return "{\"w\": {" + body + "}}"; };
  const std::string good_w = "\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]";
  // Sanity: the good form opens.
  {
    const std::string p = write_raw("good", entry(good_w), six);
    CHECK(st::File::open(p).info("w").shape == std::vector<int64_t>{2, 3});
    std::remove(p.c_str());
  }
  {
    const std::string p = tmp_path("short");
    std::ofstream(p, std::ios::binary) << "abc";
    expect_open_error(p, "too short for a header");
  }
  expect_open_error(write_raw("len_past_end", entry(good_w), six, 4096),
                    "past the end of the file");
  expect_open_error(write_raw("len_huge", entry(good_w), six, int64_t{1} << 40), "100 MiB");
  expect_open_error(write_raw("bad_json", "{\"w\": {\"dtype\": ", six), "not valid JSON");
  expect_open_error(write_raw("not_object", "[1, 2, 3]", six), "not a JSON object");
  expect_open_error(
      write_raw("bad_dtype",
                entry("\"dtype\": \"F128\", \"shape\": [2, 3], \"data_offsets\": [0, 24]"), six),
      "unknown dtype \"F128\"");
  expect_open_error(
      write_raw("neg_dim",
                entry("\"dtype\": \"F32\", \"shape\": [-2, 3], \"data_offsets\": [0, 24]"), six),
      "negative dimension");
  expect_open_error(write_raw("no_offsets", entry("\"dtype\": \"F32\", \"shape\": [2, 3]"), six),
                    "data_offsets");
  expect_open_error(
      write_raw("span", entry("\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 24]"),
                six),
      "span 24 bytes but F32[2, 2] needs 16");
  expect_open_error(
      write_raw("reversed", entry("\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [8, 4]"),
                six),
      "reversed");
  // Truncated: the header promises 24 bytes, the file holds 12.
  expect_open_error(write_raw("truncated", entry(good_w), f32_bytes({1, 2, 3})), "file truncated?");
  expect_open_error(
      write_raw("past_end", entry("\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [20, 24]"),
                f32_bytes({1, 2, 3})),
      "end 24 is past the data section (12 bytes)");
  // A shape whose byte count would wrap around 2^64 is still caught.
  expect_open_error(write_raw("wrap",
                              entry("\"dtype\": \"F32\", \"shape\": [4611686018427387904, 4], "
                                    "\"data_offsets\": [0, 0]"),
                              six),
                    "needs more bytes than the data section");
  expect_open_error(
      write_raw("overlap",
                "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
                " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}",
                six),
      "overlap");
  expect_open_error(
      write_raw("meta", "{\"__metadata__\": {\"k\": 3}, \"w\": {" + good_w + "}}", six),
      "__metadata__ value of 'k' is not a string");
  CHECK_THROWS_WITH_AS(st::File::open(tmp_path("does_not_exist")), doctest::Contains("cannot open"),
                       lf::Error);
}
