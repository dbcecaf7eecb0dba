// Strategy "row": reductions and normalisations over the last dim with their elementwise
// prologue and epilogue in one kernel -- residual add -> layer_norm -> gelu, scale + mask ->
// softmax, x * rsqrt(mean(x^2) + eps) * w, sum/mean/max with ops on the result. One block
// (or warp) per row; values of earlier passes over the row stay in shared memory when they
// fit (else the inputs are read again, which the cost model charges).
#include "kernels/jit/row_schedule.hpp"
#include "planner/lowering.hpp"
#include "planner/passes.hpp"
#include "planner/strategy.hpp"

namespace livefuse::planner {
namespace {

class RowStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "row"; }

  std::optional<std::string> can_plan(const FusionGraph& g, std::span<const int> groups) const override {
    const Group& gr = g.groups[groups[0]];
    if (gr.kind != GroupKind::Row || groups.size() != 1) return "not one row group";
    if (gr.shape.rank < 1 || gr.shape.v[gr.shape.rank - 1] == 0) return "rows of zero length";
    for (int j : gr.nodes)
      if (g.role[j] == Role::Row)
        for (const ValueRef& r : g.seg.nodes[j].inputs)
          if (!is_floating(g.seg.dtype(r))) return "row op on a non-float value";
    return std::nullopt;
  }

  StrategyParams params(const FusionGraph& g, std::span<const int> groups) const override {
    const Group& gr = g.groups[groups[0]];
    PartIo io;
    const jit::KernelPart part = lower_group(g, gr, &io);
    const int64_t cols = gr.shape.v[gr.shape.rank - 1];
    const jit::RowSchedule cached = jit::schedule_row(part, jit::RowCacheMode::CacheFloat);
    const bool fits = static_cast<double>(cached.ncache) * cols * 4 <= g.opts.cost.row_cache_bytes;
    StrategyParams p;
    for (int v : io.outputs) p.bytes += value_bytes(g.seg, v);
    if (fits) {
      for (int v : io.inputs) p.bytes += value_bytes(g.seg, v);
      p.detail = "row values cached (" + std::to_string(cached.ncache) + " per column)";
      return p;
    }
    const jit::RowSchedule re = jit::schedule_row(part, jit::RowCacheMode::Recompute);
    for (int l = 0; l < re.nloops; ++l)
      for (int i : re.loop_eval[l])
        if (part.instrs[i].kind == jit::InstrKind::Load) p.bytes += value_bytes(g.seg, io.inputs[part.instrs[i].io]);
    p.detail = "rows too long to cache: " + std::to_string(re.nloops) + " passes over the inputs";
    return p;
  }

  Step emit(const FusionGraph& g, std::span<const int> groups) const override {
    return single_group_kernel(g, g.groups[groups[0]], jit::SpecKind::Row, "row");
  }
};

}  // namespace

const Strategy& row_strategy() {
  static const RowStrategy s;
  return s;
}

}  // namespace livefuse::planner
