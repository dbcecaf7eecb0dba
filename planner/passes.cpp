#include "planner/passes.hpp"

namespace livefuse::planner {

const std::vector<Pass>& pass_list() {
  // Never destroyed: the planner thread may still be running the passes while static
  // destructors run at exit.
  static const auto* passes = new std::vector<Pass>{
      {"classify", "node roles; unobservable results dropped", pass_classify},
      {"attention", "matmul(q, kT) -> softmax -> matmul(., v) as one fused attention step", pass_attention},
      {"rotary", "x * cos + rotate_half(x) * sin as one rotary step (q and k in one launch)", pass_rotary},
      {"vertical", "producer/consumer fusion into pointwise and row kernels", pass_vertical},
      {"cost", "split groups that do not pay for themselves", pass_cost},
      {"gemm_siblings", "linears over one input as one GEMM over concatenated weights", pass_gemm_siblings},
      {"gemm_epilogue", "GEMM + bias/activation tail", pass_gemm_epilogue},
      {"horizontal", "independent pointwise kernels share a launch", pass_horizontal},
      {"materialize", "which values get memory", pass_materialize},
  };
  return *passes;
}

FusionGraph make_fusion_graph(const Segment& seg, const PlannerOptions& opts) {
  FusionGraph g;
  g.seg = seg;
  g.opts = opts;
  g.users = seg.users();
  return g;
}

void run_passes(FusionGraph& g) {
  if (g.opts.dump) g.opts.dump("input", g.seg.str());
  for (const Pass& p : pass_list()) {
    p.run(g);
    if (g.opts.dump) g.opts.dump(std::string(p.name), g.dump());
  }
}

}  // namespace livefuse::planner
