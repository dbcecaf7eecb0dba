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
    livefuse::Stream s = livefuse::Stream::current(w.device);
    for (size_t j = 0; j < w.calls.size(); ++j)
      livefuse::Executor::run_eager_into(w.calls[j], w.outputs[j], s);
    return true;
  }
  bool writes(int op, int) const override { return !hidden_op || op != *hidden_op; }
  int runs = 0;
  bool decline = false, fail_next = false;
  std::optional<int> hidden_op;  // an intermediate the plan "keeps in registers"
};

// Forgets every hot sequence, planned candidate and installed plan (the configuration in force
// is kept), so the next loop starts the pipeline from scratch.
void reset_pipeline();

// Builds a plan from the calls that `body` makes: records (op, attrs, dtypes, wiring).
std::shared_ptr<RecordingPlan> record_plan(const std::function<void()>& body);

}  // namespace lftest
