// Strategy "attention": a group pass_attention formed becomes one AttentionStep, a kernel of
// its own (kernels/cpu/attention.cpp, kernels/cuda/attention.cu) rather than generated code:
// its bytes are q, k, v, the mask and the result, read and written once.
#include "planner/strategy.hpp"

namespace livefuse::planner {
namespace {

class AttentionStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "attention"; }

  std::optional<std::string> can_plan(const FusionGraph& g,
                                      std::span<const int> groups) const override {
    const Group& gr = g.groups[groups[0]];
    if (gr.kind != GroupKind::Attention || gr.attention < 0) return "not an attention group";
    return std::nullopt;
  }

  StrategyParams params(const FusionGraph& g, std::span<const int> groups) const override {
    const AttentionOperands& o = g.attention[g.groups[groups[0]].attention];
    StrategyParams p;
    for (int v : {o.q, o.k, o.v, o.mask, o.out})
      if (v >= 0) p.bytes += value_bytes(g.seg, v);
    p.detail = o.heads_inner ? "writes [b, s, heads, d]" : "writes [b, heads, s, d]";
    return p;
  }

  Step emit(const FusionGraph& g, std::span<const int> groups) const override {
    const Group& gr = g.groups[groups[0]];
    AttentionStep a;
    a.operands = g.attention[gr.attention];
    a.nodes = gr.nodes;
    Step s;
    s.label = "attention " + g.nodes_str(gr.nodes);
    s.body = std::move(a);
    return s;
  }
};

}  // namespace

const Strategy& attention_strategy() {
  static const AttentionStrategy s;
  return s;
}

}  // namespace livefuse::planner
