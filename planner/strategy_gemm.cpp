// Strategy "gemm": matmul/linear (executed by the backend: cuBLASLt on CUDA, the blocked GEMM
// on the CPU) plus the pointwise group after it. The step carries the cuBLASLt epilogue that
// covers the tail (BIAS, RELU_BIAS, GELU_BIAS) when one does, and always the tail as a fused
// kernel: the fallback when no epilogue runner is installed, and the plan when none applies.
#include "planner/merged_weights.hpp"
#include "planner/passes.hpp"
#include "planner/strategy.hpp"

namespace livefuse::planner {

const Strategy& pointwise_strategy();

namespace {

class GemmStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "gemm"; }

  std::optional<std::string> can_plan(const FusionGraph& g, std::span<const int> groups) const override {
    if (g.groups[groups[0]].kind != GroupKind::Gemm) return "not a GEMM";
    return std::nullopt;
  }

  StrategyParams params(const FusionGraph& g, std::span<const int> groups) const override {
    const Group& gr = g.groups[groups[0]];
    StrategyParams p;
    if (gr.nodes.size() > 1) return merged_params(g, gr);
    p.bytes = eager_node_bytes(g.seg, gr.nodes[0]);
    if (gr.tail >= 0) {
      const int t = gr.tail;
      const StrategyParams tp = pointwise_strategy().params(g, std::span<const int>(&t, 1));
      if (gr.epilogue == GemmEpilogue::None) {
        p.bytes += tp.bytes;
        p.launches = 2;
      }
    }
    p.detail = std::string("epilogue ") + std::string(epilogue_name(gr.epilogue));
    return p;
  }

  Step emit(const FusionGraph& g, std::span<const int> groups) const override {
    const Group& gr = g.groups[groups[0]];
    if (gr.nodes.size() > 1) return emit_merged(g, gr);
    GemmStep gs;
    gs.node = gr.nodes[0];
    gs.epilogue = gr.epilogue;
    gs.bias_value = gr.bias_value;
    gs.residual_value = gr.residual_value;
    gs.act = gr.act;  // BiasAct's activation
    Step s;
    s.label = std::string(op_name(g.seg.nodes[gs.node].op)) + " #" + std::to_string(gs.node);
    emit_tail(g, gr, gs, s.label);
    s.body = std::move(gs);
    return s;
  }

 private:
  // The group's tail, if it has one, as the step's fused kernel (what an epilogue writes is its
  // last output), and named in the label.
  static void emit_tail(const FusionGraph& g, const Group& gr, GemmStep& gs, std::string& label) {
    if (gr.tail < 0) return;
    const int t = gr.tail;
    Step tail = pointwise_strategy().emit(g, std::span<const int>(&t, 1));
    gs.tail = std::make_shared<FusedKernelStep>(std::get<FusedKernelStep>(std::move(tail.body)));
    gs.final_value = gs.tail->parts[0].outputs.empty() ? -1 : gs.tail->parts[0].outputs.back();
    label += " + " + g.nodes_str(g.groups[t].nodes);
    if (gr.epilogue != GemmEpilogue::None) label += " (epilogue " + std::string(epilogue_name(gr.epilogue)) + ")";
  }

  // Sibling linears over one input (pass_gemm_siblings): the input is read once, and where the
  // product is split (splits()) it is written and read once more by the split.
  static StrategyParams merged_params(const FusionGraph& g, const Group& gr) {
    StrategyParams p;
    const int x = g.seg.value_id(g.seg.nodes[gr.nodes[0]].inputs[0]);
    for (int j : gr.nodes) p.bytes += eager_node_bytes(g.seg, j) - value_bytes(g.seg, x);
    p.bytes += value_bytes(g.seg, x);
    if (splits(g, gr)) {
      for (int j : gr.nodes) p.bytes += 2 * value_bytes(g.seg, g.seg.value_id(ValueRef::of(j)));
      p.launches = 2;
    }
    p.detail = std::to_string(gr.nodes.size()) + " siblings over concatenated weights";
    if (gr.epilogue == GemmEpilogue::Gated) {  // act(gate) * up written instead of the siblings
      const int t = gr.tail;
      for (int j : gr.nodes) p.bytes -= value_bytes(g.seg, g.seg.value_id(ValueRef::of(j)));
      for (int v : group_outputs(g, g.groups[t])) p.bytes += value_bytes(g.seg, v);
      p.detail += ", gated epilogue";
    }
    return p;
  }

  // CUDA: the merged product is split by a kernel of its own -- but for few rows, where the GEMV
  // writes every sibling's output itself (kernels/cuda/gemv.hpp), and for siblings of one
  // width, which one strided-batched GEMM writes in place (plan_siblings.cpp). Not in f32:
  // cuBLASLt's strided-batched f32 GEMM runs BERT-base's Q/K/V in 30.4 us at 128 rows (108.5 at
  // 1024) where one [128, 2304] product takes 19.2 (100.3; H100, livefuse-bench-gemm-tune
  // --dtype f32, bench/RESULTS.md session 51): one wide GEMM and the split instead -- unless
  // f32 runs on the tensor-core GEMM (LIVEFUSE_GEMM_F32X3), which writes every output itself.
  static bool splits(const FusionGraph& g, const Group& gr) {
    const ValueRef out = ValueRef::of(gr.nodes[0]);
    return g.opts.cuda && !(g.opts.gemv_prologue && gemv_rows(g.seg.shape(out))) &&
           (!siblings_one_width(g.seg, gr.nodes) || (g.seg.dtype(out) == DType::f32 && !f32x3_takes(g, gr)));
  }

  // The tensor-core GEMM's shape rules for f32 siblings (cuda::gemm_tc_supported: K in steps of
  // 32, the product's columns in tiles of 64); alignment is checked when it runs (the fallback
  // then: cuBLASLt's strided-batched GEMM).
  static bool f32x3_takes(const FusionGraph& g, const Group& gr) {
    const Shape& w = g.seg.shape(g.seg.nodes[gr.nodes[0]].inputs[1]);
    const int64_t cols = w.v[0] * static_cast<int64_t>(gr.nodes.size());
    return g.opts.gemm_f32x3 && w.rank == 2 && w.v[1] % 32 == 0 && cols % 64 == 0 && w.v[0] % 2 == 0;
  }

  static Step emit_merged(const FusionGraph& g, const Group& gr) {
    GemmStep gs;
    gs.node = gr.nodes[0];
    gs.siblings = gr.nodes;
    gs.merged = std::make_shared<MergedWeights>();
    gs.split_kernel = splits(g, gr);
    Step s;
    s.label = "linear " + g.nodes_str(gr.nodes) + " as one GEMM";
    gs.epilogue = gr.epilogue;  // a gate's tail (pass_gemm_epilogue, take_gate), or none
    gs.act = gr.act;
    gs.gate_second = gr.gate_second;
    emit_tail(g, gr, gs, s.label);
    s.body = std::move(gs);
    return s;
  }
};

}  // namespace

const Strategy& gemm_strategy() {
  static const GemmStrategy s;
  return s;
}

}  // namespace livefuse::planner
