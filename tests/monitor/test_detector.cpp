// The detector on synthetic streams: boundaries, structures, shapes, liveness, decay, caps
// (served windows: test_detector_served.cpp).
#include <random>

#include "detector_util.hpp"
#include "monitor/detector.hpp"
#include "monitor/synthetic_trace.hpp"
#include "test_util.hpp"

using namespace livefuse;
using namespace livefuse::monitor;
namespace lfmon = livefuse::monitor::synth;
using lfmon::kEncoderLayerOps;
using lfdet::opts;
using lfdet::run;

using lfdet::forward;

TEST_CASE("detector: a 12-layer loop is one layer-shaped candidate") {
  Detector d(opts());
  EventSynth s;
  const int S = 8, D = 16;
  std::vector<lfmon::SynthLayer> layers;
  for (int l = 0; l < 12; ++l) layers.push_back(lfmon::layer_weights(s, D));
  const ValueId input = s.value({S, D});
  for (int it = 0; it < 4; ++it) forward(s, layers, input, S, D);
  const auto c = run(d, s);
  REQUIRE(c.size() == 1);
  INFO(describe(c[0]));
  CHECK(c[0].size() == kEncoderLayerOps);
  CHECK(c[0].ops.front().op == OpId::layer_norm);
  CHECK(c[0].ops.back().op == OpId::add);
  // The layer input is the first external slot; weights are distinct slots; x is reused.
  CHECK(c[0].ops[0].inputs[0] == WireRef{WireRef::Kind::external, 0, 0});
  CHECK(c[0].ops[16].inputs[0] == WireRef{WireRef::Kind::external, 0, 0});
  CHECK(c[0].externals.size() == 17);
  // 11 repeats in the first pass (layer 1 introduces the program points), 12 afterwards.
  CHECK(c[0].occurrences >= 11 + 3 * 12 - 2);
  CHECK(c[0].shapes.tuples.size() == 1);
  CHECK(c[0].shapes.varying_dims().empty());
  // Liveness: only the layer output escapes (read by the next layer, held by the caller).
  for (const ValueLiveness& l : c[0].liveness) {
    INFO("op ", l.op);
    CHECK(l.must_materialize() == (l.op == kEncoderLayerOps - 1));
  }
}

// Short stretches that occur twice in every layer (two norms, q's and k's rotary) are inner
// repeats, not loops: the layer stays one unit (monitor/stream_window.hpp, note 2).
TEST_CASE("detector: stretches repeated inside a layer do not split it") {
  Detector d(opts());
  EventSynth s;
  const int S = 8, D = 16, Dh = 8;
  std::vector<std::vector<ValueId>> layers;
  for (int l = 0; l < 12; ++l) {
    std::vector<ValueId> w;
    for (const Shape& sh : std::vector<Shape>{{D}, {D, D}, {D, D}, {D, D}, {D, D}, {D}, {4 * D, D},
                                              {4 * D, D}, {D, 4 * D}})
      w.push_back(s.value(sh));
    layers.push_back(w);
  }
  const ValueId input = s.value({S, D}), cos = s.value({S, 1, Dh}), sin = s.value({S, 1, Dh});
  for (int it = 0; it < 4; ++it)
    lfdet::forward_with(s, 12, input, S, D, [&](int k, ValueId x) {
      return lfmon::llama_layer(s, x, layers[static_cast<size_t>(k)], cos, sin, S, D);
    });
  const auto c = run(d, s);
  for (const auto& cand : c) MESSAGE(describe(cand));
  REQUIRE(c.size() == 1);
  CHECK(c[0].size() == lfmon::kLlamaLayerOps);
  CHECK(c[0].ops.front().op == OpId::rms_norm);
  CHECK(c[0].occurrences >= 3 * 12);
}

TEST_CASE("detector: two interleaved patterns give two candidates") {
  for (uint32_t seed : {7u, 8u, 9u, 10u, 11u, 12u, 13u, 14u}) {
    CAPTURE(seed);
    Detector d(opts());
    EventSynth s;
    const int S = 4, D = 8;
    const ValueId w = s.value({D, D}), b = s.value({D});
    auto A = [&](ValueId x) {  // 8 ops
      ValueId h = s.call(OpId::linear, {x, w, b}, {S, D}, lfmon::ints({1, 0}));
      ValueId g = s.call(OpId::gelu, {h}, {S, D});
      ValueId m = s.call(OpId::mul, {g, x}, {S, D});
      ValueId e = s.call(OpId::exp, {m}, {S, D});
      ValueId n = s.call(OpId::neg, {e}, {S, D});
      ValueId a = s.call(OpId::abs, {n}, {S, D});
      ValueId q = s.call(OpId::sqrt, {a}, {S, D});
      ValueId y = s.call(OpId::add, {q, x}, {S, D});
      for (ValueId v : {h, g, m, e, n, a, q}) s.release(v);
      return y;
    };
    auto B = [&](ValueId x) {  // 9 ops
      ValueId h = s.call(OpId::linear, {x, w, b}, {S, D}, lfmon::ints({1, 0}));
      ValueId r = s.call(OpId::relu, {h}, {S, D});
      ValueId t = s.call(OpId::tanh, {r}, {S, D});
      ValueId q = s.call(OpId::sub, {t, h}, {S, D});
      ValueId m = s.call(OpId::maximum, {q, x}, {S, D});
      ValueId e = s.call(OpId::exp, {m}, {S, D});
      ValueId n = s.call(OpId::neg, {e}, {S, D});
      ValueId a = s.call(OpId::abs, {n}, {S, D});
      ValueId y = s.call(OpId::sigmoid, {a}, {S, D});
      for (ValueId v : {h, r, t, q, m, e, n, a}) s.release(v);
      return y;
    };
    // Blocks in varying order (a fixed start that takes every transition twice, then random):
    // A and B are the units. (In a strict alternation A B A B, [A B] would be the unit.) Each
    // is at least kLongRun ops: a shorter block met again at a new offset is a new point (the
    // next test).
    std::mt19937 rng(seed);
    ValueId x = s.value({S, D});
    const char* start = "AABBAABB";
    for (int k = 0; k < 60; ++k) {
      const bool a = k < 8 ? start[k] == 'A' : rng() % 2 == 0;
      const ValueId y = a ? A(x) : B(x);
      s.release(x);
      x = y;
    }
    const auto c = run(d, s);
    if (c.size() != 2)
      for (const auto& cand : c) MESSAGE(describe(cand));
    REQUIRE(c.size() == 2);
    std::vector<size_t> sizes{c[0].size(), c[1].size()};
    std::sort(sizes.begin(), sizes.end());
    CHECK(sizes == std::vector<size_t>{8, 9});
    for (const auto& cand : c) {
      INFO(describe(cand));
      CHECK(cand.ops.front().op == OpId::linear);
    }
  }
}

TEST_CASE("detector: varying sequence length is one structure with the right varying dims") {
  Detector d(opts());
  EventSynth s;
  const int D = 16;
  std::vector<lfmon::SynthLayer> layers;
  for (int l = 0; l < 4; ++l) layers.push_back(lfmon::layer_weights(s, D));
  // Lengths over kSeamMinRows: the seam's cut is the same for all (at 8 rows or fewer the cut
  // falls before each layer's first norm: another rotation of the layer, another structure).
  const int lens[] = {12, 16, 20, 16, 12, 20, 12, 16};
  for (int S : lens) forward(s, layers, s.value({S, D}), S, D);
  const auto c = run(d, s);
  if (c.size() != 3)
    for (const auto& cand : c) MESSAGE(describe(cand));
  // With the seam (monitor/stream_window.hpp, note 3) a forward is [prelude, the first layer's
  // norm], the layers each ending with the next one's first norm, and the last layer (no norm
  // after it): the unit is the one that repeats within a forward.
  REQUIRE(c.size() == 3);
  const Candidate& cand = *std::max_element(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
    return a.occurrences < b.occurrences;
  });
  CHECK(cand.ops.back().op == OpId::layer_norm);
  // The three lengths are one family (runtime/plan.hpp): every tuple entry is base + slope * S.
  const ShapeFamily& f = cand.shapes.family;
  REQUIRE(f.defined());
  CHECK(cand.shapes.tuples.empty());
  CHECK(f.n_min == 12);
  CHECK(f.n_max == 20);
  CHECK(cand.shapes.family_count == cand.occurrences);  // every counted occurrence is a member
  // Every dim that is the sequence length varies (slope 1), nothing else does.
  int n_varying = 0;
  for (size_t k = 0; k < cand.shapes.layout.size(); ++k) {
    const bool seq_dim = f.slope[k] != 0;
    CHECK(cand.shapes.varying[k] == seq_dim);
    CHECK(f.slope[k] == (seq_dim ? 1 : 0));
    n_varying += cand.shapes.varying[k];
  }
  // The normalised x [S, D] (external 0), the residual x [S, D] and every op output have one S,
  // but [H, S, S] (matmul, softmax): two.
  CHECK(n_varying == 2 + kEncoderLayerOps + 2);
  const auto vd = cand.shapes.varying_dims();
  CHECK(vd.front() == DimRef{DimRef::Kind::external, 0, 0, 0});
}

TEST_CASE("detector: a norm that ran over few rows keeps the cut before it (the seam is off there)") {
  // A decoder's prefill (many rows) shares its program points with the decode steps (one row):
  // once a norm's point has run over few rows the seam never moves a cut past it, so prefill
  // and decode cut their layers at the same place (monitor/stream_window.hpp, note 3).
  Detector d(opts());
  EventSynth s;
  const int D = 16;
  std::vector<lfmon::SynthLayer> layers;
  for (int l = 0; l < 4; ++l) layers.push_back(lfmon::layer_weights(s, D));
  for (int S : {1, 16, 1, 1, 16, 1, 1, 16, 1, 1}) forward(s, layers, s.value({S, D}), S, D);
  const auto c = run(d, s);
  REQUIRE_FALSE(c.empty());
  for (const Candidate& cand : c) {
    INFO(describe(cand));
    CHECK(cand.ops.back().op != OpId::layer_norm);
  }
}

TEST_CASE("detector: random streams give no candidates") {
  for (uint32_t seed : {11u, 12u, 13u, 14u}) {
    CAPTURE(seed);
    Detector d(opts());
    EventSynth s;
    const int S = 4, D = 8;
    std::mt19937 rng(seed);
    std::vector<ValueId> pool;
    for (int k = 0; k < 8; ++k) pool.push_back(s.value({S, D}));
    const OpId unary[] = {OpId::relu, OpId::exp, OpId::neg, OpId::tanh, OpId::sigmoid};
    const OpId binary[] = {OpId::add, OpId::mul, OpId::sub, OpId::maximum};
    for (int k = 0; k < 20000; ++k) {
      ValueId y;
      const ValueId a = pool[rng() % pool.size()];
      if (rng() % 2)
        y = s.call(unary[rng() % 5], {a}, {S, D});
      else
        y = s.call(binary[rng() % 4], {a, pool[rng() % pool.size()]}, {S, D});
      const size_t victim = rng() % pool.size();
      s.release(pool[victim]);
      pool[victim] = y;
      if (rng() % 50 == 0) s.sync();
    }
    const auto c = run(d, s);
    for (const auto& cand : c) MESSAGE(describe(cand));
    CHECK(c.empty());
  }
}

TEST_CASE("detector: a phase change makes old candidates fade") {
  MonitorOptions o = opts();
  o.half_life_log2 = 9;  // 512 ops
  Detector d(o);
  EventSynth s;
  const int S = 4, D = 8;
  std::vector<lfmon::SynthLayer> layers;
  for (int l = 0; l < 6; ++l) layers.push_back(lfmon::layer_weights(s, D));
  const ValueId w = s.value({D, D});
  for (int it = 0; it < 10; ++it) forward(s, layers, s.value({S, D}), S, D);
  auto c = run(d, s);
  REQUIRE(c.size() == 1);
  const uint64_t layer_sig = c[0].signature;
  // Phase 2: a different loop, long enough for many half-lives.
  ValueId x = s.value({S, D});
  for (int k = 0; k < 2000; ++k) {
    ValueId h = s.call(OpId::matmul, {x, w}, {S, D});
    ValueId y = s.call(OpId::silu, {h}, {S, D});
    ValueId z = s.call(OpId::add, {y, x}, {S, D});
    s.release(h);
    s.release(y);
    s.release(x);
    x = z;
  }
  c = run(d, s);
  REQUIRE(c.size() == 1);
  CHECK(c[0].signature != layer_sig);
  MonitorCounters ctr;
  d.fill(ctr);
  CHECK(ctr.candidates_cooled >= 1);
  for (const auto& t : d.candidates(false)) CHECK_FALSE((t.signature == layer_sig && t.hot));
}

TEST_CASE("detector: caps evict and count") {
  MonitorOptions o = opts();
  o.max_streams = 2;
  o.max_structures = 4;
  Detector d(o);
  const int S = 4, D = 8;
  // 3 streams: the least recently active window is evicted.
  for (uint32_t st = 0; st < 3; ++st) {
    EventSynth s(st);
    ValueId x = s.value({S, D});
    for (int k = 0; k < 10; ++k) x = s.call(OpId::relu, {x}, {S, D});
    for (const TraceEvent& ev : s.events()) d.consume(ev);
  }
  // Many distinct structures on one stream: only max_structures are kept.
  EventSynth s(7);
  ValueId x = s.value({S, D});
  const OpId ops[] = {OpId::relu,    OpId::exp,  OpId::neg, OpId::tanh,
                      OpId::sigmoid, OpId::silu, OpId::erf};
  for (int p = 0; p < 7; ++p)
    for (int rep = 0; rep < 6; ++rep) {
      x = s.call(ops[p], {x}, {S, D});
      x = s.call(ops[(p + 1) % 7], {x}, {S, D});
      x = s.call(OpId::mul, {x, x}, {S, D});
      s.sync();
    }
  for (const TraceEvent& ev : s.events()) d.consume(ev);
  d.flush();
  MonitorCounters c;
  d.fill(c);
  CHECK(c.windows == 2);
  CHECK(c.window_evictions == 2);
  CHECK(c.structures <= 4);
  CHECK(c.structure_evictions >= 3);
}

TEST_CASE("detector: a head that starts like the layer does not split the layer") {
  Detector d(opts());
  EventSynth s;
  const int S = 8, D = 16;
  std::vector<lfmon::SynthLayer> layers;
  for (int l = 0; l < 12; ++l) layers.push_back(lfmon::layer_weights(s, D));
  const lfmon::SynthLayer head = lfmon::layer_weights(s, D);
  for (int it = 0; it < 5; ++it) {
    ValueId x = s.value({S, D});
    for (const auto& L : layers) {
      const ValueId y = lfmon::encoder_layer(s, x, L, S, D);
      s.release(x);
      x = y;
    }
    // Final norm + a biased projection: the same ops (and tokens) as the layer's first two.
    const ValueId h =
        s.call(OpId::layer_norm, {x, head.w[0], head.w[1]}, {S, D}, lfmon::ln_attrs());
    const ValueId o = s.call(OpId::linear, {h, head.w[2], head.w[3]}, {S, D}, lfmon::ints({1, 0}));
    const ValueId r = s.call(OpId::sum, {o}, {S}, lfmon::ints({1, 0}));
    s.sync();
    for (ValueId v : {x, h, o, r}) s.release(v);
  }
  const auto c = run(d, s);
  for (const auto& cand : c) MESSAGE(describe(cand));
  REQUIRE(c.size() == 2);
  std::vector<size_t> sizes{c[0].size(), c[1].size()};
  std::sort(sizes.begin(), sizes.end());
  CHECK(sizes == std::vector<size_t>{3, kEncoderLayerOps});
}

TEST_CASE("detector: a strict alternation is one unit; a step between syncs is one unit") {
  Detector d(opts());
  EventSynth s;
  const int S = 4, D = 8;
  ValueId x = s.value({S, D});
  for (int k = 0; k < 20; ++k) {
    ValueId a = s.call(OpId::exp, {x}, {S, D});
    ValueId b = s.call(OpId::mul, {a, x}, {S, D});
    ValueId c = s.call(OpId::tanh, {b}, {S, D});
    ValueId e = s.call(OpId::neg, {c}, {S, D});
    ValueId f = s.call(OpId::add, {e, b}, {S, D});
    for (ValueId v : {x, a, b, c, e}) s.release(v);
    x = f;
    if (k % 5 == 4) s.sync();
  }
  auto c = run(d, s);
  REQUIRE(c.size() == 1);
  CHECK(c[0].size() == 5);

  Detector d2(opts());
  EventSynth s2;
  const ValueId w = s2.value({D, D});
  for (int step = 0; step < 6; ++step) {  // a decode step: 3 ops, then the host reads the result
    ValueId t = s2.value({1, D});
    ValueId h = s2.call(OpId::matmul, {t, w}, {1, D});
    ValueId g = s2.call(OpId::silu, {h}, {1, D});
    ValueId o = s2.call(OpId::argmax, {g}, {1}, lfmon::ints({1, 0}), DType::i64);
    s2.sync();
    for (ValueId v : {t, h, g, o}) s2.release(v);
  }
  c = run(d2, s2);
  REQUIRE(c.size() == 1);
  CHECK(c[0].size() == 3);
  CHECK(c[0].ops[2].out_dtypes[0] == DType::i64);
}

namespace {

// BERT's embedding prologue (word + token type + position embeddings, add, add, layer_norm:
// 8 ops), then the layers, then a host read of the output (a sync).
void bert_forward(EventSynth& s, const std::vector<lfmon::SynthLayer>& layers,
                  const std::vector<ValueId>& emb, ValueId mask, int B, int S, int D) {
  const ValueId ids = s.value({B, S}, DType::i64);
  const ValueId words = s.call(OpId::embedding, {emb[0], ids}, {B, S, D});
  const ValueId ts = s.call(OpId::slice, {emb[3]}, {S}, lfmon::ints({0, 0, S, 1}), DType::i64);
  const ValueId types = s.call(OpId::embedding, {emb[1], ts}, {S, D});
  const ValueId ps = s.call(OpId::slice, {emb[4]}, {S}, lfmon::ints({0, 0, S, 1}), DType::i64);
  const ValueId positions = s.call(OpId::embedding, {emb[2], ps}, {S, D});
  const ValueId e0 = s.call(OpId::add, {words, types}, {B, S, D});
  const ValueId e1 = s.call(OpId::add, {e0, positions}, {B, S, D});
  ValueId x = s.call(OpId::layer_norm, {e1, emb[5], emb[6]}, {B, S, D}, lfmon::ln_attrs());
  for (ValueId v : {ids, words, ts, types, ps, positions, e0, e1}) s.release(v);
  for (const auto& L : layers) {
    const ValueId y = lfmon::bert_layer(s, x, L, B, S, D, 4, mask);
    s.release(x);
    x = y;
  }
  s.sync();
  s.release(x);
}

}  // namespace

// Post-LN BERT: the embedding ends with a layer_norm that is the same op as each layer's closing
// layer_norm and is followed by the same ops, so the stream is [embedding 7] (LN [layer 23])^n LN:
// the loop is entered at that layer_norm, and the unit is the layer's 24 ops starting there.
// What must not happen: q/k/v, three identical [linear, reshape, permute] blocks reading one
// input, mistaken for a loop of three (fragments of 2, 3 and 16 ops).
TEST_CASE("detector: a BERT encoder is one 24-op unit per layer, q/k/v included") {
  using lfmon::kBertLayerOps;
  const OpId kUnit[kBertLayerOps] = {
      OpId::layer_norm, OpId::linear,  OpId::reshape, OpId::permute, OpId::linear,
      OpId::reshape,    OpId::permute, OpId::linear,  OpId::reshape, OpId::permute,
      OpId::permute,    OpId::matmul,  OpId::softmax, OpId::matmul,  OpId::permute,
      OpId::contiguous, OpId::reshape, OpId::linear,  OpId::add,     OpId::layer_norm,
      OpId::linear,     OpId::gelu,    OpId::linear,  OpId::add};
  for (const int n_layers : {4, 7, 12})
    for (const bool masked : {false, true}) {
      CAPTURE(n_layers);
      CAPTURE(masked);
      Detector d(opts());
      EventSynth s;
      const int B = 1, S = 8, D = 16, V = 50;
      std::vector<lfmon::SynthLayer> layers;
      for (int l = 0; l < n_layers; ++l) layers.push_back(lfmon::layer_weights(s, D));
      const std::vector<ValueId> emb = {
          s.value({V, D}),           s.value({2, D}), s.value({32, D}), s.value({32}, DType::i64),
          s.value({32}, DType::i64), s.value({D}),    s.value({D})};
      const ValueId mask = masked ? s.value({B, 1, 1, S}) : 0;
      for (int it = 0; it < 5; ++it) bert_forward(s, layers, emb, mask, B, S, D);
      const auto c = run(d, s);
      if (c.size() != 2)
        for (const auto& cand : c) MESSAGE(cand.size(), ": ", describe(cand));
      REQUIRE(c.size() == 2);
      const bool first_is_layer = c[0].size() == kBertLayerOps;
      const Candidate& layer = c[first_is_layer ? 0 : 1];
      const Candidate& prologue = c[first_is_layer ? 1 : 0];
      INFO(describe(layer));
      REQUIRE(layer.size() == kBertLayerOps);
      for (int k = 0; k < kBertLayerOps; ++k) CHECK(layer.ops[k].op == kUnit[k]);
      // q, k and v read the layer_norm's output, and so does the residual add.
      for (int k : {1, 4, 7})
        CHECK(layer.ops[k].inputs[0] == WireRef{WireRef::Kind::internal, 0, 0});
      CHECK(layer.ops[18].inputs[1] == WireRef{WireRef::Kind::internal, 0, 0});
      // Every layer of every pass is one occurrence; the first one defines the path.
      CHECK(layer.occurrences >= static_cast<uint64_t>(5 * n_layers - 1));
      CHECK(layer.shapes.tuples.size() == 1);
      CHECK(prologue.size() == 7);
      CHECK(prologue.ops.front().op == OpId::embedding);
    }
}

TEST_CASE("detector: a prologue that also reads the loop's input does not split the loop") {
  // The first block's linear reads x right after the prologue's relu did (near use), the later
  // ones read x fresh: the first block is different wiring and stays with the prologue.
  for (const int readers : {0, 1, 2}) {
    CAPTURE(readers);
    Detector d(opts());
    EventSynth s;
    const int S = 4, D = 8;
    std::vector<ValueId> ws, bs;
    for (int k = 0; k < 6; ++k) ws.push_back(s.value({D, D})), bs.push_back(s.value({D}));
    for (int it = 0; it < 5; ++it) {
      const ValueId in = s.value({S, D});
      ValueId x = s.call(OpId::exp, {in}, {S, D});
      std::vector<ValueId> side;
      if (readers >= 1) side.push_back(s.call(OpId::relu, {x}, {S, D}));
      if (readers >= 2) side.push_back(s.call(OpId::tanh, {x}, {S, D}));
      for (int k = 0; k < 6; ++k) {
        const ValueId h = s.call(OpId::linear, {x, ws[k], bs[k]}, {S, D}, lfmon::ints({1, 0}));
        const ValueId g = s.call(OpId::gelu, {h}, {S, D});
        const ValueId m = s.call(OpId::mul, {g, x}, {S, D});
        const ValueId e = s.call(OpId::exp, {m}, {S, D});
        const ValueId y = s.call(OpId::add, {e, x}, {S, D});
        for (ValueId v : {h, g, m, e, x}) s.release(v);
        x = y;
      }
      const ValueId out = s.call(OpId::sum, {x}, {S}, lfmon::ints({1, 0}));
      s.sync();
      for (ValueId v : {x, out, in}) s.release(v);
      for (ValueId v : side) s.release(v);
    }
    const auto c = run(d, s);
    for (const auto& cand : c) MESSAGE(describe(cand));
    bool block = false;
    for (const auto& cand : c) {
      if (cand.ops.front().op == OpId::exp) continue;  // the prologue (with the first block)
      CHECK(cand.size() == 5);
      CHECK(cand.ops.front().op == OpId::linear);
      CHECK(cand.ops.back().op == OpId::add);
      CHECK(cand.occurrences >= 5 * 5 - 2);
      block = true;
    }
    CHECK(block);
  }
}
