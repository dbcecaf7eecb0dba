#include "graphs/capture_budget.hpp"

namespace livefuse::graphs {

CaptureBudget& thread_capture_budget() {
  thread_local CaptureBudget b(0.25, std::chrono::microseconds(500));
  return b;
}

}  // namespace livefuse::graphs
