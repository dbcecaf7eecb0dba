#pragma once
// Every choice and refusal the planner makes is a Decision: what was decided, and why. They
// travel with the plan so inspect(), the report and the CLI can show them.
#include <string>
#include <vector>

namespace livefuse::planner {

struct Decision {
  std::string what;    // "fuse #2..#5 into one pointwise kernel", "keep #7 (concat) as a single step"
  std::string reason;  // "saves 3 launches and 96 MiB of traffic", "concat is not fusable"
};

}  // namespace livefuse::planner
