#include "runtime/faults.hpp"

#include <array>
#include <atomic>

namespace livefuse::faults {

namespace {
std::array<std::atomic<int>, static_cast<size_t>(Point::kCount)> g_pending{}, g_skip{};

// Takes one from `n` if it is positive.
bool take(std::atomic<int>& n) {
  int cur = n.load(std::memory_order_relaxed);
  while (cur > 0)
    if (n.compare_exchange_weak(cur, cur - 1)) return true;
  return false;
}
}  // namespace

void inject(Point p, int count, int skip) {
  g_skip[static_cast<size_t>(p)].fetch_add(skip);
  g_pending[static_cast<size_t>(p)].fetch_add(count);
}

void clear(Point p) {
  g_skip[static_cast<size_t>(p)].store(0);
  g_pending[static_cast<size_t>(p)].store(0);
}

bool fire(Point p) {
  auto& n = g_pending[static_cast<size_t>(p)];
  if (n.load(std::memory_order_relaxed) <= 0) return false;
  if (take(g_skip[static_cast<size_t>(p)])) return false;
  return take(n);
}

const char* point_name(Point p) {
  switch (p) {
    case Point::plan:
      return "plan";
    case Point::compile:
      return "compile";
    case Point::load:
      return "load";
    case Point::instantiate:
      return "instantiate";
    case Point::run:
      return "run";
    case Point::step:
      return "step";
    case Point::kCount:
      break;
  }
  return "?";
}

}  // namespace livefuse::faults
