#include <algorithm>

#include "livefuse/error.hpp"
#include "planner/strategy.hpp"

namespace livefuse::planner {

double value_bytes(const Segment& seg, int v) {
  const ValueRef r = seg.value_ref(v);
  return static_cast<double>(seg.shape(r).numel()) * static_cast<double>(dtype_size(seg.dtype(r)));
}

double eager_node_bytes(const Segment& seg, int j) {
  const SegmentNode& n = seg.nodes[j];
  double b = 0;
  for (const ValueRef& r : n.inputs) b += value_bytes(seg, seg.value_id(r));
  for (int k = 0; k < static_cast<int>(n.outputs.size()); ++k) b += value_bytes(seg, seg.value_id(ValueRef::of(j, k)));
  return b;
}

int Step::launches() const {
  if (const auto* g = std::get_if<GemmStep>(&body))
    return 1 + ((g->tail && g->epilogue == GemmEpilogue::None) ? 1 : 0);
  if (std::holds_alternative<ViewStep>(body)) return 0;
  return 1;
}

const Strategy& pointwise_strategy();
const Strategy& row_strategy();
const Strategy& gemm_strategy();
const Strategy& single_strategy();

const Strategy& strategy_for(GroupKind kind) {
  switch (kind) {
    case GroupKind::Pointwise: return pointwise_strategy();
    case GroupKind::Row: return row_strategy();
    case GroupKind::Gemm: return gemm_strategy();
    default: return single_strategy();
  }
}

}  // namespace livefuse::planner
