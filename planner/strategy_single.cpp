// Strategy "single": ops that stay single steps -- views (no kernel), the eager backends' ops
// the planner does not fuse, and opaque user kernels (never looked into).
#include "planner/strategy.hpp"

namespace livefuse::planner {
namespace {

class SingleStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "single"; }

  std::optional<std::string> can_plan(const FusionGraph&, std::span<const int>) const override { return std::nullopt; }

  StrategyParams params(const FusionGraph& g, std::span<const int> groups) const override {
    const Group& gr = g.groups[groups[0]];
    StrategyParams p;
    p.launches = gr.kind == GroupKind::View ? 0 : 1;
    p.bytes = gr.kind == GroupKind::View ? 0 : eager_node_bytes(g.seg, gr.nodes[0]);
    return p;
  }

  Step emit(const FusionGraph& g, std::span<const int> groups) const override {
    const Group& gr = g.groups[groups[0]];
    const int j = gr.nodes[0];
    Step s;
    s.label = std::string(op_name(g.seg.nodes[j].op)) + " #" + std::to_string(j);
    if (gr.kind == GroupKind::View) s.body = ViewStep{j};
    else if (gr.kind == GroupKind::Opaque) s.body = OpaqueStep{j};
    else s.body = EagerStep{j};
    return s;
  }
};

}  // namespace

const Strategy& single_strategy() {
  static const SingleStrategy s;
  return s;
}

}  // namespace livefuse::planner
