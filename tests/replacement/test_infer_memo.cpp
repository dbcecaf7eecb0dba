// InferMemo (runtime/infer_memo.hpp): a call at a remembered position of its window is shaped
// from memory only when it is the remembered call -- op, attrs, every input's dtype, shape and
// device -- and is then shaped exactly as infer_outputs shapes it; a bad call still fails with
// infer_outputs's error; a served decode loop gives eager's values with the memo engaged.
#include <memory>
#include <string>
#include <vector>

#include "livefuse/error.hpp"
#include "livefuse/inspect.hpp"
#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "runtime/infer_memo.hpp"
#include "test_plan_util.hpp"

namespace lf = livefuse;

namespace {
const lf::Device kCpu = lf::Device::cpu();

lf::Tensor filled(lf::Shape s, uint64_t seed = 1) {
  return lf::rand_uniform(s, seed, -1, 1, lf::DType::f32, kCpu);
}

lf::OpCall make_call(lf::OpId op, std::vector<lf::Tensor> inputs, std::vector<int64_t> ints = {}) {
  lf::OpCall c;
  c.op = op;
  for (lf::Tensor& t : inputs) c.inputs.push_back(std::move(t));
  for (int64_t v : ints) c.attrs.push_int(v);
  return c;
}

// Shapes `call` at window position `pos` through `memo`: what submit does.
lf::OutputInfos shape_at(lf::InferMemo& memo, size_t pos, lf::OpCall& call) {
  memo.set_position(pos);
  const lf::InferMemo::Shaping s(&memo, call);
  return s.infos();
}

void check_same_infos(const lf::OutputInfos& got, const lf::OutputInfos& want) {
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    CHECK(got[k].shape == want[k].shape);
    CHECK(got[k].dtype == want[k].dtype);
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const lf::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("infer memo: a remembered call is shaped and normalised as infer_outputs does it") {
  lf::InferMemo memo;
  // Calls whose attrs infer_outputs rewrites: a negative dim, a -1 to resolve, a slice clamped.
  const lf::Tensor x = filled({2, 3, 4});
  std::vector<lf::OpCall> calls = {
      make_call(lf::OpId::reshape, {x}, {4, -1}),
      make_call(lf::OpId::sum, {x}, {-1, 1}),
      make_call(lf::OpId::slice, {x}, {-2, -1, 100, 1}),
      make_call(lf::OpId::add, {x, filled({4}, 2)}),
  };
  for (int round = 0; round < 3; ++round) {
    for (size_t k = 0; k < calls.size(); ++k) {
      INFO("round " << round << ", call " << k);
      lf::OpCall fresh = calls[k], memoed = calls[k];
      const lf::OutputInfos want = lf::infer_outputs(fresh);
      check_same_infos(shape_at(memo, k + 1, memoed), want);
      CHECK(memoed.attrs == fresh.attrs);
      CHECK(memoed.attrs.i == fresh.attrs.i);  // every slot, not only the first ni
    }
  }
  // Round 0 inferred the four; rounds 1 and 2 recalled them.
  CHECK(memo.take_counts() == std::pair<uint64_t, uint64_t>{8, 4});
  // Position 0 (a call that would start a window) is never remembered.
  for (int k = 0; k < 3; ++k) {
    lf::OpCall c = calls[0];
    (void)shape_at(memo, 0, c);
  }
  CHECK(memo.take_counts() == std::pair<uint64_t, uint64_t>{0, 0});
}

TEST_CASE("infer memo: anything that differs from the remembered call is inferred afresh") {
  const lf::Tensor a = filled({2, 8}), w = filled({4, 8}, 2);
  const lf::OpCall first = make_call(lf::OpId::linear, {a, w}, {0, 0});
  struct Variant {
    const char* what;
    lf::OpCall call;
  };
  lf::OpCall other_attrs = make_call(lf::OpId::linear, {a, w}, {0, 1});
  std::vector<Variant> variants = {
      {"rows", make_call(lf::OpId::linear, {filled({3, 8}), w}, {0, 0})},
      {"rank", make_call(lf::OpId::linear, {filled({1, 2, 8}), w}, {0, 0})},
      {"weight", make_call(lf::OpId::linear, {a, filled({6, 8}, 3)}, {0, 0})},
      {"dtype", make_call(lf::OpId::linear,
                          {lf::cast(a, lf::DType::f16), lf::cast(w, lf::DType::f16)}, {0, 0})},
      {"attrs", other_attrs},
      {"op", make_call(lf::OpId::matmul, {a, lf::transpose(w, 0, 1)}, {0, 0})},
  };
  for (Variant& v : variants) {
    INFO(v.what);
    lf::InferMemo memo;
    lf::OpCall remembered = first;
    (void)shape_at(memo, 1, remembered);
    (void)memo.take_counts();
    lf::OpCall fresh = v.call, memoed = v.call;
    const lf::OutputInfos want = lf::infer_outputs(fresh);
    check_same_infos(shape_at(memo, 1, memoed), want);
    CHECK(memoed.attrs == fresh.attrs);
    CHECK(memo.take_counts() == std::pair<uint64_t, uint64_t>{0, 1});  // compared, not recalled
  }
}

TEST_CASE("infer memo: a bad call at a remembered position fails as infer_outputs fails, and the memo stays right") {
  lf::InferMemo memo;
  const lf::Tensor a = filled({2, 3}), b = filled({2, 3}, 2);
  const lf::OpCall good = make_call(lf::OpId::add, {a, b});
  lf::OpCall good_fresh = good;
  const lf::OutputInfos want_good = lf::infer_outputs(good_fresh);
  // Calls `good` at position 1 until the memo recalls it (a miss empties the entry, and misses
  // in a row make the position skip a few visits); true if it did.
  auto recalled_again = [&] {
    (void)memo.take_counts();
    for (int k = 0; k < 200; ++k) {
      lf::OpCall c = good;
      check_same_infos(shape_at(memo, 1, c), want_good);
      if (memo.take_counts().first) return true;
    }
    return false;
  };
  REQUIRE(recalled_again());
  // A shape that does not broadcast.
  lf::OpCall bad = make_call(lf::OpId::add, {a, filled({4}, 3)});
  lf::OpCall bad_fresh = bad;
  const std::string want = error_of([&] { (void)lf::infer_outputs(bad_fresh); });
  REQUIRE_FALSE(want.empty());
  CHECK(error_of([&] { (void)shape_at(memo, 1, bad); }) == want);
  CHECK(recalled_again());  // nothing of the failed call was remembered
  // The remembered call's signature, but an input with no storage and not pending: infer_outputs
  // checks it on every call, so must the memo.
  auto bare = std::make_shared<lf::TensorImpl>(nullptr, 0, lf::Shape{2, 3},
                                               lf::contiguous_strides(lf::Shape{2, 3}),
                                               lf::DType::f32, kCpu);
  lf::OpCall no_storage = make_call(lf::OpId::add, {a, lf::Tensor(bare)});
  lf::OpCall no_storage_fresh = no_storage;
  const std::string want2 = error_of([&] { (void)lf::infer_outputs(no_storage_fresh); });
  REQUIRE(want2.find("no storage") != std::string::npos);
  (void)memo.take_counts();
  CHECK(error_of([&] { (void)shape_at(memo, 1, no_storage); }) == want2);
  CHECK(memo.take_counts() == std::pair<uint64_t, uint64_t>{0, 1});  // compared: a miss
  CHECK(recalled_again());
}

TEST_CASE("infer memo: a position whose call changes every time stops being compared, and comes back") {
  lf::InferMemo memo;
  int calls = 0;
  for (int64_t len = 1; len <= 40; ++len, ++calls) {  // a cache that grows every step
    lf::OpCall c = make_call(lf::OpId::sum, {filled({2, len})}, {1, 0});
    const lf::OutputInfos infos = shape_at(memo, 3, c);
    CHECK(infos[0].shape == lf::Shape{2});
  }
  const auto [hits, misses] = memo.take_counts();
  CHECK(hits == 0);
  CHECK(misses < 15);  // most visits skipped the compare (and the remembering)
  // A steady call there again is recalled once the back-off has run out.
  uint64_t recalled = 0;
  for (int k = 0; k < 300; ++k) {
    lf::OpCall c = make_call(lf::OpId::sum, {filled({2, 5})}, {1, 0});
    (void)shape_at(memo, 3, c);
    recalled += memo.take_counts().first;
  }
  CHECK(recalled > 150);  // at most ~64 + 64 visits skipped
}

TEST_CASE("infer memo: an undefined input still fails naming the op, in every mode") {
  const lf::Config saved = lf::config();
  for (const lf::Mode m : {lf::Mode::on, lf::Mode::off}) {
    lf::set_config_for_testing(lftest::fresh_unsampled(m));
    const std::string e = error_of([] { (void)lf::add(filled({2}), lf::Tensor()); });
    CHECK(e.find("add") != std::string::npos);
    CHECK(e.find("undefined") != std::string::npos);
  }
  lf::set_config_for_testing(saved);
}

namespace {
// A decode step over a cache grown by concat: most calls repeat their shapes step after step,
// the attention's do not.
struct Decode {
  lf::Tensor g = lf::rand_uniform({16}, 3, 0.5, 1.5, lf::DType::f32, kCpu);
  lf::Tensor w = lf::rand_uniform({16, 16}, 4, -0.3, 0.3, lf::DType::f32, kCpu);
  lf::Tensor b = lf::rand_uniform({16}, 5, -0.1, 0.1, lf::DType::f32, kCpu);

  // Counters over the last `late` steps, from when the monitor and the planner have caught up
  // (on a busy machine plans may otherwise come after the loop has ended).
  struct Late {
    uint64_t hits = 0, misses = 0, served = 0;
  };

  std::vector<std::vector<double>> run(int steps, int late, Late* counts) {
    lf::Tensor x = filled({1, 1, 16}, 7), cache;
    std::vector<std::vector<double>> out;
    uint64_t h0 = 0, m0 = 0, s0 = 0;
    for (int s = 0; s < steps; ++s) {
      if (s == steps - late) {
        (void)x.to_doubles();
        lf::monitor::Monitor::instance().drain();
        lf::planner::wait_service_idle();
        h0 = lftest::matcher_counter("infer_memo_hits");
        m0 = lftest::matcher_counter("infer_memo_misses");
        s0 = lftest::matcher_counter("served");
      }
      const lf::Tensor h = lf::layer_norm(x, g, lf::Tensor(), 1e-5);
      const lf::Tensor k = lf::reshape(lf::linear(h, w, b), {1, 1, 2, 8});
      const lf::Tensor kt = lf::permute(k, {0, 2, 1, 3});
      cache = cache.defined() ? lf::concat({cache, kt}, 2) : lf::contiguous(kt);
      const lf::Tensor q = lf::permute(lf::reshape(h, {1, 1, 2, 8}), {0, 2, 1, 3});
      const lf::Tensor p = lf::softmax(lf::matmul(q, lf::transpose(cache, -2, -1)), 0.35);
      const lf::Tensor o = lf::reshape(lf::permute(lf::matmul(p, cache), {0, 2, 1, 3}), {1, 1, 16});
      x = lf::tanh(lf::add(lf::mul(o, 0.5), x));  // bounded: values stay comparable
      if (s % 10 == 9) out.push_back(x.to_doubles());
    }
    (void)x.to_doubles();
    counts->hits = lftest::matcher_counter("infer_memo_hits") - h0;
    counts->misses = lftest::matcher_counter("infer_memo_misses") - m0;
    counts->served = lftest::matcher_counter("served") - s0;
    return out;
  }
};
}  // namespace

TEST_CASE("infer memo: a served decode loop gives eager's values with the memo engaged, and without it") {
  const lf::Config saved = lf::config();
  lf::Config c = lftest::fresh_unsampled(lf::Mode::off);
  lf::set_config_for_testing(c);
  Decode::Late late;
  const auto want = Decode().run(200, 80, &late);
  // Off first: a window's counts reach the shared counters when a later window completes.
  for (const bool memo : {false, true}) {
    INFO("LIVEFUSE_INFER_MEMO=" << memo);
    c = lftest::fresh_unsampled(lf::Mode::on);
    c.infer_memo = memo;
    lf::set_config_for_testing(c);
    const auto got = Decode().run(200, 80, &late);
    MESSAGE("memo ", memo, ", the last 80 steps: served ", late.served, " calls, recalled ",
            late.hits, ", inferred ", late.misses);
    REQUIRE(got.size() == want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      INFO("step " << 10 * k + 9 << ": " << got[k][0] << " against " << want[k][0]);
      CHECK(lftest::allclose(got[k], want[k], 1e-4, 1e-5));
    }
    CHECK(late.served > 80 * 10);  // most of the step's ~17 calls, every step
    if (memo) {
      CHECK(late.hits > late.misses);  // the step's repeating calls recalled
      CHECK(late.hits > late.served / 4);
    } else {
      CHECK(late.hits + late.misses == 0);
    }
  }
  lf::set_config_for_testing(saved);
}
