#include "graphs/capture_budget.hpp"

namespace livefuse::graphs {

CaptureBudget& thread_capture_budget() {
  thread_local CaptureBudget b(0.2, std::chrono::microseconds(200));
  return b;
}

}  // namespace livefuse::graphs
