#include "kernels/jit/row_tuner.hpp"

#include "livefuse/detail/median.hpp"

namespace livefuse::jit {
using livefuse::detail::median;

BodyTuner::Pick BodyTuner::next(bool can_time) {
  if (decided_ >= 0 || !can_time) return {choice(), false};
  if (cold_ > 0) {
    --cold_;
    return {guess_, false};
  }
  // The body with fewer timed launches, the guess first; none once all are out (results pending).
  const int guessed = guess_, other = !guess_;
  const int body = issued_[guessed] <= issued_[other] ? guessed : other;
  if (issued_[body] >= kSamples) return {guess_, false};
  ++issued_[body];
  return {body == 1, true};
}

double BodyTuner::median_us(bool pipelined) const { return median(us_[pipelined]); }

void BodyTuner::result(bool pipelined, double us) {
  if (decided_ >= 0) return;
  us_[pipelined].push_back(us);
  if (samples(false) < kSamples || samples(true) < kSamples) return;
  const double plain = median(us_[0]), pipe = median(us_[1]);
  const double guessed = guess_ ? pipe : plain, other = guess_ ? plain : pipe;
  decided_ = other < 0.98 * guessed ? !guess_ : guess_;
}

}  // namespace livefuse::jit
