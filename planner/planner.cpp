#include "planner/planner.hpp"

#include <algorithm>
#include <iostream>
#include <mutex>
#include <optional>

#include "livefuse/config.hpp"
#include "planner/passes.hpp"
#include "planner/rotary_epilogue.hpp"
#include "planner/split_k_rows.hpp"
#include "planner/strategy.hpp"
#if LIVEFUSE_HAS_CUDA
#include "kernels/cuda/gemm.hpp"
#endif

namespace livefuse::planner {

PlannerOptions default_planner_options(Device device) {
  PlannerOptions o;
  o.cost = device.is_cuda() ? CostModel{} : CostModel::cpu();
  o.fusion = config().fusion;
  o.cuda = device.is_cuda();
  o.gemv_prologue = device.is_cuda() && config().gemv;
  o.gemv_norm_fold = o.gemv_prologue ? config().gemv_norm : 0;
  o.gemv_rotary = config().gemv_rotary;
  o.gemm_siblings = config().gemm_siblings;
  o.gemm_tc = device.is_cuda() && config().gemm_tc;
  o.gemm_f32x3 = device.is_cuda() && config().gemm_f32x3;
  // auto: on CUDA only where a fast kernel takes the shapes (the tensor-core one, the decode
  // one); the general FMA kernel loses to the GEMMs and the softmax it would replace
  // (runtime/include/livefuse/config.hpp has the figures).
  o.attention = config().attention != 0;
  o.attention_fast_only = config().attention < 0 && device.is_cuda();
  o.attention_append = config().attention_append;
  o.rotary = config().rotary;
#if LIVEFUSE_HAS_CUDA
  if (device.is_cuda() && config().split_k_rows)
    o.split_k = [](int64_t rows, int64_t n, int64_t k, DType dtype, bool bias) {
      try {
        return cuda::linear_split_k(rows, n, k, dtype, bias);
      } catch (const std::exception&) {
        return 1;  // no algorithm for the shape: the GEMM runs as planned, and fails as eager would
      }
    };
#endif
  if (config().log >= LogLevel::debug) {
    o.dump = [](const std::string& pass, const std::string& text) {
      static std::mutex mu;
      std::lock_guard<std::mutex> lock(mu);
      std::cerr << "[planner] after " << pass << ":\n" << text;
    };
  }
  return o;
}

namespace {
// The summary's launches and fused kernels (generated ones, GEMM tails, the templates).
void count_launches(PlannedSegment& p) {
  p.summary.plan_launches = 0;
  p.summary.fused_kernels = 0;
  for (const Step& s : p.steps) {
    p.summary.plan_launches += s.launches();
    if (std::holds_alternative<FusedKernelStep>(s.body) || std::holds_alternative<AttentionStep>(s.body) ||
        std::holds_alternative<RotaryStep>(s.body))
      ++p.summary.fused_kernels;
    if (const auto* gs = std::get_if<GemmStep>(&s.body); gs && gs->tail) ++p.summary.fused_kernels;
  }
}

constexpr int64_t kNormFoldOutputsPerColumn = 8;

// The norm a fused step computes when it computes nothing else: a lone layer_norm / rms_norm, or
// the chain Llama writes, [cast(x, f32)] -> rms_norm without weight -> [cast(dtype)] -> mul by a
// weight of x's dtype (each value but the last one Virtual: read by the next node alone).
struct FoldableNorm {
  int norm = -1;           // the layer_norm / rms_norm node
  std::vector<int> chain;  // every node of a chain (empty: the lone norm)
  int x = -1, scale = -1;  // a chain's input and weight, as value ids
  ValueRef y;              // the value the linears read
};

std::optional<FoldableNorm> foldable_norm(const PlannedSegment& p, const std::vector<int>& nodes) {
  const Segment& seg = p.segment;
  const auto op_of = [&](size_t k) { return seg.nodes[nodes[k]].op; };
  if (nodes.size() == 1) {
    if (op_of(0) != OpId::layer_norm && op_of(0) != OpId::rms_norm) return std::nullopt;
    return FoldableNorm{nodes[0], {}, -1, -1, ValueRef::of(nodes[0])};
  }
  if (nodes.size() > 4) return std::nullopt;
  size_t k = 0;
  FoldableNorm f;
  f.chain = nodes;
  // Reads node nodes[k - 1]'s result, which nothing else reads.
  const auto reads_previous = [&](const SegmentNode& n, size_t in) {
    const ValueRef prev = ValueRef::of(nodes[k - 1]);
    return n.inputs[in] == prev && p.values[seg.value_id(prev)] == ValueKind::Virtual;
  };
  if (op_of(0) == OpId::cast && seg.nodes[nodes[0]].attrs.dtype == DType::f32) {
    f.x = seg.value_id(seg.nodes[nodes[0]].inputs[0]);
    ++k;
  }
  const SegmentNode& norm = seg.nodes[nodes[k]];
  if (op_of(k) != OpId::rms_norm || norm.attrs.i[0] != 0) return std::nullopt;
  if (k > 0 && !reads_previous(norm, 0)) return std::nullopt;
  if (k == 0) f.x = seg.value_id(norm.inputs[0]);
  f.norm = nodes[k++];
  const DType dt = seg.dtype(seg.value_ref(f.x));
  if (k < nodes.size() && op_of(k) == OpId::cast) {
    if (seg.nodes[nodes[k]].attrs.dtype != dt || !reads_previous(seg.nodes[nodes[k]], 0)) return std::nullopt;
    ++k;
  }
  if (k + 1 != nodes.size() || op_of(k) != OpId::mul) return std::nullopt;
  const SegmentNode& mul = seg.nodes[nodes[k]];
  if (mul.inputs.size() != 2 || mul.attrs.scalar_operand) return std::nullopt;
  const int side = reads_previous(mul, 0) ? 0 : reads_previous(mul, 1) ? 1 : -1;
  if (side < 0) return std::nullopt;
  const ValueRef w = mul.inputs[1 - side];
  const Shape& ws = seg.shape(w);
  const Shape& xs = seg.shape(seg.value_ref(f.x));
  if (seg.dtype(w) != dt || mul.outputs[0].dtype != dt || ws.rank != 1 || xs.rank < 1 || ws.v[0] != xs.v[xs.rank - 1])
    return std::nullopt;
  f.scale = seg.value_id(w);
  f.y = ValueRef::of(nodes[k]);
  return f;
}

// CUDA, few rows: a step that is a norm (foldable_norm) whose output nothing but one linear
// reads becomes that linear's prologue (GemmStep::prologue): the GEMV normalizes the row
// itself, one launch less for each norm of a decode layer (GPT-2: 2 of 8; Llama: 2 of 9). The
// norm's value keeps its memory for the calls the GEMV cannot take, which run the norm first.
// `level` is PlannerOptions::gemv_norm_fold: Llama's chain folds only at 2 (on the H200 its
// decode measured 1.292 ms a token with the chains folded against 1.185 without: the Q/K/V
// GEMV with the norm inside ran 1536 blocks in two waves, 14.3 us in ncu against 6.9 for a
// product alone -- bench/RESULTS.md, session 25. In one wave since session 26; the decode A/B
// then, two processes each: 1.291 / 1.278 folded against 1.343 / 1.267 -- inside the spread,
// so the default stays).
void fold_norm_prologues(PlannedSegment& p, int level) {
  const Segment& seg = p.segment;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const auto* fk = std::get_if<FusedKernelStep>(&p.steps[i].body);
    if (!fk) continue;
    const std::optional<FoldableNorm> f = foldable_norm(p, fk->nodes);
    if (!f || (!f->chain.empty() && level < 2)) continue;
    const ValueRef y = f->y;
    const Shape& ys = seg.shape(y);
    if (seg.is_output(y) || !gemv_rows(ys)) continue;
    // Its readers: linears reading it as their input (not as a weight), all of one GEMM step
    // (one linear, or merged siblings over it: Q/K/V, gate/up).
    int readers = 0, in_gemm = 0;
    GemmStep* gemm = nullptr;
    size_t gemm_step = 0;
    for (size_t k = 0; k < p.steps.size(); ++k)
      for (int n : p.steps[k].nodes())
        for (size_t in = 0; in < seg.nodes[n].inputs.size(); ++in) {
          if (!(seg.nodes[n].inputs[in] == y)) continue;
          ++readers;
          auto* gs = std::get_if<GemmStep>(&p.steps[k].body);
          const bool member = gs && (gs->node == n || std::find(gs->siblings.begin(), gs->siblings.end(), n) !=
                                                          gs->siblings.end());
          if (!member || in != 0 || gs->prologue >= 0 || seg.nodes[n].op != OpId::linear) continue;
          if (gemm && gemm != gs) continue;
          gemm = gs;
          gemm_step = k;
          ++in_gemm;
        }
    if (!gemm || readers != in_gemm || gemm_step < i) continue;
    // Each output of the GEMV normalizes its elements itself: past a few outputs per input
    // column that work outgrows the norm kernel it saves (GPT-2's vocabulary head, 50257 x 768:
    // 35 us against 21 + 4.5, H200).
    int64_t outputs = 0;  // the weights' rows (a GEMM step's nodes() also lists its tail)
    for (int n : gemm->siblings.empty() ? std::vector<int>{gemm->node} : gemm->siblings)
      outputs += seg.shape(seg.nodes[n].inputs[1]).v[0];
    if (outputs > kNormFoldOutputsPerColumn * ys.v[ys.rank - 1]) continue;
    gemm->prologue = f->norm;
    gemm->prologue_chain = f->chain;
    // The fallback runs the norm's nodes one by one, so each writes memory: a value that lived
    // only inside the norm's kernel becomes materialized, bound in the plan's sets like the
    // others (else the fallback would allocate it, inside a graph capture too: a graph holding
    // memory it allocated cannot launch twice -- graphs::CaptureHeldMemory).
    for (int j : gemm->prologue_nodes())
      if (ValueKind& k = p.values[seg.value_id(ValueRef::of(j))]; k == ValueKind::Virtual) k = ValueKind::Materialized;
    gemm->prologue_x = f->x;
    gemm->prologue_scale = f->scale;
    Step& gs = p.steps[gemm_step];
    p.decisions.push_back({p.steps[i].label + " runs inside the GEMV of " + gs.label + " (its prologue)",
                           "a product of few rows normalizes its input row itself: one launch less "
                           "(fallback: the norm, then the GEMM)"});
    gs.label = p.steps[i].label + " -> " + gs.label + " (norm in the GEMV)";
    p.steps.erase(p.steps.begin() + static_cast<std::ptrdiff_t>(i));
    --i;
  }
}
}  // namespace

PlannedSegment plan_segment(const Segment& seg, const PlannerOptions& opts) {
  FusionGraph g = make_fusion_graph(seg, opts);
  run_passes(g);
  PlannedSegment p;
  p.segment = seg;
  p.values = g.value_kind;
  for (int unit : g.topo_groups()) {
    const Group& gr = g.groups[unit];
    if (gr.horizontal >= 0) {
      const std::vector<int>& set = g.horizontal[gr.horizontal];
      p.steps.push_back(horizontal_strategy().emit(g, set));
      p.summary.plan_bytes += horizontal_strategy().params(g, set).bytes;
    } else {
      const Strategy& s = strategy_for(gr.kind);
      p.steps.push_back(s.emit(g, std::span<const int>(&unit, 1)));
      p.summary.plan_bytes += s.params(g, std::span<const int>(&unit, 1)).bytes;
    }
  }
  for (int j = 0; j < static_cast<int>(seg.nodes.size()); ++j) {
    if (g.role[j] == Role::Dead) continue;
    ++p.summary.ops;
    if (g.role[j] == Role::View) continue;
    ++p.summary.eager_launches;
    p.summary.eager_bytes += eager_node_bytes(seg, j);
  }
  p.decisions = std::move(g.decisions);
  if (opts.gemv_prologue && opts.gemv_norm_fold > 0) fold_norm_prologues(p, opts.gemv_norm_fold);
  if (opts.gemv_prologue && opts.gemv_rotary) fold_rotary_epilogues(p);
  fold_split_k_into_rows(p, opts);
  count_launches(p);
  if (opts.dump) opts.dump("plan", p.describe());
  return p;
}

namespace {

// Single steps for the nodes of a failed kernel; their values all get memory.
void unfuse(PlannedSegment& p, std::vector<Step>& out, const std::vector<int>& nodes) {
  for (int j : nodes) {
    for (int k = 0; k < static_cast<int>(p.segment.nodes[j].outputs.size()); ++k) {
      const int v = p.segment.value_id(ValueRef::of(j, k));
      if (p.values[v] == ValueKind::Virtual) p.values[v] = ValueKind::Materialized;
    }
    Step s;
    s.label = std::string(op_name(p.segment.nodes[j].op)) + " #" + std::to_string(j);
    s.body = EagerStep{j};
    out.push_back(std::move(s));
  }
}

// After compilation: steps whose kernel did not compile become single steps; the summary is
// recounted.
int settle_plan(PlannedSegment& p) {
  int failed = 0;
  std::vector<Step> steps;
  for (Step& s : p.steps) {
    if (auto* fk = std::get_if<FusedKernelStep>(&s.body); fk && !fk->compiled) {
      ++failed;
      p.decisions.push_back({"run " + s.label + " unfused", "kernel not compiled: " + fk->compile_error});
      undo_partials(p, steps, *fk);
      unfuse(p, steps, fk->nodes);
      continue;
    }
    if (auto* gs = std::get_if<GemmStep>(&s.body); gs && gs->tail && !gs->tail->compiled) {
      ++failed;
      p.decisions.push_back({"run the tail of " + s.label + " unfused", "kernel not compiled: " + gs->tail->compile_error});
      const std::vector<int> nodes = gs->tail->nodes;
      gs->tail.reset();
      gs->epilogue = GemmEpilogue::None;
      steps.push_back(std::move(s));
      unfuse(p, steps, nodes);
      continue;
    }
    steps.push_back(std::move(s));
  }
  p.steps = std::move(steps);
  count_launches(p);
  return failed;
}

}  // namespace

std::vector<int> compile_plans(const std::vector<PlannedSegment*>& plans, jit::KernelCompiler& compiler,
                               const jit::CompileOptions& opts) {
  std::vector<FusedKernelStep*> steps;
  std::vector<std::shared_ptr<const jit::KernelSpec>> specs;
  for (PlannedSegment* p : plans)
    for (Step& s : p->steps)
      if (FusedKernelStep* fk = s.generated_kernel(); fk && !fk->compiled) {
        steps.push_back(fk);
        specs.push_back(fk->spec);
      }
  const auto futures = compiler.submit_batch(specs, opts);
  for (size_t i = 0; i < steps.size(); ++i) {
    jit::CompileResult r = futures[i].get();
    steps[i]->compiled = r.kernel;
    steps[i]->compile_error = r.error;
  }
  std::vector<int> failed;
  for (PlannedSegment* p : plans) failed.push_back(settle_plan(*p));
  return failed;
}

int compile_plan(PlannedSegment& p, jit::KernelCompiler& compiler, const jit::CompileOptions& opts) {
  return compile_plans({&p}, compiler, opts)[0];
}

}  // namespace livefuse::planner
