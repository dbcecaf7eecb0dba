// The detector on served windows: a window a plan ran reaches it as one event and is replayed
// as its calls (runtime/trace_sink.hpp); counts, shapes and liveness must come out as if the
// calls had been reported one by one.
#include "detector_util.hpp"
#include "monitor/detector.hpp"
#include "monitor/synthetic_trace.hpp"
#include "runtime/plan.hpp"
#include "test_util.hpp"

using namespace livefuse;
using namespace livefuse::monitor;
namespace lfmon = livefuse::monitor::synth;
using lfdet::opts;
using lfdet::run;
using lfdet::run_counted;

TEST_CASE("detector: served windows keep their structure hot; without them it cools") {
  // A served window is one event with the plan's signature (runtime/trace_sink.hpp): it counts
  // for the structure, and the stream's clock still advances by its ops.
  for (const bool serve : {true, false}) {
    CAPTURE(serve);
    MonitorOptions o = opts();
    o.half_life_log2 = 8;  // 256 ops
    o.settle = false;      // handed over at once: 8 repeats, no pause
    Detector d(o);
    EventSynth s;
    const ValueId x = s.value({64});
    auto step = [&] {
      const ValueId a = s.call(OpId::exp, {x}, {64});
      const ValueId b = s.call(OpId::neg, {a}, {64});
      const ValueId c = s.call(OpId::sigmoid, {b}, {64});
      s.release(a);
      s.release(b);
      s.sync();
      s.release(c);
    };
    for (int it = 0; it < 8; ++it) step();
    auto c = run(d, s);
    REQUIRE(c.size() == 1);
    const uint64_t sig = c[0].signature;
    const uint64_t occurrences = c[0].occurrences;
    REQUIRE(d.take_emitted().size() == 1);
    // 4000 windows of 3 ops: about 47 half-lives of the stream's clock.
    for (int it = 0; it < 4000; ++it) {
      if (serve) {
        s.window_open();
        s.served(sig, 0, 3);
      } else {
        // What the stream looks like to a monitor that hears nothing of served windows: other
        // work (here, syncs) goes on.
        for (int k = 0; k < 3; ++k) s.sync();
      }
      s.sync();
      if (it % 64 == 0) {
        for (const TraceEvent& ev : s.events()) d.consume(ev);
        s.events().clear();
        d.sweep();
      }
    }
    c = run(d, s);
    MonitorCounters ctr;
    d.fill(ctr);
    if (serve) {
      REQUIRE(c.size() == 1);
      CHECK(c[0].signature == sig);
      CHECK(c[0].occurrences == occurrences + 4000);
      CHECK(ctr.served == 4000);
      CHECK(ctr.candidates_cooled == 0);
      CHECK(d.take_cooled().empty());
    } else {
      CHECK(c.empty());
      CHECK(ctr.candidates_cooled == 1);
    }
    CHECK(ctr.candidates_emitted == 1);
  }
}

TEST_CASE("detector: a served window is replayed as its calls op by op would have been") {
  // Two detectors see one program: one hears every call, the other hears windows 6.. as served
  // events (what the runtime sends when a plan ran them). Their structures must agree.
  auto feed = [](bool serve) {
    Detector d(opts());
    EventSynth s;
    const Shape sh{4, 32};
    const ValueId x = s.value(sh);
    const ValueId g = s.value({32});
    uint64_t sig = 0;
    for (int it = 0; it < 24; ++it) {
      ValueId c;
      if (!serve || it < 6) {
        // Temporaries die after their last use, as a replayed window's releases are placed.
        const ValueId a = s.call(OpId::exp, {x}, sh);
        const ValueId b = s.call(OpId::reshape, {a}, {128}, lfmon::ints({128}));
        s.release(a);
        const ValueId r = s.call(OpId::reshape, {b}, sh, lfmon::ints({4, 32}));
        s.release(b);
        c = s.call(OpId::mul, {r, g}, sh);
        s.release(r);
      } else {
        if (sig == 0) {
          const auto c0 = run(d, s);
          REQUIRE(c0.size() == 1);
          sig = c0[0].signature;
        }
        s.window_open();
        const std::vector<ValueId> outs = {s.value(sh), s.value({128}), s.value(sh), s.value(sh)};
        ShapeTupleKey key;  // externals (x, g), then the outputs
        for (int64_t v : {4, 32, 32, 4, 32, 128, 4, 32, 4, 32}) key.add(v);
        s.served(sig, 0, 4, {x, g}, outs, 0b0111, key.h);
        c = outs[3];
      }
      s.sync();
      s.release(c);
    }
    return run_counted(d, s);
  };
  const auto [by_call, ctr_call] = feed(false);
  const auto [served, ctr_served] = feed(true);
  CHECK(ctr_served.served == 18);
  CHECK(ctr_served.replayed == 18 * 4);
  CHECK(ctr_served.events == ctr_call.events);
  CHECK(ctr_served.releases == ctr_call.releases);
  REQUIRE(by_call.size() == 1);
  REQUIRE(served.size() == 1);
  const Candidate &a = by_call[0], &b = served[0];
  CHECK(a.signature == b.signature);
  CHECK(a.occurrences == b.occurrences);
  CHECK(a.count == doctest::Approx(b.count));
  REQUIRE(a.shapes.tuples.size() == 1);
  REQUIRE(b.shapes.tuples.size() == 1);
  CHECK(a.shapes.tuples[0].dims == b.shapes.tuples[0].dims);
  CHECK(a.shapes.tuples[0].count == b.shapes.tuples[0].count);
  REQUIRE(a.liveness.size() == b.liveness.size());
  for (size_t f = 0; f < a.liveness.size(); ++f) {
    CAPTURE(f);
    CHECK(a.liveness[f].observed == b.liveness[f].observed);
    CHECK(a.liveness[f].used_after == b.liveness[f].used_after);
    CHECK(a.liveness[f].alive_at_end == b.liveness[f].alive_at_end);
    CHECK(a.liveness[f].released_inside == b.liveness[f].released_inside);
  }
  REQUIRE(a.ops.size() == b.ops.size());
  for (size_t k = 0; k < a.ops.size(); ++k) CHECK(a.ops[k].attrs == b.ops[k].attrs);
}

TEST_CASE("detector: a served window with more external slots than one event holds") {
  // 20 external slots (five concats of 6, 5, 4, 3 and 2 inputs): 16 ids in the served event,
  // 4 in a served_ids event before it.
  constexpr int kExt = 20;
  const int widths[] = {6, 5, 4, 3, 2};
  auto feed = [&](bool serve) {
    Detector d(opts());
    EventSynth s;
    std::vector<ValueId> w;
    for (int e = 0; e < kExt; ++e) w.push_back(s.value({8}));
    uint64_t sig = 0;
    for (int it = 0; it < 12; ++it) {
      std::vector<ValueId> outs;
      if (!serve || it < 5) {
        int e = 0;
        for (int n : widths) {
          const ValueId* p = &w[e];
          ValueId o = 0;
          const Attrs dim0 = lfmon::ints({0});
          switch (n) {
            case 6: o = s.call(OpId::concat, {p[0], p[1], p[2], p[3], p[4], p[5]}, {48}, dim0); break;
            case 5: o = s.call(OpId::concat, {p[0], p[1], p[2], p[3], p[4]}, {40}, dim0); break;
            case 4: o = s.call(OpId::concat, {p[0], p[1], p[2], p[3]}, {32}, dim0); break;
            case 3: o = s.call(OpId::concat, {p[0], p[1], p[2]}, {24}, dim0); break;
            default: o = s.call(OpId::concat, {p[0], p[1]}, {16}, dim0); break;
          }
          outs.push_back(o);
          e += n;
        }
      } else {
        if (sig == 0) {
          const auto c0 = run(d, s);
          REQUIRE(c0.size() == 1);
          REQUIRE(c0[0].externals.size() == kExt);
          sig = c0[0].signature;
        }
        s.window_open();
        for (int n : widths) outs.push_back(s.value({8 * n}));
        ShapeTupleKey key;
        for (int e = 0; e < kExt; ++e) key.add(8);
        for (int n : widths) key.add(8 * n);
        s.served(sig, 0, 5, w, outs, 0, key.h);
      }
      s.sync();
      for (ValueId o : outs) s.release(o);
    }
    return run_counted(d, s);
  };
  const auto [by_call, ctr_call] = feed(false);
  const auto [served, ctr_served] = feed(true);
  CHECK(ctr_served.replayed == 7 * 5);
  CHECK(ctr_served.events == ctr_call.events);
  CHECK(ctr_served.releases == ctr_call.releases);
  REQUIRE(by_call.size() == 1);
  REQUIRE(served.size() == 1);
  CHECK(by_call[0].signature == served[0].signature);
  CHECK(by_call[0].occurrences == served[0].occurrences);
}

TEST_CASE("detector: a value released while a window is open outlived the op after it") {
  // The matcher reports a window's calls only when it ends; its first call was made when the
  // window opened, so a release seen meanwhile came after it (liveness: alive at the end).
  for (const bool open : {true, false}) {
    CAPTURE(open);
    Detector d(opts());
    EventSynth s;
    const ValueId x = s.value({64});
    for (int it = 0; it < 8; ++it) {
      const ValueId a = s.call(OpId::exp, {x}, {64});
      const ValueId b = s.call(OpId::neg, {a}, {64});
      s.release(a);
      if (open) s.window_open();
      s.release(b);  // the program dropped it after making the window's first call
      s.served(0x1234, 0, 4);  // a plan the detector does not know: a barrier, nothing counted
      s.sync();
    }
    const auto c = run(d, s);
    REQUIRE(c.size() == 1);
    REQUIRE(c[0].liveness.size() == 2);
    const ValueLiveness& l = c[0].liveness[1];
    CHECK(l.observed > 0);
    CHECK(l.released_inside == 0);
    if (open)
      CHECK(l.alive_at_end == l.observed);
    else
      CHECK(l.alive_at_end == 0);
  }
}
