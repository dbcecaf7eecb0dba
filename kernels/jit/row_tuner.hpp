#pragma once
// Register rows come in two bodies, plain and pipelined (render_row.cpp), and which one is
// faster depends on the kernel, the row and the occupancy each keeps -- by up to 40% either way
// on an H200, and an occupancy rule read from register counts did not hold: after one change
// to register use it picked the pipelined body for masked softmax f16 (512 columns: 111 us
// against the plain body's 77) and the plain one for layer_norm bf16 (1024: 88 against 76).
// So each launch shape's first launches time both bodies and keep the faster one: the
// BodyTuner below decides, the launch (cuda_launch.cpp) times with CUDA events and reports.
//
// [ Note: what is timed ]
// A launch shape (threads per row, rows per block, rows to within a factor of two) starts with
// the occupancy rule's guess. One launch runs untimed (module and caches cold), then kSamples
// of each body alternate, each between two events on the caller's stream; results are read
// without waiting (an event not yet complete is asked again at a later launch). The faster
// median wins; a tie within 2% keeps the guess. A launch into a graph being captured is never
// timed (events there are graph nodes) and runs the current choice: a graph keeps what it
// captured. Both bodies compute every row the same way, so values never depend on the choice.
#include <vector>

namespace livefuse::jit {

class BodyTuner {
 public:
  static constexpr int kSamples = 3;

  explicit BodyTuner(bool guess) : guess_(guess) {}
  struct Pick {
    bool pipelined = false;
    bool timed = false;  // time this launch and report it with result()
  };
  // The body of the next launch. can_time: the caller could time it (not capturing).
  Pick next(bool can_time);
  void result(bool pipelined, double us);
  void abandon() { decided_ = guess_ ? 1 : 0; }  // timing failed: the guess stands
  bool decided() const { return decided_ >= 0; }
  bool choice() const { return decided_ >= 0 ? decided_ == 1 : guess_; }
  bool guess() const { return guess_; }
  int samples(bool pipelined) const { return static_cast<int>(us_[pipelined].size()); }
  double median_us(bool pipelined) const;  // of the samples so far (0: none)

 private:
  bool guess_;
  int decided_ = -1;
  int cold_ = 1;  // untimed launches still to run first
  int issued_[2] = {0, 0};
  std::vector<double> us_[2];
};

}  // namespace livefuse::jit
