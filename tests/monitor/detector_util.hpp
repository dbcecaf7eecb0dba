#pragma once
// Shared by the detector test files: options for short synthetic streams, and feeding a stream
// to a detector.
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
