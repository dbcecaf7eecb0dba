// drain() is how tests and the pipeline's reset know the monitor has caught up: when it returns,
// the candidates of every event it consumed have reached the consumer (the planner), so a
// wait for the planner to be idle that follows sees them.
#include <atomic>
#include <chrono>
#include <thread>

#include "monitor_fixture.hpp"

using namespace lfmon;

// The consumer takes its time, as the planner's lock can. drain used to return as soon as the
// events were consumed, while the monitor thread was still delivering their candidate: seen as a
// plan published into the next test's table (a reset waited for the planner before the planner
// had the candidate), under ThreadSanitizer's slowdown.
TEST_CASE("monitor: drain returns after the consumed events' candidates are delivered") {
  struct SlowConsumer : livefuse::monitor::CandidateConsumer {
    std::atomic<uint64_t> done{0};
    void on_candidate(const Candidate&) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      ++done;
    }
    void on_candidate_cold(uint64_t, uint32_t) override {}
  } slow;
  setup();
  Monitor::instance().set_consumer(&slow);
  lf::Tensor x = lf::rand_uniform({4, 8}, 1);
  int drained_mid_delivery = 0;
  for (int k = 0; k < 200 && slow.done == 0; ++k) {
    x = lf::tanh(lf::add(lf::exp(x), x));
    (void)x.to_floats();
    // Without flushing: the candidate comes from the monitor thread's own consumption.
    REQUIRE(Monitor::instance().drain(std::chrono::seconds(30), false));
    // Every candidate the detector emitted from those events has been delivered.
    drained_mid_delivery += Monitor::instance().counters().candidates_emitted != slow.done.load();
  }
  REQUIRE(Monitor::instance().drain());  // a delivery still going on ends before `slow` does
  Monitor::instance().set_consumer(nullptr);
  CHECK(slow.done >= 1);
  CHECK(drained_mid_delivery == 0);
}
