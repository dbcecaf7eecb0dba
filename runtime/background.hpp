#pragma once
// Whether livefuse's own threads are at work: a planning round, a kernel compile. They take the
// host's cores and the driver's locks (module loads, graph instantiation), so a sample the
// program's thread times meanwhile may not show the steady state; the matcher does not start
// samples while this is busy (put_sample_off, runtime/src/matcher_checks.cpp). (It was added for
// a GPT-2 decode layer plan sampled at 103 us in one process and 59 in another, H200; that one
// turned out to be planned differently -- see matcher_end.cpp, flush() -- and this is kept as a
// precaution.)
#include <atomic>

namespace livefuse {

class BackgroundWork {
 public:
  BackgroundWork() { active().fetch_add(1, std::memory_order_relaxed); }
  ~BackgroundWork() { active().fetch_sub(1, std::memory_order_relaxed); }
  BackgroundWork(const BackgroundWork&) = delete;
  BackgroundWork& operator=(const BackgroundWork&) = delete;

  static bool busy() { return active().load(std::memory_order_relaxed) > 0; }

 private:
  static std::atomic<int>& active() {
    static std::atomic<int> n{0};
    return n;
  }
};

}  // namespace livefuse
