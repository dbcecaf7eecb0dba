#include "runtime/faults.hpp"

#include <array>
#include <atomic>

namespace livefuse::faults {

namespace {
std::array<std::atomic<int>, static_cast<size_t>(Point::kCount)> g_pending{};
}

void inject(Point p, int count) { g_pending[static_cast<size_t>(p)].fetch_add(count); }

bool fire(Point p) {
  auto& n = g_pending[static_cast<size_t>(p)];
  int cur = n.load(std::memory_order_relaxed);
  while (cur > 0)
    if (n.compare_exchange_weak(cur, cur - 1)) return true;
  return false;
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
    case Point::kCount:
      break;
  }
  return "?";
}

}  // namespace livefuse::faults
