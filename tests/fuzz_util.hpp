#pragma once
// The differential fuzzes' common loop (tests/decoder/test_decoder_fuzz.cpp,
// tests/bert/test_bert_fuzz.cpp): each random program runs with LIVEFUSE=off, then with fusion
// on from an empty plan table, and the two must agree; fusion must have engaged.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "livefuse/config.hpp"
#include "livefuse/inspect.hpp"
#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "runtime/faults.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/plan.hpp"
#include "tests/test_util.hpp"

namespace lftest::fuzz {

// An empty plan table, a fresh monitor and planner: what a new process starts from.
inline void reset_pipeline(livefuse::Device dev) {
  livefuse::synchronize(dev);
  livefuse::monitor::Monitor::instance().reset();
  livefuse::planner::wait_service_idle();
  livefuse::planner::reset_service_for_testing();
  livefuse::PlanTable::get().clear_for_testing();
}

// Waits until the monitor has taken every event and the planner has nothing left to do: a
// program calls this once past its warm-up, so that the rest of it runs served whatever the
// host's pace (planning is asynchronous).
inline void settle_planner() {
  livefuse::monitor::Monitor::instance().drain();
  livefuse::planner::wait_service_idle();
}

// `base` in mode m, planned as soon as hot (the programs are short) and, unless `sampled`,
// with plans kept unsampled.
inline livefuse::Config with_mode(const livefuse::Config& base, livefuse::Mode m, bool sampled) {
  livefuse::Config c = base;
  c.mode = m;
  c.settle = false;
  if (!sampled) c.sample = 0;
  return c;
}
// ... with fusion on, with the program's switches.
template <class P>
livefuse::Config on_for(const livefuse::Config& base, const P& p) {
  livefuse::Config c = with_mode(base, livefuse::Mode::on, p.sampled);
  p.switches.apply(c);
  return c;
}

// A setting of a LIVEFUSE_* switch, named as the variable would give it.
struct Setting {
  const char* name;
  void (*set)(livefuse::Config&);
};

// Now and then a program runs with a switch away from its default: a feature off by default on,
// a fusion's off switch off (the decode fuzz under LIVEFUSE_GEMV_NORM=2 found a graph that could
// not be launched twice, session 40). Each group with probability 1/32, one of its settings; drawn
// from a stream of their own, so a seed's program is what it was. Switches read per plan, per
// run or per call only (the monitor's are read again by reset_pipeline).
class Switches {
 public:
  Switches() = default;  // none
  explicit Switches(uint64_t seed) {
    std::mt19937_64 rng(seed * 0x9FB21C651E98DF25ull + 17);
    for (size_t g = 0; g < std::size(kGroups); ++g)
      if (rng() % 32 == 0) chosen_.push_back({g, static_cast<size_t>(rng() % kGroups[g].size())});
  }
  void apply(livefuse::Config& c) const {
    for (const auto& [g, k] : chosen_) kGroups[g][k].set(c);
  }
  // ", LIVEFUSE_X=v, ..." or "".
  std::string describe() const {
    std::string d;
    for (const auto& [g, k] : chosen_) d += std::string(", ") + kGroups[g][k].name;
    return d;
  }

 private:
  using C = livefuse::Config;
  static inline const std::vector<Setting> kGroups[] = {
      {{"LIVEFUSE_ATTENTION=0", [](C& c) { c.attention = 0; }},
       {"LIVEFUSE_ATTENTION=1", [](C& c) { c.attention = 1; }}},
      {{"LIVEFUSE_GEMM_SIBLINGS=0", [](C& c) { c.gemm_siblings = false; }}},
      {{"LIVEFUSE_ROTARY=0", [](C& c) { c.rotary = false; }}},
      {{"LIVEFUSE_SEAM=0", [](C& c) { c.seam = false; }}},
      {{"LIVEFUSE_GEMV=0", [](C& c) { c.gemv = false; }}},
      {{"LIVEFUSE_GEMM_TC=1", [](C& c) { c.gemm_tc = true; }}},
      {{"LIVEFUSE_GEMV_NORM=0", [](C& c) { c.gemv_norm = 0; }},
       {"LIVEFUSE_GEMV_NORM=2", [](C& c) { c.gemv_norm = 2; }}},
      {{"LIVEFUSE_GEMV_PAIR=0", [](C& c) { c.gemv_pair = 0; }},
       {"LIVEFUSE_GEMV_PAIR=2", [](C& c) { c.gemv_pair = 2; }}},
      {{"LIVEFUSE_SPLIT_K_ROWS=0", [](C& c) { c.split_k_rows = false; }}},
      {{"LIVEFUSE_ROW_EARLY_LOADS=0", [](C& c) { c.row_early_loads = false; }}},
      {{"LIVEFUSE_WRITE_BATCH=0", [](C& c) { c.write_batch = false; }}},
      {{"LIVEFUSE_APPEND=0", [](C& c) { c.append = false; }}},
      {{"LIVEFUSE_ATTENTION_APPEND=0", [](C& c) { c.attention_append = false; }}},
      {{"LIVEFUSE_FAMILY_GRAPH=0", [](C& c) { c.family_graph = false; }}},
      {{"LIVEFUSE_FAMILY_RECORD=0", [](C& c) { c.family_record = false; }}},
      {{"LIVEFUSE_CUDA_CACHE=0", [](C& c) { c.cuda_cache = false; }}},
      {{"LIVEFUSE_DECODE_LEAN=0", [](C& c) { c.decode_lean = false; }}},
      {{"LIVEFUSE_DECODE_TC=1", [](C& c) { c.decode_tc = true; }}},
      {{"LIVEFUSE_DECODE_STREAM_KEYS=0", [](C& c) { c.decode_stream_keys = 0; }},
       {"LIVEFUSE_DECODE_STREAM_KEYS=1", [](C& c) { c.decode_stream_keys = 1; }}},
      {{"LIVEFUSE_PACK_CACHE=0", [](C& c) { c.pack_cache = false; }}},
      {{"LIVEFUSE_GRAPHS=0", [](C& c) { c.graphs = false; }}},
      // Appended, so that the groups before it draw for every seed what they drew before.
      {{"LIVEFUSE_GEMM_F32X3=1", [](C& c) { c.gemm_f32x3 = true; }}},
      {{"LIVEFUSE_GEMV_ROTARY=0", [](C& c) { c.gemv_rotary = false; }}},
      {{"LIVEFUSE_INFER_MEMO=0", [](C& c) { c.infer_memo = false; }}},
  };
  std::vector<std::pair<size_t, size_t>> chosen_;  // (group, setting)
};

// The seeds to run: `programs` from `first` on, or <env>_PROGRAMS of them from <env>_FIRST on;
// <env>_SEED=S alone (what a failure names); <env>_SEEDS=a,b,c those, in that order (a failure
// that needs earlier programs in the process, bisected).
inline std::vector<uint64_t> seeds(const std::string& env, int programs, uint64_t first) {
  if (const char* one = std::getenv((env + "_SEED").c_str()))
    return {std::strtoull(one, nullptr, 10)};
  if (const char* list = std::getenv((env + "_SEEDS").c_str())) {
    std::vector<uint64_t> s;
    for (const char* c = list; *c;) {
      char* end = nullptr;
      s.push_back(std::strtoull(c, &end, 10));
      c = *end ? end + 1 : end;
    }
    return s;
  }
  if (const char* n = std::getenv((env + "_PROGRAMS").c_str())) programs = std::atoi(n);
  if (const char* f = std::getenv((env + "_FIRST").c_str())) first = std::strtoull(f, nullptr, 10);
  std::vector<uint64_t> s;
  for (int i = 0; i < std::max(1, programs); ++i) s.push_back(first + static_cast<uint64_t>(i));
  return s;
}

// How far fusion on may stand from off: the dtype's rounding of a whole forward (a fused kernel
// keeps in f32 what eager rounds between ops), relative to the output's largest value
// (close_to_scale).
inline double tolerance(livefuse::DType t) {
  return t == livefuse::DType::f32 ? 1e-4 : t == livefuse::DType::f16 ? 2e-2 : 6e-2;
}

// A program's bad call: x plus a tensor whose shape does not broadcast with it. True when it
// threw livefuse::Error, as it must -- in either mode, and without changing anything the
// program holds (the fuzzes' later values check that).
inline bool bad_call_throws(const livefuse::Tensor& x) {
  try {
    (void)livefuse::add(x, livefuse::zeros({3, 5}, x.dtype(), x.device()));
  } catch (const livefuse::Error&) {
    return true;
  }
  return false;
}

// What a program run gives: each output's values, read at once (a sync point) or left pending and
// read later, all pending ones together; and its bad calls that did not throw.
class Results {
 public:
  explicit Results(size_t n) : values(n), calls_(n) {}
  void take(size_t i, livefuse::Tensor t, bool read_now) {
    if (read_now)
      values[i] = t.to_doubles();
    else
      pending_.emplace_back(i, std::move(t));
  }
  void read_pending() {
    for (auto& [i, t] : pending_) values[i] = t.to_doubles();
    pending_.clear();
  }

  // The op calls counted while each output's request ran (a window is counted when it ends) and
  // how many of them plans served: whether fusion was engaged for the request that failed.
  void note_calls(size_t i, uint64_t calls, uint64_t served) { calls_[i] = {calls, served}; }
  std::string served(size_t i) const {
    const auto [calls, by_plans] = i < calls_.size() ? calls_[i] : std::pair<uint64_t, uint64_t>{};
    return "plans served " + std::to_string(by_plans) + " of the " + std::to_string(calls) +
           " calls counted while it ran";
  }

  std::vector<std::vector<double>> values;
  int errors_missed = 0;

 private:
  std::vector<std::pair<size_t, livefuse::Tensor>> pending_;
  std::vector<std::pair<uint64_t, uint64_t>> calls_;
};

// How `on` first disagrees with `off` -- a bad call that did not throw, an output of another
// size, one not close_to_scale at the dtype's tolerance -- naming the output by label(i); empty
// when they agree.
template <class Label>
std::string first_disagreement(const Results& off, const Results& on, livefuse::DType dtype,
                               Label label) {
  if (off.errors_missed || on.errors_missed)
    return "a call with shapes that do not broadcast did not throw (" +
           std::to_string(off.errors_missed) + " off, " + std::to_string(on.errors_missed) + " on)";
  for (size_t i = 0; i < off.values.size(); ++i) {
    const std::vector<double>&want = off.values[i], &got = on.values[i];
    std::ostringstream s;
    size_t at = 0;
    double scale = 0;
    if (got.size() != want.size())
      s << label(i) << " gave " << got.size() << " values, want " << want.size();
    else if (!close_to_scale(got, want, tolerance(dtype), &at, &scale))
      s << label(i) << " (" << on.served(i) << ") value " << at << " got " << got[at] << " want "
        << want[at] << " (largest |value| " << scale << ")"
        << (std::isnan(got[at]) && std::isnan(want[at])
                ? "; NaN with fusion off too: no finite result to compare"
                : "");
    if (!s.str().empty()) return s.str();
  }
  return {};
}

// The process's graph captures that a step ended by throwing (a kernel still compiling for the
// shapes: the window ran eagerly) and that were discarded for memory they left held (the plan
// launches directly since), as "; N graph captures abandoned, M discarded"; "" when none.
inline uint64_t captures_holding_memory() {
  return livefuse::find_counter(livefuse::counters(), "graphs", "captures_holding_memory").value_or(0);
}
inline std::string abandoned_captures() {
  const auto groups = livefuse::counters();
  const uint64_t n = livefuse::find_counter(groups, "graphs", "captures_abandoned").value_or(0);
  const uint64_t h =
      livefuse::find_counter(groups, "graphs", "captures_holding_memory").value_or(0);
  if (!n && !h) return {};
  return "; " + std::to_string(n) + " graph captures abandoned, " + std::to_string(h) +
         " discarded for memory left held";
}

// Now and then a plan's run stops part-way, as when a step's kernel is still compiling for the
// shapes at hand (the `step` fault point, runtime/faults.hpp): the window runs eagerly and must
// give eager's values. For each of a program's `calls`, -1 (none) or the step points to pass
// before the stop (fewer than `most`: a call's step points); drawn from a stream of its own, so a
// seed's program is what it was before.
inline std::vector<int> random_stops(uint64_t seed, size_t calls, int most = 40) {
  std::mt19937_64 rng(seed * 0xD1B54A32D192ED03ull + 11);
  std::vector<int> stops(calls, -1);
  for (int& s : stops)
    if (rng() % 100 < 8) s = static_cast<int>(rng() % static_cast<uint64_t>(most));
  return stops;
}

// Now and then a plan's run fails outright (the `run` fault point, as a launch error would): the
// plan is marked failed with the reason, the window runs eagerly, and the program goes on with
// eager's values, its later windows served by other plans or run eagerly. One program in
// `one_in`, at one call of its last quarter (-1: none: the calls after it are the program's served
// share lost); drawn from a stream of its own, so a seed's program is what it was before.
inline int random_failure(uint64_t seed, size_t calls, int one_in = 4) {
  std::mt19937_64 rng(seed * 0xA24BAED4963EE407ull + 5);
  if (calls < 4 || rng() % static_cast<uint64_t>(one_in) != 0) return -1;
  const size_t quarter = calls / 4;
  return static_cast<int>(calls - quarter + rng() % quarter);
}

// Arms, for the call it spans, one stop (skip < 0: none) and, when `fail`, one failed run;
// whatever is left of them is cleared after.
class FaultScope {
 public:
  explicit FaultScope(int skip, bool fail = false) {
    if (skip >= 0) livefuse::faults::inject(livefuse::faults::Point::step, 1, skip);
    if (fail) livefuse::faults::inject(livefuse::faults::Point::run, 1);
  }
  ~FaultScope() {
    livefuse::faults::clear(livefuse::faults::Point::step);
    livefuse::faults::clear(livefuse::faults::Point::run);
  }
  FaultScope(const FaultScope&) = delete;
  FaultScope& operator=(const FaultScope&) = delete;
};

// Programs, op calls and calls served by plans over a fuzz run.
struct Tally {
  size_t programs = 0, engaged = 0;  // engaged: programs with calls served
  uint64_t calls = 0, served = 0;
  uint64_t declined = 0;  // windows a plan declined: its run stopped part-way (random_stops)
  uint64_t failed = 0;    // windows whose plan failed while running (random_failure)

  double served_share() const { return calls ? double(served) / double(calls) : 0.0; }
  // A check that never engaged fusion proves nothing: most programs must have been served, and
  // most of their calls; and over several programs some runs stopped part-way, and over many
  // some failed (a quarter of the programs arm a failure: 24 without one are ~0.1%). And no graph was
  // discarded for memory a step allocated while it was captured: every value a step writes is
  // bound in the plan's sets (the discard keeps results right, but that plan loses its graphs).
  void check_engaged() const {
    CHECK(engaged * 4 >= programs * 3);
    CHECK(served_share() >= 0.5);
    if (programs >= 4) CHECK(declined > 0);
    if (programs >= 24) CHECK(failed > 0);
    CHECK_MESSAGE(captures_holding_memory() == 0, "graph captures discarded for memory left held: a value a "
                                                  "step writes has no bound memory");
  }
};

// A program that failed, run again from an empty plan table in the state the process is in: as
// it ran, then with one switch at a time (each twice: planning is asynchronous, so a run may
// meet other plans), each run's verdict a MESSAGE. Whether it fails again says whether it needs
// the earlier programs (the process's memory, caches and compiled kernels); which switch makes
// it pass names the fusion that gives it; LIVEFUSE_VERIFY names the plan whose values differ
// from eager. With LIVEFUSE_FUZZ_REPORT_DIR set, the report of the failing run and of the
// verifying one (every plan, its shapes and verdict) are written there.
template <class P, class M, class Run, class Differ, class R>
void diagnose(livefuse::Device dev, const livefuse::Config& saved, const P& p, const M& m,
              const R& want, Run run, Differ differ) {
  const char* dir = std::getenv("LIVEFUSE_FUZZ_REPORT_DIR");
  const auto report = [&](const char* what) {
    if (!dir) return;
    const std::string path =
        std::string(dir) + "/seed" + std::to_string(p.seed) + "-" + what + ".json";
    livefuse::write_report(path, false);
    MESSAGE("report: " << path);
  };
  report("failed");
  const Setting variants[] = {
      {"as it ran", [](livefuse::Config&) {}},
      {"LIVEFUSE_VERIFY=1000000", [](livefuse::Config& c) { c.verify = 1000000; }},
      {"LIVEFUSE_ATTENTION=0", [](livefuse::Config& c) { c.attention = 0; }},
      {"LIVEFUSE_GRAPHS=0", [](livefuse::Config& c) { c.graphs = false; }},
      {"LIVEFUSE_FAMILY_GRAPH=0", [](livefuse::Config& c) { c.family_graph = false; }},
      {"LIVEFUSE_FAMILY_RECORD=0", [](livefuse::Config& c) { c.family_record = false; }},
      {"LIVEFUSE_CUDA_CACHE=0", [](livefuse::Config& c) { c.cuda_cache = false; }},
      {"LIVEFUSE_GEMM_SIBLINGS=0", [](livefuse::Config& c) { c.gemm_siblings = false; }},
      {"LIVEFUSE_SPLIT_K_ROWS=0", [](livefuse::Config& c) { c.split_k_rows = false; }},
      {"LIVEFUSE_FUSION=0", [](livefuse::Config& c) { c.fusion = false; }},
  };
  for (const Setting& v : variants)
    for (int k = 0; k < 2; ++k) {
      livefuse::Config c = on_for(saved, p);
      v.set(c);
      livefuse::set_config_for_testing(c);
      reset_pipeline(dev);
      // The runs as it ran on the timeline (each request an instant "fuzz" / "request"), from
      // an empty buffer: the process's first events would have filled it.
      const bool timeline = dir && &v == &variants[0];
      if (timeline) livefuse::trace::reset_for_testing(true);
      const auto got = run(p, m);
      livefuse::synchronize(dev);
      const std::string f = differ(p, want, got);
      MESSAGE("program " << p.seed << " again, " << std::string(v.name) << ": "
                         << (f.empty() ? "passes" : f));
      if (timeline) {
        const std::string path = std::string(dir) + "/seed" + std::to_string(p.seed) + "-again" +
                                 std::to_string(k) + (f.empty() ? "-passed" : "-failed") +
                                 ".trace.json";
        livefuse::write_trace(path);
        livefuse::trace::reset_for_testing(false);
        MESSAGE("timeline: " << path);
      }
      if (c.verify && k == 0) report("verify");
    }
}

// For each seed: make_program(seed) (with describe() and `sampled`), make_model(program, dev),
// then run(program, model) with LIVEFUSE=off and again with fusion on; differ(program, off, on)
// names the first disagreement (empty: none).
template <class MakeProgram, class MakeModel, class Run, class Differ>
Tally differential(livefuse::Device dev, const std::vector<uint64_t>& seeds,
                   MakeProgram make_program, MakeModel make_model, Run run, Differ differ) {
  const livefuse::Config saved = livefuse::config();
  const livefuse::MatcherCounters& ctr = livefuse::matcher_counters();
  Tally t;
  for (const uint64_t seed : seeds) {
    const auto p = make_program(seed);
    CAPTURE(p.describe());
    const auto m = make_model(p, dev);
    livefuse::set_config_for_testing(with_mode(saved, livefuse::Mode::off, p.sampled));
    const auto want = run(p, m);
    livefuse::set_config_for_testing(on_for(saved, p));
    reset_pipeline(dev);
    const uint64_t calls0 = ctr.calls, served0 = ctr.served, declined0 = ctr.plan_declined,
                   failed0 = ctr.flush_error;
    const auto got = run(p, m);
    livefuse::synchronize(dev);
    const std::string failure = differ(p, want, got);
    CHECK_MESSAGE(failure.empty(), failure);
    if (!failure.empty()) diagnose(dev, saved, p, m, want, run, differ);
    ++t.programs;
    t.calls += ctr.calls - calls0;
    t.served += ctr.served - served0;
    t.declined += ctr.plan_declined - declined0;
    t.failed += ctr.flush_error - failed0;
    t.engaged += ctr.served > served0;
  }
  livefuse::set_config_for_testing(saved);
  reset_pipeline(dev);
  return t;
}

}  // namespace lftest::fuzz
