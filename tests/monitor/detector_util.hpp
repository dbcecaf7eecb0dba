#pragma once
// Shared by the detector test files: options for short synthetic streams, a synthetic encoder
// forward, and feeding a stream to a detector.
#include <utility>
#include <vector>

#include "monitor/detector.hpp"
#include "monitor/synthetic_trace.hpp"

namespace lfdet {

using livefuse::monitor::Candidate;
using livefuse::monitor::Detector;
using livefuse::monitor::EventSynth;
using livefuse::monitor::MonitorCounters;
using livefuse::monitor::MonitorOptions;
using livefuse::monitor::TraceEvent;

inline MonitorOptions opts() {
  MonitorOptions o;
  o.hot = 3;
  o.max_segment = 64;
  return o;
}

namespace synth = livefuse::monitor::synth;
using livefuse::OpId;
using livefuse::ValueId;

// prelude (1 op) -> `layers` layers (layer(k, x) -> y) -> head (1 op) -> sync
template <class Layer>
inline void forward_with(EventSynth& s, int layers, ValueId input, int S, int D, Layer layer) {
  ValueId x = s.call(OpId::mul, {input}, {S, D}, [] {
    livefuse::Attrs a;
    a.scalar_operand = true;
    a.push_float(2);
    return a;
  }());
  for (int k = 0; k < layers; ++k) {
    const ValueId y = layer(k, x);
    s.release(x);
    x = y;
  }
  const ValueId out = s.call(OpId::sum, {x}, {S}, synth::ints({1, 0}));
  s.release(x);
  s.sync();
  s.release(out);
}

// The same with synthetic encoder layers.
inline void forward(EventSynth& s, const std::vector<synth::SynthLayer>& layers, ValueId input,
                    int S, int D) {
  forward_with(s, static_cast<int>(layers.size()), input, S, D, [&](int k, ValueId x) {
    return synth::encoder_layer(s, x, layers[static_cast<size_t>(k)], S, D);
  });
}

inline std::vector<Candidate> run(Detector& d, EventSynth& s) {
  for (const TraceEvent& ev : s.events()) d.consume(ev);
  s.events().clear();
  d.flush();
  return d.candidates(true);
}

// run(), plus the detector's counters after it.
inline std::pair<std::vector<Candidate>, MonitorCounters> run_counted(Detector& d, EventSynth& s) {
  auto c = run(d, s);
  MonitorCounters ctr;
  d.fill(ctr);
  return std::make_pair(c, ctr);
}

}  // namespace lfdet
