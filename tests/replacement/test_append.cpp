// A KV cache grown by concat, appended in place (runtime/append.hpp, the Note): the concat's
// result has room to grow into, and once the program lets the old cache go, a served step's
// concat takes its block and copies only the new rows -- while every value any tensor shows
// stays what eager execution gives.
#include <string>
#include <vector>

#include "livefuse/inspect.hpp"
#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "test_plan_util.hpp"

namespace lf = livefuse;

namespace {
constexpr int64_t kHeads = 2, kHead = 16, kDim = kHeads * kHead;
constexpr int kSteps = 200;

// What the program does with the caches it made.
enum class Keep { nothing, every_cache, address, two_branches };

// The batch and dtype a run decodes with.
struct Form {
  int64_t batch = 1;
  lf::DType dtype = lf::DType::f32;
  double tol() const { return dtype == lf::DType::f32 ? 1e-4 : 2e-2; }
};

struct Model {
  int64_t B;
  lf::Tensor g, w, b;
  Model(lf::Device d, Form f)
      : B(f.batch),
        g(lf::rand_uniform({kDim}, 3, 0.5, 1.5, f.dtype, d)),
        w(lf::rand_uniform({kDim, kDim}, 4, -0.2, 0.2, f.dtype, d)),
        b(lf::rand_uniform({kDim}, 5, -0.1, 0.1, f.dtype, d)) {}

  // One decode step as decoders write it: the new key joins a [B, heads, L, head] cache along
  // dim 2 (the heads split off a linear), one query row attends over it.
  lf::Tensor step(const lf::Tensor& x, lf::Tensor& cache, Keep keep) const {
    const lf::Tensor h = lf::layer_norm(x, g, lf::Tensor(), 1e-5);  // [B, 1, kDim]
    const lf::Tensor k = lf::permute(lf::reshape(lf::linear(h, w, b), {B, 1, kHeads, kHead}), {0, 2, 1, 3});
    lf::Tensor other;
    if (keep == Keep::two_branches && cache.defined()) other = lf::concat({cache, lf::neg(k)}, 2);
    cache = cache.defined() ? lf::concat({cache, k}, 2) : lf::contiguous(k);
    const lf::Tensor q = lf::permute(lf::reshape(h, {B, 1, kHeads, kHead}), {0, 2, 1, 3});
    lf::Tensor p = lf::softmax(lf::matmul(q, lf::transpose(cache, 2, 3)), 0.25);
    lf::Tensor o = lf::matmul(p, cache);  // [B, heads, 1, head]
    if (other.defined()) o = lf::add(o, lf::mul(lf::sum(other, 2, true), 0.01));
    o = lf::reshape(lf::permute(o, {0, 2, 1, 3}), {B, 1, kDim});
    return lf::gelu(lf::add(lf::mul(o, 0.5), x));
  }
};

struct Run {
  std::vector<std::vector<double>> outputs;  // every 20th step
  std::vector<std::vector<double>> kept;     // Keep::every_cache: every 20th cache, at the end
  std::vector<double> cache;                 // the last cache
  lf::Strides cache_strides;
  uint64_t in_place_late = 0, steps_late = 0;  // the last 60 steps
  uint64_t served_late = 0, calls_late = 0;
  int shared_late = 0;       // steps whose cache shares the block of the one before
  int64_t held_growth = 0;   // held_bytes over the last 60 steps
};

Run decode(lf::Device d, Keep keep, Form f) {
  const Model m(d, f);
  lf::Tensor cache;
  std::vector<lf::Tensor> history;
  lf::Tensor x = lf::rand_uniform({f.batch, 1, kDim}, 7, -1, 1, f.dtype, d);
  Run r;
  uint64_t in_place0 = 0, served0 = 0, calls0 = 0;
  const lf::Storage* last_block = nullptr;
  for (int s = 0; s < kSteps; ++s) {
    if (s == kSteps - 60) {
      lf::monitor::Monitor::instance().drain();
      lf::planner::wait_service_idle();
      in_place0 = lftest::matcher_counter("appends_in_place"), served0 = lftest::matcher_counter("served"), calls0 = lftest::matcher_counter("calls");
      r.held_growth = -lftest::held_bytes(d);
    }
    x = m.step(x, cache, keep);
    if (keep == Keep::every_cache && s % 20 == 0) history.push_back(cache);
    if (keep == Keep::address) (void)cache.data_ptr();
    if (s % 20 == 19) r.outputs.push_back(x.to_doubles());  // a sync point: the step ran
    if (s >= kSteps - 60) {
      (void)x.to_doubles();
      const lf::Storage* block = cache.impl()->storage.get();
      r.shared_late += block != nullptr && block == last_block;
      last_block = block;
    }
  }
  r.in_place_late = lftest::matcher_counter("appends_in_place") - in_place0;
  r.steps_late = 60;
  r.served_late = lftest::matcher_counter("served") - served0;
  r.calls_late = lftest::matcher_counter("calls") - calls0;
  r.held_growth += lftest::held_bytes(d);
  r.cache = cache.to_doubles();
  r.cache_strides = cache.strides();
  for (const lf::Tensor& t : history) r.kept.push_back(t.to_doubles());
  return r;
}

void check_same(const Run& got, const Run& want, Form f = {}) {
  REQUIRE(got.outputs.size() == want.outputs.size());
  for (size_t k = 0; k < got.outputs.size(); ++k) {
    INFO("step " << 20 * k + 19);
    CHECK(lftest::allclose(got.outputs[k], want.outputs[k], f.tol(), f.tol() / 10));
  }
  CHECK(lftest::allclose(got.cache, want.cache, f.tol(), f.tol() / 10));
  REQUIRE(got.kept.size() == want.kept.size());
  for (size_t k = 0; k < got.kept.size(); ++k) {
    INFO("cache of step " << 20 * k);
    CHECK(lftest::allclose(got.kept[k], want.kept[k], f.tol(), f.tol() / 10));
  }
}

// Off, then on (unsampled): both runs' values, and on's counters.
std::pair<Run, Run> off_and_on(lf::Device d, Keep keep, Form f = {}) {
  lf::Config c = lftest::fresh_unsampled(lf::Mode::off);
  lf::set_config_for_testing(c);
  Run want = decode(d, keep, f);
  c.mode = lf::Mode::on;
  lf::set_config_for_testing(c);
  Run got = decode(d, keep, f);
  MESSAGE("in place ", got.in_place_late, " of the last ", got.steps_late, " steps (blocks shared ",
          got.shared_late, "), served ", got.served_late, " of ", got.calls_late,
          " calls, held bytes grew by ", got.held_growth, " (off: ", want.held_growth, ")");
  return {std::move(want), std::move(got)};
}
}  // namespace

TEST_CASE("append: a growing cache's concat has room to grow into, in every mode") {
  const lf::Config saved = lf::config();
  lf::set_config_for_testing(lftest::fresh_unsampled(lf::Mode::off));
  const lf::Device cpu = lf::Device::cpu();
  const lf::Tensor start = lf::rand_uniform({1, kHeads, 20, kHead}, 9, -1, 1, lf::DType::f32, cpu);
  const lf::Tensor row = lf::rand_uniform({1, kHeads, 1, kHead}, 10, -1, 1, lf::DType::f32, cpu);
  lf::Tensor cache = lf::concat({start, row}, 2);
  // [1, 2, 21, 16] in a block of 21 + 5 + 32 -> 64 rows a head.
  CHECK(cache.strides() == lf::Strides{kHeads * 64 * kHead, 64 * kHead, kHead, 1});
  CHECK_FALSE(cache.is_contiguous());
  std::vector<double> want = start.to_doubles();
  for (int s = 0; s < 60; ++s) {
    const lf::Tensor prev = cache;
    cache = lf::concat({cache, row}, 2);
    // Inside the block the strides stay; past it a larger block (and one full copy).
    if (prev.dim(2) == 64) CHECK(cache.strides()[1] == 128 * kHead);  // 65 + 16 + 32 -> 128
    else CHECK(cache.strides() == prev.strides());
  }
  CHECK(cache.dim(2) == 81);
  // Values are eager's: the start, then the row 61 times, per head.
  const std::vector<double> got = cache.to_doubles(), r = row.to_doubles();
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t l = 0; l < 81; ++l)
      for (int64_t e = 0; e < kHead; ++e) {
        const double w = l < 20 ? want[static_cast<size_t>((h * 20 + l) * kHead + e)]
                                : r[static_cast<size_t>(h * kHead + e)];
        REQUIRE(got[static_cast<size_t>((h * 81 + l) * kHead + e)] == w);
      }
  // Not a cache: equal parts, the last dim, or the first input short -- dense as before.
  CHECK(lf::concat({start, start}, 2).is_contiguous());
  CHECK(lf::concat({start, start}, 3).is_contiguous());
  CHECK(lf::concat({row, row, row}, 2).is_contiguous());
  // Eager calls never take a block over: the program holds the input while its call runs.
  CHECK(lftest::matcher_counter("appends_in_place") == 0);
  lf::set_config_for_testing(saved);
}

TEST_CASE("append: a served decode loop grows its cache in place, eager-equal, memory bounded") {
  const lf::Config saved = lf::config();
  const auto [want, got] = off_and_on(lf::Device::cpu(), Keep::nothing);
  check_same(got, want);
  CHECK(got.cache_strides == want.cache_strides);  // the layout does not depend on the mode
  CHECK(static_cast<double>(got.served_late) >= 0.9 * static_cast<double>(got.calls_late));
  // Every served step but those that outgrow their block (one in ~L/4 here).
  CHECK(got.in_place_late >= 50);
  CHECK(got.shared_late >= 50);
  CHECK(want.shared_late == 0);
  CHECK(got.held_growth <= want.held_growth + (int64_t{16} << 10));
  lftest::reset_pipeline();
  lf::set_config_for_testing(saved);
}

TEST_CASE("append: batch 2 in f16 -- the block holds every sequence's rows, eager-equal") {
  const lf::Config saved = lf::config();
  const Form f{2, lf::DType::f16};
  const auto [want, got] = off_and_on(lf::Device::cpu(), Keep::nothing, f);
  check_same(got, want, f);
  // [2, heads, 200, head] in a block of 2 x heads x 224 rows.
  CHECK(got.cache_strides == lf::Strides{kHeads * 224 * kHead, 224 * kHead, kHead, 1});
  CHECK(static_cast<double>(got.served_late) >= 0.9 * static_cast<double>(got.calls_late));
  CHECK(got.in_place_late >= 50);
  lftest::reset_pipeline();
  lf::set_config_for_testing(saved);
}

TEST_CASE("append: a cache the program still holds, or whose address it took, is never grown into") {
  const lf::Config saved = lf::config();
  for (const Keep keep : {Keep::every_cache, Keep::address}) {
    CAPTURE(static_cast<int>(keep));
    const auto [want, got] = off_and_on(lf::Device::cpu(), keep);
    check_same(got, want);
    CHECK(static_cast<double>(got.served_late) >= 0.9 * static_cast<double>(got.calls_late));
    if (keep == Keep::address) {
      CHECK(got.in_place_late == 0);
      CHECK(got.shared_late == 0);
    }
    // Every 20th cache is held to the end: those are never grown into, and the rest are.
    if (keep == Keep::every_cache) CHECK(got.in_place_late >= 40);
    lftest::reset_pipeline();
  }
  lf::set_config_for_testing(saved);
}

TEST_CASE("append: two concats of one cache in a step -- one grows it, the other copies") {
  const lf::Config saved = lf::config();
  const auto [want, got] = off_and_on(lf::Device::cpu(), Keep::two_branches);
  check_same(got, want);
  CHECK(static_cast<double>(got.served_late) >= 0.9 * static_cast<double>(got.calls_late));
  CHECK(got.in_place_late >= 50);
  CHECK(got.in_place_late <= got.steps_late);  // never both branches
  lftest::reset_pipeline();
  lf::set_config_for_testing(saved);
}

LF_CUDA_TEST_CASE("append: on CUDA a served decode loop grows its cache in place, eager-equal") {
  const lf::Config saved = lf::config();
  const auto [want, got] = off_and_on(lf::Device::cuda(0), Keep::nothing);
  check_same(got, want);
  CHECK(static_cast<double>(got.served_late) >= 0.9 * static_cast<double>(got.calls_late));
  CHECK(got.in_place_late >= 50);
  CHECK(got.held_growth <= want.held_growth + (int64_t{64} << 10));
  lftest::reset_pipeline();
  lf::set_config_for_testing(saved);
}
