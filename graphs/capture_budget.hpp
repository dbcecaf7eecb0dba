#pragma once
// CaptureBudget: how much of a thread's time graph captures may take, so that warm-up spreads
// them over runs instead of stalling one.
//
// [ Note -- captures spread over warm-up ]
// A plan captures a binding's graph at its second sight, on the program's thread (a capture takes
// what that thread enqueues): a capture and an instantiate cost that thread 0.2-0.6 ms on the H200.
// A decode step replays its layer plan once per layer, each layer its own binding (its weights),
// so one step met twelve second sights at once: GPT-2's slowest warm-up token was 3.5 ms against
// 1.2 eager, 2.9 of them in first replays (bench/RESULTS.md, session 21, tools/gpu/trace_warmup.py).
// So each thread has a token bucket of capture time: it fills at `share` of the wall time, up to
// `burst`; a capture may start while it is not empty and is charged what it took. A binding met
// while it is empty runs step by step again (what its first sight did) and captures at a later
// sight; a steady program, its graphs built, never asks.
#include <chrono>
#include <cstdint>

namespace livefuse::graphs {

class CaptureBudget {
 public:
  using Clock = std::chrono::steady_clock;
  CaptureBudget(double share, Clock::duration burst) : share_(share), burst_(burst), left_(burst) {}

  // A capture may start now.
  bool allow(Clock::time_point now) {
    refill(now);
    return left_ > Clock::duration::zero();
  }
  // A capture took `spent`, ending at `now`.
  void charge(Clock::duration spent, Clock::time_point now) {
    refill(now);
    left_ -= spent;
    ++captures_;
  }
  void deny() { ++denied_; }
  uint64_t captures() const { return captures_; }
  uint64_t denied() const { return denied_; }

 private:
  void refill(Clock::time_point now) {
    if (last_ != Clock::time_point{} && now > last_) {
      left_ += std::chrono::duration_cast<Clock::duration>((now - last_) * share_);
      if (left_ > burst_) left_ = burst_;
    }
    last_ = now;
  }

  double share_;
  Clock::duration burst_, left_;
  Clock::time_point last_{};
  uint64_t captures_ = 0, denied_ = 0;
};

// The calling thread's budget: a fifth of its time, 0.2 ms at once (one capture, about: with
// 0.5 ms at once GPT-2's warm-up steps still met three in one, 0.75 ms: session 21, call 5).
CaptureBudget& thread_capture_budget();

// Charges the calling thread's budget with its lifetime (a capture and its instantiate).
class CaptureCharge {
 public:
  CaptureCharge() : t0_(CaptureBudget::Clock::now()) {}
  ~CaptureCharge() {
    const auto now = CaptureBudget::Clock::now();
    thread_capture_budget().charge(now - t0_, now);
  }
  CaptureCharge(const CaptureCharge&) = delete;
  CaptureCharge& operator=(const CaptureCharge&) = delete;

 private:
  CaptureBudget::Clock::time_point t0_;
};

}  // namespace livefuse::graphs
