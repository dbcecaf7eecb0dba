#include "examples/demo_stats.hpp"

namespace demo {
// Filled in once plan replacement exists; until then no call is served by a plan.
std::string progress_note() { return ""; }
std::string summary_fields() { return "served_by_plans=0.000"; }
}  // namespace demo
