#pragma once
// The demo's closing lines: for each plan, what the runtime decided and why, in plain words,
// and the one command that shows more.
#include <string>
#include <vector>

namespace demo {
// `report`: the path the demo wrote its report to ("" when it was not asked to write one).
std::vector<std::string> decision_lines(const std::string& report);
}  // namespace demo
