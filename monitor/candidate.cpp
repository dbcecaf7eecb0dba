#include "monitor/candidate.hpp"

#include <string>

namespace livefuse::monitor {

std::vector<DimRef> ShapePattern::varying_dims() const {
  std::vector<DimRef> out;
  for (size_t d = 0; d < layout.size() && d < varying.size(); ++d)
    if (varying[d]) out.push_back(layout[d]);
  return out;
}

std::string describe(const Candidate& c) {
  std::string s;
  for (size_t k = 0; k < c.ops.size(); ++k) {
    const CandidateOp& op = c.ops[k];
    if (k) s += " -> ";
    s += op_name(op.op);
    s += "(";
    for (size_t m = 0; m < op.inputs.size(); ++m) {
      const WireRef& w = op.inputs[m];
      if (m) s += ", ";
      if (w.kind == WireRef::Kind::external) {
        s += 'e';
        s += std::to_string(w.index);
      } else {
        s += '#';
        s += std::to_string(w.index);
        s += '.';
        s += std::to_string(w.output);
      }
    }
    s += ")";
  }
  return s;
}

}  // namespace livefuse::monitor
