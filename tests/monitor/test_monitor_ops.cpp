// The monitor behind the real executor (CPU): what lf:: programs turn into.
#include <algorithm>
#include <random>

#include "monitor_fixture.hpp"

using namespace lfmon;
using livefuse::monitor::DimRef;
using livefuse::monitor::WireRef;

TEST_CASE("monitor: a 12-layer encoder loop gives exactly one layer-shaped candidate") {
  setup();
  const int64_t S = 8, D = 16;
  std::vector<EncoderLayer> layers;
  for (int l = 0; l < 12; ++l) layers.push_back(make_layer(D, 100 + 20 * l));
  const lf::Tensor input = lf::rand_uniform({S, D}, 7);
  for (int it = 0; it < 4; ++it) {
    const std::vector<float> out = encoder_forward(input, layers);
    REQUIRE(out.size() == static_cast<size_t>(S));
    catch_up();
  }
  const auto c = drained_candidates();
  for (const Candidate& cand : c) MESSAGE(describe(cand));
  REQUIRE(c.size() == 1);
  const Candidate& layer = c[0];
  REQUIRE(layer.size() == kLayerOps);
  std::vector<lf::OpId> ops;
  for (const auto& op : layer.ops) ops.push_back(op.op);
  CHECK(ops == kLayerOpIds);  // starts at the first layer_norm, ends at the residual add
  CHECK(layer.ops[0].inputs[0] == WireRef{WireRef::Kind::external, 0, 0});   // x
  CHECK(layer.ops[16].inputs[0] == WireRef{WireRef::Kind::external, 0, 0});  // x again
  CHECK(layer.externals.size() == 17);  // x + 16 weights: each layer's own are slots, not ids
  CHECK(layer.hot);
  CHECK(layer.occurrences >= 11 + 3 * 12 - 2);
  CHECK(layer.stream == lf::Stream::current(input.device()).id());
  for (const auto& l : layer.liveness) {
    INFO("op ", l.op);
    CHECK(l.must_materialize() == (l.op == kLayerOps - 1));
  }
  const auto ctr = Monitor::instance().counters();
  CHECK(ctr.events >= 4 * (12 * kLayerOps + 2));
  CHECK(ctr.drops == 0);
  CHECK(ctr.windows >= 1);
  CHECK(ctr.candidates_emitted >= 1);
}

TEST_CASE("monitor: two interleaved patterns give two candidates") {
  setup();
  const int64_t S = 4, D = 8;
  const lf::Tensor w = lf::rand_uniform({D, D}, 1), b = lf::rand_uniform({D}, 2);
  const lf::Tensor g = lf::rand_uniform({D}, 3), beta = lf::rand_uniform({D}, 4);
  // Each block at least kLongRun ops (monitor/stream_window.hpp, note 2).
  auto A = [&](const lf::Tensor& x) {  // 8 ops
    lf::Tensor h = lf::gelu(lf::linear(x, w, b));
    return lf::add(lf::sqrt(lf::abs(lf::neg(lf::exp(lf::mul(h, x))))), x);
  };
  auto B = [&](const lf::Tensor& x) {  // 9 ops
    lf::Tensor h = lf::layer_norm(x, g, beta);
    lf::Tensor t = lf::tanh(lf::relu(h));
    return lf::sigmoid(lf::abs(lf::neg(lf::exp(lf::maximum(lf::sub(t, h), x)))));
  };
  std::mt19937 rng(5);
  lf::Tensor x = lf::rand_uniform({S, D}, 9);
  const char* start = "AABBAABB";
  for (int k = 0; k < 60; ++k) {
    const bool a = k < 8 ? start[k] == 'A' : rng() % 2 == 0;
    x = a ? A(x) : B(x);
  }
  (void)x.to_floats();
  const auto c = drained_candidates();
  for (const Candidate& cand : c) MESSAGE(describe(cand));
  REQUIRE(c.size() == 2);
  std::vector<lf::OpId> firsts{c[0].ops[0].op, c[1].ops[0].op};
  std::sort(firsts.begin(), firsts.end());
  CHECK(firsts == std::vector<lf::OpId>{lf::OpId::layer_norm, lf::OpId::linear});
  for (const Candidate& cand : c)
    CHECK(cand.size() == (cand.ops[0].op == lf::OpId::linear ? 8u : 9u));
}

TEST_CASE("monitor: a varying sequence length is one structure with the right varying dim") {
  setup();
  const int64_t D = 16;
  std::vector<EncoderLayer> layers;
  for (int l = 0; l < 4; ++l) layers.push_back(make_layer(D, 300 + 20 * l));
  // Lengths over kSeamMinRows (monitor/stream_window.hpp, note 3): one rotation of the layer.
  for (int64_t S : {12, 16, 20, 16, 12, 20, 12, 16, 20}) {
    (void)encoder_forward(lf::rand_uniform({S, D}, S), layers);
    catch_up();
  }
  const auto c = drained_candidates();
  for (const Candidate& cand : c) MESSAGE(describe(cand));
  // With the seam (monitor/stream_window.hpp, note 3): [prelude, first norm], the layers each
  // ending with the next one's first norm, and the last layer; the unit repeats in a forward.
  REQUIRE(c.size() == 3);
  const Candidate& unit = *std::max_element(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
    return a.occurrences < b.occurrences;
  });
  const auto& sp = unit.shapes;
  // The three lengths are one shape family (runtime/plan.hpp): no tuple is kept as such.
  REQUIRE(sp.family.defined());
  CHECK(sp.tuples.empty());
  CHECK(sp.family.n_min == 12);
  CHECK(sp.family.n_max == 20);
  // The layer's inputs -- the normalised x and the residual x, both [S, D] -- vary along axis
  // 0, not axis 1; no weight dim varies; every varying dim is S.
  const auto vd = sp.varying_dims();
  CHECK(std::find(vd.begin(), vd.end(), DimRef{DimRef::Kind::external, 0, 0, 0}) != vd.end());
  CHECK(std::find(vd.begin(), vd.end(), DimRef{DimRef::Kind::external, 0, 0, 1}) == vd.end());
  int varying_externals = 0;
  for (const DimRef& d : vd)
    if (d.kind == DimRef::Kind::external) {
      ++varying_externals;
      CHECK(d.axis == 0);
    }
  CHECK(varying_externals == 2);
  for (size_t k = 0; k < sp.layout.size(); ++k) {
    std::vector<int64_t> values;
    for (int64_t n : {12, 16, 20}) {
      std::vector<int64_t> t;
      sp.family.tuple(n, t);
      values.push_back(t[k]);
    }
    const bool is_seq = values == std::vector<int64_t>{12, 16, 20};
    CHECK(sp.varying[k] == is_seq);
    CHECK((is_seq || (values[0] == values[1] && values[1] == values[2])));
  }
  CHECK(vd.size() == 2 + kLayerOps + 2);  // both xs, each output once, [H, S, S] twice more
}

TEST_CASE("monitor: random op streams give no candidates") {
  setup();
  const int64_t S = 4, D = 8;
  std::mt19937 rng(17);
  std::vector<lf::Tensor> pool;
  for (int k = 0; k < 8; ++k) pool.push_back(lf::rand_uniform({S, D}, 40 + k));
  for (int k = 0; k < 4000; ++k) {
    lf::Tensor& a = pool[rng() % pool.size()];
    const lf::Tensor& b = pool[rng() % pool.size()];
    lf::Tensor y;
    switch (rng() % 8) {
      case 0:
        y = lf::relu(a);
        break;
      case 1:
        y = lf::tanh(a);
        break;
      case 2:
        y = lf::neg(a);
        break;
      case 3:
        y = lf::sigmoid(a);
        break;
      case 4:
        y = lf::add(a, b);
        break;
      case 5:
        y = lf::mul(a, b);
        break;
      case 6:
        y = lf::sub(a, b);
        break;
      default:
        y = lf::maximum(a, b);
        break;
    }
    pool[rng() % pool.size()] = y;
    if (rng() % 64 == 0) (void)y.to_floats();
    if (k % 256 == 0) catch_up();
  }
  const auto c = drained_candidates();
  for (const Candidate& cand : c) MESSAGE(describe(cand));
  CHECK(c.empty());
  const auto ctr = Monitor::instance().counters();
  CHECK(ctr.events >= 4000);
  CHECK(ctr.drops == 0);
}

TEST_CASE("monitor: after a phase change the old candidates fade") {
  MonitorOptions o;
  o.half_life_log2 = 9;  // counts halve every 512 ops of the stream
  setup(o);
  const int64_t S = 4, D = 8;
  std::vector<EncoderLayer> layers;
  for (int l = 0; l < 4; ++l) layers.push_back(make_layer(D, 500 + 20 * l));
  for (int it = 0; it < 8; ++it) {
    (void)encoder_forward(lf::rand_uniform({S, D}, it), layers);
    catch_up();
  }
  auto c = drained_candidates();
  REQUIRE(c.size() == 1);
  const uint64_t layer_sig = c[0].signature;
  // Phase 2: another loop, for many half-lives.
  const lf::Tensor w = lf::rand_uniform({D, D}, 77);
  lf::Tensor x = lf::rand_uniform({S, D}, 78);
  for (int k = 0; k < 2500; ++k) {
    x = lf::add(lf::silu(lf::matmul(x, w)), x);
    if (k % 100 == 0) catch_up();
  }
  (void)x.to_floats();
  c = drained_candidates();
  REQUIRE(c.size() == 1);
  CHECK(c[0].signature != layer_sig);
  CHECK(c[0].size() == 3);
  for (const Candidate& t : Monitor::instance().candidates(false))
    if (t.signature == layer_sig) CHECK_FALSE(t.hot);
  CHECK(Monitor::instance().counters().candidates_cooled >= 1);
}

TEST_CASE("monitor: a consumer gets candidates and cold notices") {
  struct Recorder : livefuse::monitor::CandidateConsumer {
    std::vector<uint64_t> hot, cold;
    void on_candidate(const Candidate& c) override { hot.push_back(c.signature); }
    void on_candidate_cold(uint64_t sig, uint32_t) override { cold.push_back(sig); }
  } rec;
  MonitorOptions o;
  o.half_life_log2 = 8;
  setup(o);
  Monitor::instance().set_consumer(&rec);
  const int64_t S = 4, D = 8;
  lf::Tensor x = lf::rand_uniform({S, D}, 1);
  for (int k = 0; k < 30; ++k) x = lf::tanh(lf::add(lf::exp(x), x));
  (void)x.to_floats();
  REQUIRE(Monitor::instance().drain());
  REQUIRE(rec.hot.size() == 1);
  for (int k = 0; k < 1500; ++k) {
    x = lf::neg(lf::sigmoid(lf::mul(x, x)));
    if (k % 100 == 0) catch_up();
  }
  (void)x.to_floats();
  REQUIRE(Monitor::instance().drain());
  Monitor::instance().set_consumer(nullptr);
  CHECK(rec.hot.size() == 2);
  CHECK(std::find(rec.cold.begin(), rec.cold.end(), rec.hot[0]) != rec.cold.end());
}

TEST_CASE("monitor: a steady loop makes it quiet (probes only); a new loop is still found") {
  // monitor.cpp, "quiet recording": after 2^14 events with nothing new turning hot, each
  // thread records one stretch of 4096 events in eight; the first probe that makes a sequence
  // hot ends the quiet.
  setup();
  const int64_t D = 8;
  const lf::Tensor x = lf::rand_uniform({4, D}, 1);
  auto A = [&](const lf::Tensor& v) { return lf::tanh(lf::mul(lf::exp(v), 0.5)); };
  auto B = [&](const lf::Tensor& v) { return lf::sigmoid(lf::relu(lf::add(lf::neg(v), 0.25))); };
  lf::Tensor y = x;
  uint64_t emitted0 = 0;
  bool quiet = false;
  for (int it = 0; it < 200000 && !quiet; ++it) {
    y = A(x);
    if (it % 4096 == 4095) {
      catch_up();
      const auto c = Monitor::instance().counters();
      quiet = c.quiet == 1;
      emitted0 = c.candidates_emitted;
    }
  }
  REQUIRE(quiet);
  // Quiet: one stretch of 4096 events in eight is recorded, the rest skipped (a full cycle of
  // 32768 events here; A costs 6 events an iteration).
  for (int it = 0; it < 32768 / 6 + 1; ++it) y = A(x);
  catch_up();
  const auto q = Monitor::instance().counters();
  CHECK(q.quiet_periods >= 1);
  CHECK(q.quiet_skipped > 0);
  // A new loop: found from the probes, and the monitor records everything again.
  bool found = false;
  for (int it = 0; it < 100000 && !found; ++it) {
    y = B(x);
    if (it % 1024 == 1023) {
      catch_up();
      found = Monitor::instance().counters().candidates_emitted > emitted0;
    }
  }
  CHECK(found);
  CHECK(Monitor::instance().counters().quiet == 0);
}

TEST_CASE("monitor: known sequences turning hot and cold again do not keep it from going quiet") {
  // Two loops in alternating phases (a prefill and a decode, two models in turn): each goes cold
  // during the other's phase and hot again in its own. Once both are known, their coming and
  // going is the program's steady state: the monitor goes quiet all the same.
  MonitorOptions o;
  o.half_life_log2 = 8;  // a loop not seen for a few hundred ops goes cold
  setup(o);
  const lf::Tensor x = lf::rand_uniform({4, 8}, 1);
  auto A = [&](const lf::Tensor& v) { return lf::tanh(lf::mul(lf::exp(v), 0.5)); };
  auto B = [&](const lf::Tensor& v) { return lf::sigmoid(lf::relu(lf::add(lf::neg(v), 0.25))); };
  lf::Tensor y = x;
  bool quiet = false;
  const uint64_t cooled0 = Monitor::instance().counters().candidates_cooled;
  int phases = 0;
  for (int phase = 0; phase < 60 && !quiet; ++phase, ++phases) {
    for (int it = 0; it < 1500; ++it) y = phase % 2 ? B(x) : A(x);
    catch_up();
    quiet = Monitor::instance().counters().quiet == 1;
  }
  INFO("quiet after " << phases << " phases");
  CHECK(quiet);
  // They did come and go (how many times before it went quiet depends on the machine's speed:
  // a count taken a few phases in could already be the last).
  CHECK(Monitor::instance().counters().candidates_cooled > cooled0);
}
