#pragma once
// Strategies: one per kind of step, behind one interface (nvFuser's scheduler shape):
//   can_plan  is this group (or set of groups) a kernel this strategy can generate? (why not)
//   params    what it would cost: bytes moved, launches, and the launch-shaping parameters
//   emit      the Step: a KernelSpec (or a GEMM / single-op description) over value ids
// One file each: strategy_pointwise.cpp (vertical elementwise), strategy_row.cpp (reductions
// and normalisations with prologue/epilogue), strategy_gemm.cpp (GEMM + bias/activation),
// strategy_horizontal.cpp (siblings in one launch), strategy_single.cpp (unfused ops),
// strategy_attention.cpp (the fused attention template), strategy_rotary.cpp (the rotary template).
#include <optional>
#include <span>
#include <string>

#include "planner/fusion_graph.hpp"
#include "planner/plan.hpp"

namespace livefuse::planner {

struct StrategyParams {
  double bytes = 0;     // estimated bytes read + written
  int launches = 1;
  std::string detail;   // e.g. "row cache in shared memory", "recompute: 3 passes over the inputs"
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string_view name() const = 0;
  virtual std::optional<std::string> can_plan(const FusionGraph& g, std::span<const int> groups) const = 0;
  virtual StrategyParams params(const FusionGraph& g, std::span<const int> groups) const = 0;
  virtual Step emit(const FusionGraph& g, std::span<const int> groups) const = 0;

  std::optional<std::string> can_plan(const FusionGraph& g, const Group& gr) const {
    const int id = gr.id;
    return can_plan(g, std::span<const int>(&id, 1));
  }
};

const Strategy& strategy_for(GroupKind kind);
const Strategy& horizontal_strategy();

// Which kernel variants to compile (jit::Variant bits) for the representative shapes: vec or
// strided, shared-memory row cache or recompute, 32- or 64-bit indexing.
uint32_t choose_variants(const FusionGraph& g, const jit::KernelSpec& spec, const std::vector<PartIo>& parts);

// One fused kernel for one group (pointwise or row): lowered, its variants chosen, labelled
// "<label> <nodes>".
Step single_group_kernel(const FusionGraph& g, const Group& gr, jit::SpecKind kind,
                         const std::string& label);

// Bytes of a value at its representative shape.
double value_bytes(const Segment& seg, int value_id);
// Bytes an eager execution of node j moves (inputs read + outputs written).
double eager_node_bytes(const Segment& seg, int j);

}  // namespace livefuse::planner
