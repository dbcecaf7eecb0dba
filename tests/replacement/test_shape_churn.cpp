// Shape churn (issue 17, item 6): a hot loop whose row count changes every iteration, through
// 1,000 distinct shapes. Plans keep serving (their extents are parameters), every value is
// eager's, and memory stays under its caps: bytes cached under LIVEFUSE_CACHE_MAX_MB, bytes in
// use under what the loop holds plus the binding sets a plan may keep (FusedPlan::kMaxSets),
// which follow the shapes in use instead of keeping the first ones seen.
#include <algorithm>
#include <string>

#include "livefuse/inspect.hpp"
#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "test_plan_util.hpp"

namespace lf = livefuse;

namespace {
constexpr size_t kMiB = size_t(1) << 20;
constexpr int kShapes = 1000;

lf::Tensor layers(const lf::Tensor& x, const lf::Tensor& g) {
  lf::Tensor h = x;
  for (int l = 0; l < 3; ++l)
    h = lf::gelu(lf::layer_norm(lf::add(lf::mul(h, 2.0), h), g, lf::Tensor(), 1e-5));
  return h;
}

uint64_t served() { return lf::inspect().counter("matcher", "served").value_or(0); }

struct Churn {
  size_t max_cached = 0;   // bytes cached, the most seen after any iteration
  size_t max_growth = 0;   // bytes in use above the level after warm-up, the most seen
  uint64_t served = 0;     // calls served by plans during the churn
  uint64_t evictions = 0;  // cached blocks returned for the cap during the churn
  int compared = 0, mismatches = 0;
  lf::MemoryStats after_warmup;
};

// Warms the plans up at one shape, then runs every row count 1..1000 once, in a scrambled
// order (337 is prime to 1000), rows x cols f32.
Churn churn(lf::Device d, int64_t cols, const lf::Tensor& g) {
  lf::empty_cache(d);  // what earlier tests left cached, under the default cap
  const lf::Tensor x0 = lf::rand_uniform({7, cols}, 5, -1, 1, lf::DType::f32, d);
  for (int it = 0; it < 12; ++it) {
    (void)layers(x0, g).to_doubles();
    if (it == 6) {
      lf::monitor::Monitor::instance().drain();
      lf::planner::wait_service_idle();
    }
  }
  Churn c;
  c.after_warmup = lf::memory_stats(d);
  const uint64_t s0 = served();
  for (int i = 0; i < kShapes; ++i) {
    const int64_t rows = 1 + (static_cast<int64_t>(i) * 337) % kShapes;
    const lf::Tensor x = lf::rand_uniform({rows, cols}, 1000 + i, -1, 1, lf::DType::f32, d);
    const std::vector<double> got = layers(x, g).to_doubles();
    if (i % 100 == 0) {
      ++c.compared;
      c.mismatches +=
          !lftest::allclose(got, lftest::eager_values([&] { return layers(x, g); }), 1e-4, 1e-5);
    }
    const lf::MemoryStats m = lf::memory_stats(d);
    c.max_cached = std::max(c.max_cached, m.bytes_cached);
    if (m.bytes_in_use > c.after_warmup.bytes_in_use)
      c.max_growth = std::max(c.max_growth, m.bytes_in_use - c.after_warmup.bytes_in_use);
  }
  c.served = served() - s0;
  c.evictions = lf::memory_stats(d).cache_evictions - c.after_warmup.cache_evictions;
  return c;
}

lf::Config churn_config(int cache_mb) {
  lf::Config c = lftest::fresh_unsampled(lf::Mode::on);
  c.cache_max_mb = cache_mb;
  return c;
}

uint64_t note(const lf::PlanInfo& p, const std::string& name) {
  for (const auto& [k, v] : p.details.notes)
    if (k == name) return std::stoull(v);
  return 0;
}
}  // namespace

TEST_CASE(
    "shape churn: 1,000 distinct shapes on the CPU stay under the memory caps, eager-equal and "
    "served") {
  const lf::Config saved = lf::config();
  const lf::Device cpu = lf::Device::cpu();
  lf::set_config_for_testing(churn_config(1));
  const lf::Tensor g = lf::rand_uniform({128}, 2, 0.5, 1.5, lf::DType::f32, cpu);
  const Churn c = churn(cpu, 128, g);
  CHECK(c.compared == 10);
  CHECK(c.mismatches == 0);
  CHECK(c.served > 0);
  CHECK(c.max_cached <= kMiB);
  CHECK(c.evictions > 0);  // the cap was needed: the loop frees more than it
  // What an iteration holds: its input, its result and the temporaries of one op, each at most
  // 1000 x 128 f32 (the CPU pool's class of 512 KiB), with room for the window's pending values.
  CHECK(c.max_growth <= 8 * (kMiB / 2));
  // One shape again: what is in use comes back to the level after warm-up.
  const lf::Tensor x1 = lf::rand_uniform({1, 128}, 9, -1, 1, lf::DType::f32, cpu);
  for (int it = 0; it < 400; ++it) (void)layers(x1, g).to_doubles();
  CHECK(lf::memory_stats(cpu).bytes_in_use <= c.after_warmup.bytes_in_use + kMiB);
  lftest::reset_pipeline();
  lf::set_config_for_testing(saved);
}

LF_CUDA_TEST_CASE(
    "shape churn: 1,000 distinct shapes on the GPU stay under the memory caps, eager-equal and "
    "served") {
  const lf::Config saved = lf::config();
  const lf::Device gpu = lf::Device::cuda(0);
  constexpr int kCapMb = 8;
  lf::set_config_for_testing(churn_config(kCapMb));
  const lf::Tensor g = lf::rand_uniform({256}, 2, 0.5, 1.5, lf::DType::f32, gpu);
  const Churn c = churn(gpu, 256, g);
  MESSAGE("GPU churn: most cached ", c.max_cached >> 10, " KiB, most in use above warm-up ",
          c.max_growth >> 10, " KiB, block evictions ", c.evictions, ", pool trims ",
          lf::memory_stats(gpu).pool_trims);
  CHECK(c.compared == 10);
  CHECK(c.mismatches == 0);
  CHECK(c.served > 0);
  CHECK(c.evictions > 0);
  // The block cache keeps at most the cap; the stream-ordered pool is trimmed back to the cap
  // once it holds twice the cap unused, looked at every MiB returned; 64 MiB more for what a
  // trim cannot release (the pool's granularity, partly used chunks, frees still in flight).
  // Without the cap the block cache keeps a block of every size: hundreds of MiB here.
  CHECK(c.max_cached <= 3 * kCapMb * kMiB + 64 * kMiB);
  // One shape again, long enough that the sets of the churn's shapes are idle (kIdleRuns):
  // they are freed, and what is in use comes back to the level after warm-up.
  const lf::Tensor x1 = lf::rand_uniform({1, 256}, 9, -1, 1, lf::DType::f32, gpu);
  const std::vector<double> want = lftest::eager_values([&] { return layers(x1, g); });
  const uint64_t s1 = served();
  for (int it = 0; it < 400; ++it)
    REQUIRE(lftest::allclose(layers(x1, g).to_doubles(), want, 1e-4, 1e-5));
  CHECK(served() > s1);
  const lf::MemoryStats end = lf::memory_stats(gpu);
  CHECK(end.bytes_in_use <= c.after_warmup.bytes_in_use + kMiB);
  uint64_t set_evictions = 0;
  int cuda_plans = 0;
  for (const lf::PlanInfo& p : lf::inspect().plans) {
    if (p.device != "cuda") continue;
    MESSAGE("plan ", p.id, " ", p.state, ": ", note(p, "binding_sets"), " sets, ",
            note(p, "binding_set_evictions"), " evicted, ", p.hits, " hits");
    if (p.state != "active" && p.state != "sampling") CHECK(note(p, "binding_sets") == 0);
    ++cuda_plans;
    CHECK(note(p, "binding_sets") <= 12);
    set_evictions += note(p, "binding_set_evictions");
  }
  CHECK(cuda_plans > 0);
  CHECK(set_evictions > 0);
  lftest::reset_pipeline();
  lf::set_config_for_testing(saved);
}
