// Strategy "horizontal": independent pointwise groups in one launch. Each group is one part of
// the spec with its own iteration space; the kernel gives each part a range of blocks.
#include "planner/lowering.hpp"
#include "planner/passes.hpp"
#include "planner/strategy.hpp"

namespace livefuse::planner {

const Strategy& pointwise_strategy();

namespace {

class HorizontalStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "horizontal"; }

  std::optional<std::string> can_plan(const FusionGraph& g, std::span<const int> groups) const override {
    if (groups.size() < 2) return "fewer than two groups";
    size_t io = 0;
    for (int id : groups) {
      if (auto why = pointwise_strategy().can_plan(g, std::span<const int>(&id, 1))) return why;
      io += group_inputs(g, g.groups[id]).size() + group_outputs(g, g.groups[id]).size();
    }
    if (static_cast<int>(io) > g.opts.limits.max_io) return "too many inputs and outputs for one launch";
    return std::nullopt;
  }

  StrategyParams params(const FusionGraph& g, std::span<const int> groups) const override {
    StrategyParams p = pointwise_strategy().params(g, groups);
    p.detail = std::to_string(groups.size()) + " independent groups, one launch";
    return p;
  }

  Step emit(const FusionGraph& g, std::span<const int> groups) const override {
    auto spec = std::make_shared<jit::KernelSpec>();
    spec->kind = jit::SpecKind::Pointwise;
    FusedKernelStep fk;
    std::string name = "horizontal";
    for (int id : groups) {
      const Group& gr = g.groups[id];
      PartIo io;
      spec->parts.push_back(lower_group(g, gr, &io));
      fk.parts.push_back(io);
      fk.nodes.insert(fk.nodes.end(), gr.nodes.begin(), gr.nodes.end());
      name += " [" + g.nodes_str(gr.nodes) + "]";
    }
    spec->name = name;
    spec->variants = choose_variants(g, *spec, fk.parts);
    fk.spec = spec;
    Step s;
    s.label = name;
    s.body = std::move(fk);
    return s;
  }
};

}  // namespace

const Strategy& horizontal_strategy() {
  static const HorizontalStrategy s;
  return s;
}

}  // namespace livefuse::planner
