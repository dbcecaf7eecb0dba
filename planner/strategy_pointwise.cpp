// Strategy "pointwise" (vertical elementwise): chains and DAGs of elementwise ops over one
// iteration shape, inputs broadcast by strides, any number of outputs. One thread per element
// (or per 16 bytes, vectorised, when everything is dense).
#include "livefuse/error.hpp"
#include "planner/passes.hpp"
#include "planner/strategy.hpp"

namespace livefuse::planner {
namespace {

class PointwiseStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "pointwise"; }

  std::optional<std::string> can_plan(const FusionGraph& g, std::span<const int> groups) const override {
    for (int id : groups) {
      const Group& gr = g.groups[id];
      if (gr.kind != GroupKind::Pointwise) return "not a pointwise group";
      for (int j : gr.nodes)
        if (g.role[j] != Role::Pointwise) return detail::concat("#", j, " is not elementwise");
    }
    return std::nullopt;
  }

  StrategyParams params(const FusionGraph& g, std::span<const int> groups) const override {
    StrategyParams p;
    for (int id : groups) {
      for (int v : group_inputs(g, g.groups[id])) p.bytes += value_bytes(g.seg, v);
      for (int v : group_outputs(g, g.groups[id])) p.bytes += value_bytes(g.seg, v);
    }
    p.detail = "one pass over the inputs";
    return p;
  }

  Step emit(const FusionGraph& g, std::span<const int> groups) const override {
    return single_group_kernel(g, g.groups[groups[0]], jit::SpecKind::Pointwise, "pointwise");
  }
};

}  // namespace

const Strategy& pointwise_strategy() {
  static const PointwiseStrategy s;
  return s;
}

}  // namespace livefuse::planner
