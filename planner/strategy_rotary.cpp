// Strategy "rotary": a group pass_rotary formed becomes one RotaryStep, a kernel of its own
// (kernels/cpu/rotary.cpp, kernels/cuda/rotary.cu) rather than generated code: rotate_half
// reads a column's partner half a row away, which the pointwise IR's loads (the current
// element) do not express. Its bytes are x, cos, sin and the result of each part.
#include "planner/strategy.hpp"

namespace livefuse::planner {
namespace {

class RotaryStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "rotary"; }

  std::optional<std::string> can_plan(const FusionGraph& g,
                                      std::span<const int> groups) const override {
    const Group& gr = g.groups[groups[0]];
    if (gr.kind != GroupKind::Rotary || gr.rotary < 0) return "not a rotary group";
    return std::nullopt;
  }

  StrategyParams params(const FusionGraph& g, std::span<const int> groups) const override {
    StrategyParams p;
    for (const RotaryOperands& o : g.rotary[g.groups[groups[0]].rotary])
      for (int v : {o.x, o.cos, o.sin, o.out}) p.bytes += value_bytes(g.seg, v);
    p.detail = std::to_string(g.rotary[g.groups[groups[0]].rotary].size()) + " rotaries in one launch";
    return p;
  }

  Step emit(const FusionGraph& g, std::span<const int> groups) const override {
    const Group& gr = g.groups[groups[0]];
    RotaryStep r;
    r.parts = g.rotary[gr.rotary];
    r.nodes = gr.nodes;
    Step s;
    s.label = "rotary " + g.nodes_str(gr.nodes);
    s.body = std::move(r);
    return s;
  }
};

}  // namespace

const Strategy& rotary_strategy() {
  static const RotaryStrategy s;
  return s;
}

}  // namespace livefuse::planner
