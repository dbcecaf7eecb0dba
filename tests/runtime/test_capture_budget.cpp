// The capture budget (graphs/capture_budget.hpp): a token bucket of capture time per thread,
// filled at a share of the wall time, capped at a burst.
#include <thread>

#include "graphs/capture_budget.hpp"
#include "test_util.hpp"

using livefuse::graphs::CaptureBudget;
using us = std::chrono::microseconds;

TEST_CASE("capture budget: a burst at once, then a share of the time; never more than the burst") {
  CaptureBudget b(0.25, us(500));
  CaptureBudget::Clock::time_point t{};
  t += us(1'000'000);
  CHECK(b.allow(t));  // full at first
  b.charge(us(400), t);
  CHECK(b.allow(t));  // 100 us left
  b.charge(us(300), t);
  CHECK_FALSE(b.allow(t));  // 200 us owed
  t += us(800);             // + 200 us: back to zero, still not positive
  CHECK_FALSE(b.allow(t));
  t += us(40);  // + 10 us
  CHECK(b.allow(t));
  t += us(1'000'000);  // a long quiet stretch refills to the burst, not beyond
  b.charge(us(500), t);
  CHECK_FALSE(b.allow(t));
  CHECK(b.captures() == 3);
  b.deny();
  CHECK(b.denied() == 1);
}

TEST_CASE("capture budget: each thread has its own") {
  auto& mine = livefuse::graphs::thread_capture_budget();
  const auto now = CaptureBudget::Clock::now();
  mine.charge(us(10'000), now);  // this thread spent 10 ms
  CHECK_FALSE(mine.allow(now));
  bool other = false;
  std::thread([&] { other = livefuse::graphs::thread_capture_budget().allow(now); }).join();
  CHECK(other);
}
