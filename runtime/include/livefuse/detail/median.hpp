#pragma once
// The median the runtime's live sampling decides by (a plan against eager execution, a row
// kernel's two bodies): the upper middle of the samples, 0 when there are none.
#include <algorithm>
#include <vector>

namespace livefuse::detail {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace livefuse::detail
