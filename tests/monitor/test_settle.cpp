// When the detector hands a hot sequence to the planner (monitor/structure_table.cpp, the note
// "a shape mix settles before the planner sees it"): once, with its family, for a layer whose
// length moves every forward; at the second forward for one whose shapes stay; never for a run
// seen once; after `settled_run` repeats for a loop that never pauses. Each case also runs with
// settling off, to show the hand-overs it saves.
#include <map>

#include "detector_util.hpp"
#include "monitor/detector.hpp"
#include "monitor/synthetic_trace.hpp"
#include "test_util.hpp"

using namespace livefuse;
using namespace livefuse::monitor;
using lfdet::forward;
using lfdet::opts;
using lfdet::run;

namespace {

MonitorOptions with_settle(bool settle) {
  MonitorOptions o = opts();
  o.settle = settle;
  return o;
}

// Hand-overs so far, by signature.
std::map<uint64_t, std::vector<Candidate>> emitted(Detector& d) {
  std::map<uint64_t, std::vector<Candidate>> out;
  for (Candidate& c : d.take_emitted()) out[c.signature].push_back(std::move(c));
  return out;
}

// The tracked candidate counted most often: the layer of a forward.
Candidate layer_of(Detector& d) {
  std::vector<Candidate> c = d.candidates(false);
  REQUIRE(!c.empty());
  return *std::max_element(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
    return a.occurrences < b.occurrences;
  });
}

}  // namespace

TEST_CASE("settle: a layer whose length moves every forward is handed over once, with its family") {
  for (const bool settle : {true, false}) {
    CAPTURE(settle);
    Detector d(with_settle(settle));
    EventSynth s;
    const int D = 16;
    std::vector<synth::SynthLayer> layers;
    for (int l = 0; l < 6; ++l) layers.push_back(synth::layer_weights(s, D));
    // A decode-like loop: each forward one longer (lengths over the seam's kSeamMinRows).
    for (int S = 12; S < 22; ++S) forward(s, layers, s.value({S, D}), S, D);
    run(d, s);
    const Candidate layer = layer_of(d);
    REQUIRE(layer.shapes.family.defined());
    const auto handed = emitted(d);
    const auto it = handed.find(layer.signature);
    REQUIRE(it != handed.end());
    if (settle) {
      // Once, and then with the family: the plan made from it serves every length.
      REQUIRE(it->second.size() == 1);
      CHECK(it->second[0].shapes.family.defined());
    } else {
      // One tuple, two, then the family: three plans where one serves.
      CHECK(it->second.size() >= 3);
      CHECK_FALSE(it->second[0].shapes.family.defined());
    }
  }
}

TEST_CASE("settle: an encoder's layer is handed over once, when a forward came round") {
  size_t handovers[2] = {0, 0};
  for (const bool settle : {true, false}) {
    CAPTURE(settle);
    Detector d(with_settle(settle));
    EventSynth s;
    const int S = 16, D = 16;
    std::vector<synth::SynthLayer> layers;
    for (int l = 0; l < 12; ++l) layers.push_back(synth::layer_weights(s, D));
    const ValueId input = s.value({S, D});
    forward(s, layers, input, S, D);
    run(d, s);
    // Hot within the first forward (12 layers) but not handed over: no pause yet. (That
    // forward's unit is still another rotation of the layer, which the seam replaces in the
    // next: handed over, it would be a plan of a cut the detector abandons.)
    auto first = emitted(d);
    CHECK(first.empty() == settle);
    for (int it = 0; it < 4; ++it) forward(s, layers, input, S, D);
    run(d, s);
    auto later = emitted(d);
    const Candidate layer = layer_of(d);
    REQUIRE(later.count(layer.signature) == 1);
    CHECK(later.at(layer.signature).size() == 1);
    for (auto& [sig, cs] : first) later[sig].insert(later[sig].end(), cs.begin(), cs.end());
    for (const auto& [sig, cs] : later) handovers[settle ? 0 : 1] += cs.size();
  }
  CHECK(handovers[0] < handovers[1]);
}

TEST_CASE("settle: a run seen once (a prompt, weights prepared at load) is not handed over") {
  Detector d(with_settle(true));
  EventSynth s;
  const int S = 16, D = 16;
  std::vector<synth::SynthLayer> layers;
  for (int l = 0; l < 12; ++l) layers.push_back(synth::layer_weights(s, D));
  forward(s, layers, s.value({S, D}), S, D);
  // Then other work for good: a short loop of its own.
  ValueId x = s.value({4, 8});
  for (int it = 0; it < 64; ++it) {
    const ValueId a = s.call(OpId::exp, {x}, {4, 8});
    const ValueId b = s.call(OpId::neg, {a}, {4, 8});
    s.release(a);
    s.release(x);
    x = b;
    s.sync();
  }
  run(d, s);
  const auto handed = emitted(d);
  bool layer_handed = false, loop_handed = false;
  for (const auto& [sig, cs] : handed) {
    layer_handed |= cs[0].size() > 4;
    loop_handed |= cs[0].size() <= 4 && cs[0].ops[0].op == OpId::exp;
  }
  CHECK_FALSE(layer_handed);
  CHECK(loop_handed);  // the loop is (after settled_run repeats: it never pauses)
}

TEST_CASE("settle: a loop with nothing else in it is handed over after settled_run repeats") {
  for (const bool settle : {true, false}) {
    CAPTURE(settle);
    const MonitorOptions o = with_settle(settle);
    Detector d(o);
    EventSynth s;
    ValueId x = s.value({4, 8});
    const auto step = [&] {
      const ValueId a = s.call(OpId::exp, {x}, {4, 8});
      const ValueId b = s.call(OpId::neg, {a}, {4, 8});
      const ValueId c = s.call(OpId::sigmoid, {b}, {4, 8});
      s.release(a);
      s.release(b);
      s.release(x);
      x = c;
      s.sync();
    };
    const int early = o.hot + 3;
    for (int it = 0; it < early; ++it) step();
    run(d, s);
    CHECK(d.take_emitted().size() == (settle ? 0u : 1u));
    for (int it = early; it < 2 + o.hot + static_cast<int>(o.settled_run) + 2; ++it) step();
    run(d, s);
    CHECK(d.take_emitted().size() == (settle ? 1u : 0u));
  }
}

TEST_CASE("settle: a mix that never settles is still handed over, once per max_wait") {
  // Two dims moving independently (no line through them: no family) and a sync between
  // occurrences (no pause either: the same rhythm throughout).
  for (const bool settle : {true, false}) {
    CAPTURE(settle);
    const MonitorOptions o = with_settle(settle);
    Detector d(o);
    EventSynth s;
    const int n = 3 * static_cast<int>(o.max_wait);
    for (int it = 0; it < n; ++it) {
      const int64_t a = 2 + it, b = 3 + int64_t{it} * it;  // every tuple new, no three on a line
      const ValueId x = s.value({a, b});
      const ValueId e = s.call(OpId::exp, {x}, {a, b});
      const ValueId g = s.call(OpId::neg, {e}, {a, b});
      s.release(e);
      s.sync();
      s.release(g);
    }
    run(d, s);
    const size_t handed = d.take_emitted().size();
    if (settle) {
      CHECK(handed >= 1);
      CHECK(handed <= static_cast<size_t>(n / o.max_wait) + 1);
    } else {
      CHECK(handed > static_cast<size_t>(n / o.max_wait) + 1);  // one per new tuple
    }
  }
}
