#pragma once
// A hand-made Plan for matcher tests: it matches a recorded op sequence and runs the window
// eagerly (writing every value), so the matcher's mechanics are tested apart from fusion.
#include <functional>
#include <optional>

#include "runtime/executor.hpp"
#include "runtime/plan.hpp"
#include "test_util.hpp"

namespace lftest {

class RecordingPlan : public livefuse::Plan {
 public:
  bool run(livefuse::Window& w, const std::vector<std::pair<int, int>>&) override {
    ++runs;
    if (fail_next) {
      fail_next = false;
      throw livefuse::Error("[test] injected failure");
    }
    if (decline) return false;
    if (always_cold) w.cold_run = true;  // as a plan that captures a graph every run
    if (w.early.launched()) {  // an early launch is taken by the completion that follows it
      ++early_taken;
      w.early = {};
    }
    livefuse::Stream s = livefuse::Stream::current(w.device);
    for (size_t j = 0; j < w.calls.size(); ++j)
      livefuse::Executor::run_eager_into(w.calls[j], w.outputs[j], s);
    return true;
  }
  bool writes(int op, int) const override { return !hidden_op || op != *hidden_op; }
  // With `early`, the plan "launches" at every window's first call (nothing really runs early:
  // run() still computes the window eagerly), so the matcher's bookkeeping can be checked.
  livefuse::EarlyLaunch launch_early(const std::vector<livefuse::Tensor>& externals,
                                     const livefuse::Window&) override {
    if (!early) return {};
    ++early_launched;
    for (const livefuse::Tensor& e : externals) early_all_bound &= e.defined();
    return {0, 1, 1};
  }
  void cancel_early(const livefuse::EarlyLaunch&) override { ++early_cancelled; }
  bool early = false, early_all_bound = true;
  int early_launched = 0, early_taken = 0, early_cancelled = 0;
  int runs = 0;
  bool decline = false, fail_next = false, always_cold = false;
  std::optional<int> hidden_op;  // an intermediate the plan "keeps in registers"
};

// Forgets every hot sequence, planned candidate and installed plan (the configuration in force
// is kept), so the next loop starts the pipeline from scratch. The monitor takes its options
// (LIVEFUSE_HOT ...) from `next` when given, else from the configuration with LIVEFUSE_SETTLE=0:
// sequences go to the planner as soon as they are hot, because these tests' loops are short and
// test what plans do. When plans form is tested by tests/monitor/test_settle.cpp, the decoder
// suite's plan counts and the user programs (default configuration).
void reset_pipeline(const livefuse::Config* next = nullptr);
// A fresh pipeline (reset_pipeline) and the process configuration in mode m with plans kept
// unsampled (LIVEFUSE_SAMPLE=0), not yet applied: callers set the rest, then
// set_config_for_testing.
livefuse::Config fresh_unsampled(livefuse::Mode m);
// `c` with sequences handed to the planner as soon as they are hot (LIVEFUSE_SETTLE=0).
livefuse::Config unsettled(livefuse::Config c);

// Builds a plan from the calls that `body` makes: records (op, attrs, dtypes, wiring).
std::shared_ptr<RecordingPlan> record_plan(const std::function<void()>& body);

// A test with hand-made plans only: LIVEFUSE=on, an empty plan table, and the monitor paused so
// that it does not hand the test's loops to the planner. Clears and resumes at the end.
struct HandMadePlans {
  HandMadePlans();
  ~HandMadePlans();
};

// The values `f` computes with LIVEFUSE=off (the configuration in force is restored).
std::vector<double> eager_values(const std::function<livefuse::Tensor()>& f);

// A matcher counter now (inspect(), group "matcher").
uint64_t matcher_counter(const char* name);
// Memory the runtime holds on `d`, in use or cached for reuse.
int64_t held_bytes(livefuse::Device d);

}  // namespace lftest
