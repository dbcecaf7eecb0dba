// Bad input: each mistake is a livefuse::Error whose message names the op, what was given and
// what was expected; the runtime keeps working afterwards.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "tests/ops/ops_util.hpp"

using namespace opstest;

namespace {

// After every rejected call a normal op must still run and be right.
void check_still_works(Device dev) {
  const Tensor x = floats({1, 2, 3}, {3}, DType::f32, dev);
  check_equal(lf::add(x, x), {2, 4, 6}, {3}, DType::f32, "add after an error on " + dev.str());
}

struct Expect {
  std::string what;                // case name
  std::function<void()> call;      // the bad call
  std::vector<std::string> parts;  // substrings the message must contain
};

void run_cases(const std::vector<Expect>& cases, Device dev) {
  for (const Expect& e : cases) {
    INFO(e.what << " on " << dev.str());
    const std::string msg = error_of(e.call);
    INFO("message: " << msg);
    if (std::getenv("LF_TEST_SHOW_ERRORS")) MESSAGE(msg);
    CHECK(!msg.empty());
    for (const std::string& p : e.parts) {
      INFO("expected to contain: " << p);
      CHECK(contains(msg, p));
    }
    check_still_works(dev);
  }
}

}  // namespace

TEST_CASE("bad input: shape, dtype, rank and dim mistakes name the op and operands") {
  // On CUDA, embedding ids are range-checked on the device and reported at the call only under
  // LIVEFUSE_VERIFY (reading the flag back is a host sync, impossible inside a graph capture).
  const lf::Config saved = lf::config();
  lf::Config checked = saved;
  checked.verify = std::max(1, saved.verify);
  lf::set_config_for_testing(checked);
  struct Restore {
    lf::Config c;
    ~Restore() { lf::set_config_for_testing(c); }
  } restore{saved};
  for (Device dev : lftest::devices()) {
    const Tensor a23 = rand_tensor({2, 3}, DType::f32, dev, 1);
    const Tensor a4 = rand_tensor({4}, DType::f32, dev, 2);
    const Tensor h23 = rand_tensor({2, 3}, DType::f16, dev, 3);
    const Tensor i23 = rand_tensor({2, 3}, DType::i32, dev, 4, -5, 5);
    const Tensor b23 = rand_tensor({2, 3}, DType::boolean, dev, 5);
    const Tensor m45 = rand_tensor({4, 5}, DType::f32, dev, 6);
    const Tensor v3 = rand_tensor({3}, DType::f32, dev, 7);
    const Tensor s0 = lf::full(Shape{}, 1.0, DType::f32, dev);
    const Tensor w = rand_tensor({11, 4}, DType::f32, dev, 8);
    run_cases(
        {
            {"broadcast mismatch", [&] { lf::add(a23, a4); }, {"[add]", "[2, 3]", "[4]"}},
            {"dtype mismatch", [&] { lf::mul(a23, h23); }, {"[mul]", "f32", "f16"}},
            {"where value dtypes", [&] { lf::where(b23, a23, h23); }, {"[where]", "f32", "f16"}},
            {"float-only op on ints", [&] { lf::exp(i23); }, {"[exp]", "i32"}},
            {"bool arithmetic", [&] { lf::add(b23, b23); }, {"[add]", "bool"}},
            {"clamp lo > hi", [&] { lf::clamp(a23, 2, 1); }, {"[clamp]", "2", "1"}},
            {"matmul inner dims", [&] { lf::matmul(a23, m45); }, {"[matmul]", "[2, 3]", "[4, 5]"}},
            {"matmul rank 1", [&] { lf::matmul(v3, a23); }, {"[matmul]", "rank"}},
            {"matmul dtypes",
             [&] { lf::matmul(a23, lf::cast(lf::transpose(h23, 0, 1), DType::f16)); },
             {"[matmul]", "f32", "f16"}},
            {"linear in-features", [&] { lf::linear(a23, m45); }, {"[linear]", "3", "5"}},
            {"linear bias shape",
             [&] {
               lf::linear(a23, rand_tensor({4, 3}, DType::f32, dev, 9), v3);
             },
             {"[linear]", "bias", "[4]", "[3]"}},
            {"layer_norm weight shape",
             [&] { lf::layer_norm(a23, a4, {}, 1e-5); },
             {"[layer_norm]", "[3]", "[4]"}},
            {"rms_norm weight dtype",
             [&] { lf::rms_norm(a23, lf::cast(v3, DType::f16), 1e-5); },
             {"[rms_norm]", "f32", "f16"}},
            {"layer_norm on ints",
             [&] { lf::layer_norm(i23, {}, {}, 1e-5); },
             {"[layer_norm]", "i32"}},
            {"softmax mask shape",
             [&] { lf::softmax(a23, 1.0, a4); },
             {"[softmax]", "[4]", "[2, 3]"}},
            {"softmax of a scalar", [&] { lf::softmax(s0); }, {"[softmax]", "rank"}},
            {"sum dim too large", [&] { lf::sum(a23, 2); }, {"[sum]", "dim 2", "rank 2"}},
            {"argmax dim too negative", [&] { lf::argmax(a23, -3); }, {"[argmax]", "-3", "rank 2"}},
            {"mean of ints", [&] { lf::mean(i23, 0); }, {"[mean]", "i32"}},
            {"concat ranks",
             [&] {
               lf::concat({a23, a4}, 0);
             },
             {"[concat]", "rank"}},
            {"concat shapes",
             [&] {
               lf::concat({a23, m45}, 0);
             },
             {"[concat]", "[4, 5]", "[2, 3]"}},
            {"concat dtypes",
             [&] {
               lf::concat({a23, h23}, 0);
             },
             {"[concat]", "f32", "f16"}},
            {"concat dim",
             [&] {
               lf::concat({a23, a23}, 5);
             },
             {"[concat]", "5"}},
            {"embedding float ids", [&] { lf::embedding(w, a4); }, {"[embedding]", "f32"}},
            {"embedding id too large",
             [&] {
               lf::embedding(w, lf::from_int64s({1, 11, 2}, {3}, DType::i64, dev));
             },
             {"embedding", "11", "[0, 11)"}},
            {"embedding negative id",
             [&] {
               lf::embedding(w, lf::from_int64s({-1, 0}, {2}, DType::i32, dev));
             },
             {"embedding", "-1", "[0, 11)"}},
            {"embedding weight rank",
             [&] { lf::embedding(v3, lf::from_int64s({0}, {1}, DType::i64, dev)); },
             {"[embedding]", "[3]"}},
            {"reshape element count",
             [&] {
               lf::reshape(a23, {4, 2});
             },
             {"[reshape]", "[2, 3]", "[4, 2]"}},
            {"permute repeated dim",
             [&] {
               lf::permute(a23, {0, 0});
             },
             {"[permute]", "0"}},
            {"permute rank",
             [&] {
               lf::permute(a23, {0, 1, 2});
             },
             {"[permute]", "rank"}},
            {"slice step", [&] { lf::slice(a23, 1, 0, 3, 0); }, {"[slice]", "step"}},
            {"slice dim", [&] { lf::slice(a23, 2, 0, 1); }, {"[slice]", "dim 2"}},
            {"undefined input", [&] { lf::add(a23, Tensor()); }, {"[add]", "undefined"}},
            {"max over an empty dim",
             [&] {
               lf::max(rand_tensor({3, 0}, DType::f32, dev, 10), 1);
             },
             {"[max]", "size 0"}},
            {"rank above the maximum",
             [&] {
               lf::reshape(lf::arange(1, DType::f32, dev), {1, 1, 1, 1, 1, 1, 1, 1, 1});
             },
             {"rank", "8"}},
        },
        dev);
  }
}

LF_CUDA_TEST_CASE("bad input: device mismatches") {
  const Tensor c = rand_tensor({2, 3}, DType::f32, Device::cpu(), 1);
  const Tensor g = rand_tensor({2, 3}, DType::f32, Device::cuda(0), 2);
  run_cases({{"add cpu + cuda", [&] { lf::add(c, g); }, {"[add]", "cpu", "cuda:0"}},
             {"matmul cuda @ cpu",
              [&] { lf::matmul(g, lf::transpose(c, 0, 1)); },
              {"[matmul]", "cpu", "cuda:0"}},
             {"embedding ids on another device",
              [&] { lf::embedding(g, lf::from_int64s({0}, {1}, DType::i64, Device::cpu())); },
              {"[embedding]", "cpu", "cuda:0"}}},
            Device::cuda(0));
}

TEST_CASE("bad input: null wrapped pointers") {
  for (Device dev : lftest::devices()) {
    const std::string msg = error_of([&] { lf::Tensor::wrap(nullptr, {2, 3}, DType::f32, dev); });
    INFO(msg);
    CHECK(contains(msg, "wrap"));
    CHECK(contains(msg, "null"));
    CHECK(contains(msg, "[2, 3]"));
    check_still_works(dev);
    // A null pointer with no elements is a valid empty tensor.
    const Tensor e = lf::Tensor::wrap(nullptr, {0, 3}, DType::f32, dev);
    CHECK(lf::add(e, e).shape() == Shape{0, 3});
  }
}

TEST_CASE("empty tensors and zero-size dims give empty or identity results") {
  for (Device dev : lftest::devices()) {
    const Tensor e = rand_tensor({0, 3}, DType::f32, dev, 1);
    const Tensor z = rand_tensor({4, 0}, DType::f32, dev, 2);
    CHECK(lf::add(e, rand_tensor({3}, DType::f32, dev, 3)).shape() == Shape{0, 3});
    CHECK(lf::exp(e).shape() == Shape{0, 3});
    CHECK(lf::softmax(e).shape() == Shape{0, 3});
    CHECK(lf::layer_norm(e, {}, {}, 1e-5).shape() == Shape{0, 3});
    CHECK(lf::sum(e, 1).shape() == Shape{0});
    check_equal(lf::sum(z, 1), {0, 0, 0, 0}, {4}, DType::f32, "sum over a zero-size dim");
    const std::vector<double> m = lf::mean(z, 1, true).to_doubles();
    CHECK(m.size() == 4);
    for (double v : m) CHECK(std::isnan(v));
    check_equal(lf::matmul(z, rand_tensor({0, 2}, DType::f32, dev, 4)), std::vector<double>(8, 0.0),
                {4, 2}, DType::f32, "matmul with K = 0");
    check_equal(lf::embedding(rand_tensor({5, 2}, DType::f32, dev, 5),
                              lf::from_int64s({}, {0}, DType::i64, dev)),
                {}, {0, 2}, DType::f32, "embedding of no ids");
    check_equal(lf::contiguous(lf::transpose(z, 0, 1)), {}, {0, 4}, DType::f32,
                "contiguous of empty");
    check_still_works(dev);
  }
}
