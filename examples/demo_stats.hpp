#pragma once
// What the demo prints about the runtime's work, from the live snapshot.
#include <string>

namespace demo {
std::string progress_note();   // e.g. "plans=2 served=73%"
std::string summary_fields();  // ends with "served_by_plans=<fraction>"
}  // namespace demo
