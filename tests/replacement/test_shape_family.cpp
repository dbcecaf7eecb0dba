// Extents as parameters (runtime/plan.hpp, "shape families"): a decode loop over a KV cache
// grown by concat meets its structure at a new length every step. One plan, planned once,
// serves all of them: the monitor fits a family to the tuples, the planner plans once, and
// windows of any length of the family are known shapes (served events, not calls one by one).
#include <string>
#include <utility>

#include "livefuse/inspect.hpp"
#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "test_plan_util.hpp"

namespace lf = livefuse;

namespace {
constexpr int64_t kDim = 32;
constexpr int kSteps = 240;

struct Model {
  lf::Tensor g, w, b;
  explicit Model(lf::Device d)
      : g(lf::rand_uniform({kDim}, 3, 0.5, 1.5, lf::DType::f32, d)),
        w(lf::rand_uniform({kDim, kDim}, 4, -0.2, 0.2, lf::DType::f32, d)),
        b(lf::rand_uniform({kDim}, 5, -0.1, 0.1, lf::DType::f32, d)) {}

  // One decode step: the new row joins the cache, attends over it, and the result goes
  // through a pointwise tail the CPU planner fuses.
  lf::Tensor step(const lf::Tensor& x, lf::Tensor& cache) const {
    const lf::Tensor h = lf::layer_norm(x, g, lf::Tensor(), 1e-5);  // [1, kDim]
    cache = cache.defined() ? lf::concat({cache, h}, 0) : h;       // [L, kDim]
    const lf::Tensor p = lf::softmax(lf::matmul(h, lf::transpose(cache, 0, 1)), 0.125);
    const lf::Tensor o = lf::matmul(p, cache);  // [1, kDim]
    return lf::gelu(lf::add(lf::mul(lf::linear(o, w, b), 0.5), x));
  }
};

struct Run {
  std::vector<std::vector<double>> outputs;  // every 20th step
  uint64_t served_late = 0, calls_late = 0;  // the last 60 steps of the loop
  int64_t held_growth = 0;                   // held_bytes over the last 60 steps
};

// `sequences` sequences of kSteps / sequences steps, each from an empty cache: the first step
// of each takes another path (no concat), as a decoder's prefill does.
Run decode(lf::Device d, int sequences = 1) {
  const Model m(d);
  lf::Tensor cache;
  lf::Tensor x = lf::rand_uniform({1, kDim}, 7, -1, 1, lf::DType::f32, d);
  Run r;
  uint64_t served0 = 0, calls0 = 0;
  for (int s = 0; s < kSteps; ++s) {
    if (s % (kSteps / sequences) == 0) cache = lf::Tensor();
    if (s == kSteps - 60) {
      lf::monitor::Monitor::instance().drain();
      lf::planner::wait_service_idle();
      served0 = lftest::matcher_counter("served"), calls0 = lftest::matcher_counter("calls");
      r.held_growth = -lftest::held_bytes(d);
    }
    x = m.step(x, cache);
    if (s % 20 == 19) r.outputs.push_back(x.to_doubles());
  }
  r.served_late = lftest::matcher_counter("served") - served0;
  r.calls_late = lftest::matcher_counter("calls") - calls0;
  r.held_growth += lftest::held_bytes(d);
  return r;
}
}  // namespace

TEST_CASE("shape family: one plan serves a concat-cache decode loop at 240 lengths, eager-equal") {
  const lf::Config saved = lf::config();
  const lf::Device cpu = lf::Device::cpu();
  lf::Config c = lftest::fresh_unsampled(lf::Mode::off);
  lf::set_config_for_testing(c);
  const Run want = decode(cpu);
  c.mode = lf::Mode::on;
  lf::set_config_for_testing(c);
  const uint64_t published0 = lf::inspect().counter("planner", "published").value_or(0);
  const Run got = decode(cpu);
  REQUIRE(got.outputs.size() == want.outputs.size());
  for (size_t k = 0; k < got.outputs.size(); ++k) {
    INFO("step " << 20 * k + 19);
    CHECK(lftest::allclose(got.outputs[k], want.outputs[k], 1e-4, 1e-5));
  }
  const lf::Snapshot snap = lf::inspect();
  const uint64_t published = snap.counter("planner", "published").value_or(0) - published0;
  MESSAGE("plans published: ", published, ", calls served in the last 60 steps: ", got.served_late,
          " of ", got.calls_late, ", families: ",
          snap.counter("monitor", "shape_families").value_or(0));
  // A plan per length would be ~240 here (or a re-plan per new length up to the tuple cap).
  CHECK(published <= 4);
  CHECK(snap.counter("monitor", "shape_families").value_or(0) >= 1);
  CHECK(got.calls_late > 0);
  CHECK(static_cast<double>(got.served_late) >= 0.9 * static_cast<double>(got.calls_late));
  bool shown = false;
  for (const lf::PlanInfo& p : snap.plans)
    for (const auto& [k, v] : p.details.notes)
      if (k == "shape family" && p.state == "active") {
        MESSAGE("plan ", p.id, ": ", v);
        shown = shown || v.find("last 239:") != std::string::npos;  // n: the cache before the step
      }
  CHECK(shown);
  // Bounded memory: over the last 60 lengths the runtime holds no more than eager does (the
  // cache's growth) plus a fixed slack -- nothing is kept per length.
  MESSAGE("held bytes grew by ", got.held_growth, " fused, ", want.held_growth, " eager");
  CHECK(got.held_growth <= want.held_growth + (int64_t{16} << 10));
  lftest::reset_pipeline();
  lf::set_config_for_testing(saved);
}

TEST_CASE("shape family: a loop whose first step takes another path is served whole, concat included") {
  // Three sequences: each starts without a cache (no concat), so the ops around the concat have
  // a second successor and predecessor once per sequence. That rare path does not cut the
  // common one into pieces (monitor/stream_window.cpp, kMinorShare): one plan holds the step.
  const lf::Config saved = lf::config();
  const lf::Device cpu = lf::Device::cpu();
  lf::Config c = lftest::fresh_unsampled(lf::Mode::off);
  lf::set_config_for_testing(c);
  const Run want = decode(cpu, 3);
  c.mode = lf::Mode::on;
  lf::set_config_for_testing(c);
  const Run got = decode(cpu, 3);
  REQUIRE(got.outputs.size() == want.outputs.size());
  for (size_t k = 0; k < got.outputs.size(); ++k)
    CHECK(lftest::allclose(got.outputs[k], want.outputs[k], 1e-4, 1e-5));
  CHECK(static_cast<double>(got.served_late) >= 0.9 * static_cast<double>(got.calls_late));
  bool whole = false;
  for (const lf::PlanInfo& p : lf::inspect().plans) {
    if (p.state != "active") continue;
    MESSAGE("plan ", p.id, " (", p.ops.size(), " ops): ", p.name);
    whole |= p.name.find("concat") != std::string::npos && p.ops.size() >= 8;
    // On CUDA the steps around the concat and the attention replay as graphs at every length;
    // which ones is the same plan-level decision on any device.
    for (const auto& [k, v] : p.details.notes)
      if (k == "family stretches") {
        MESSAGE("  ", v);
        CHECK(v.find("direct") != std::string::npos);
        CHECK(v.find("graph") != std::string::npos);
      }
  }
  CHECK(whole);
  lftest::reset_pipeline();
  lf::set_config_for_testing(saved);
}

// On CUDA the whole decode step replays as one graph at every length: the concat and the
// attention over the cache are patched into it each run (graphs/patchable_graph.hpp), from their
// launches recorded without a capture (kernels/cuda/launch_record.hpp) or captured at each run
// (LIVEFUSE_FAMILY_RECORD=0). Results equal eager's in each way and with the stretches
// (LIVEFUSE_FAMILY_GRAPH=0).
LF_CUDA_TEST_CASE("shape family: on CUDA one graph a run serves every length, patched, eager-equal") {
  const lf::Config saved = lf::config();
  const lf::Device gpu = lf::Device::cuda(0);
  lf::Config c = lftest::fresh_unsampled(lf::Mode::off);
  c.attention = 1;  // the fused attention at every length (a kernel of ours: patchable)
  lf::set_config_for_testing(c);
  const Run want = decode(gpu);
  for (const auto& [family_graph, family_record] : {std::pair{true, true}, {true, false}, {false, true}}) {
    CAPTURE(family_graph);
    CAPTURE(family_record);
    lftest::reset_pipeline();
    c.mode = lf::Mode::on;
    c.family_graph = family_graph;
    c.family_record = family_record;
    lf::set_config_for_testing(c);
    const Run got = decode(gpu);
    REQUIRE(got.outputs.size() == want.outputs.size());
    for (size_t k = 0; k < got.outputs.size(); ++k) {
      INFO("step " << 20 * k + 19);
      CHECK(lftest::allclose(got.outputs[k], want.outputs[k], 1e-4, 1e-5));
    }
    CHECK(static_cast<double>(got.served_late) >= 0.9 * static_cast<double>(got.calls_late));
    uint64_t patched = 0, recorded = 0;
    bool noted = false;
    for (const lf::PlanInfo& p : lf::inspect().plans)
      for (const auto& [k, v] : p.details.notes)
        if (k == "family stretches") MESSAGE("plan ", p.id, " (", p.state, "): ", v);
        else if (k == "family graph") {
          MESSAGE("plan ", p.id, " (", p.state, "): ", v);
          noted = true;
          const size_t at = v.find("patched ");
          if (at != std::string::npos) patched += std::stoull(v.substr(at + 8));
          const size_t rec = v.find("recorded launches ");
          if (rec != std::string::npos) recorded += std::stoull(v.substr(rec + 18));
        }
    CHECK(noted);
    // The last 60 steps are served, each a run of the step's plan: patched but a binding set's
    // first sights of each kernel chain (run directly, then captured; the attention's key splits
    // change the chain as the cache grows). Recorded: all patched runs but the first of each
    // recorded shape, which checks it against a capture.
    if (family_graph) CHECK(patched >= 40);
    else CHECK(patched == 0);
    if (family_graph && family_record) CHECK(recorded + 8 >= patched);
    else CHECK(recorded == 0);
  }
  lftest::reset_pipeline();
  lf::set_config_for_testing(saved);
}
