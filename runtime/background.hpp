#pragma once
// Whether livefuse's own threads are at work: a planning round, a kernel compile. They take the
// host's cores and the driver's locks (module loads, graph instantiation), and a sample the
// program's thread times meanwhile can come out far from the steady state: the GPT-2 decode
// layer plan sampled at 103 us in one process and 59 us in another (H200), and was rejected
// in the first. The matcher does not start samples while this is busy
// (runtime/src/matcher.cpp).
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
