// tune_plan_gemms: the plan's GEMMs, run once each under cuda::GemmTuning (gemm_tuning.hpp).
//
// The tuned table is keyed by everything cuBLASLt sees (shapes, leading dims, batch strides,
// pointer alignments: gemm_lt.cpp's GemmKey), so the scratch operands mirror what the plan's
// launches will bind: node outputs dense in fresh pool blocks (256-byte aligned, as
// ensure_storage gives them), externals with their representative strides, and views made by
// running their own view ops over those -- the same layouts, offsets and alignments. A run
// whose real operands differ (a caller's view with other strides) misses the table and takes
// the heuristic's choice, as before. The step paths are those launch_step_cuda takes: the
// epilogue runner for an epilogue step, one linear over the concatenated weights for merged
// siblings (plan_siblings.cpp), the plain GEMM otherwise.
#include "planner/gemm_tuning.hpp"

#include <map>
#include <mutex>
#include <string>

#include "livefuse/config.hpp"
#include "livefuse/error.hpp"
#include "livefuse/stream.hpp"
#include "planner/plan_siblings.hpp"
#include "runtime/executor.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/memory_pool.hpp"
#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/split_columns.hpp"
#endif

namespace livefuse::planner {

#if LIVEFUSE_HAS_CUDA
namespace {

// The planner's stream on `d`: made once, kept (Stream::create's streams live as long as the
// process). Tuning never touches a stream the program uses.
Stream planner_stream(Device d) {
  static std::mutex mu;
  // Leaked: built on the planner thread, it must outlive the exit handler that lets that thread
  // finish its job (a static built after that handler's registration is destroyed before it).
  static auto& streams = *new std::map<int, Stream>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = streams.find(d.index);
  if (it == streams.end()) it = streams.emplace(d.index, Stream::create(d)).first;
  return it->second;
}

bool is_view(OpId op) {
  return op == OpId::reshape || op == OpId::permute || op == OpId::slice || op == OpId::expand;
}

// Scratch values of one segment, made on demand: uniform in [-1, 1) for floating values (a
// GEMM's speed does not depend on them, but the tuning checks each candidate's result against
// the top-1's, which zeros would not tell apart), zeros otherwise.
class Scratch {
 public:
  Scratch(const PlannedSegment& p, Device d, const Stream& st)
      : seg_(p.segment), d_(d), st_(st), values_(p.segment.num_values()) {}

  const Tensor& value(int v) {
    if (values_[v].defined()) return values_[v];
    const ValueRef r = seg_.value_ref(v);
    if (r.is_external()) {
      values_[v] = external(seg_.externals[r.external]);
    } else if (is_view(seg_.nodes[r.node].op)) {
      // A view of the scratch source, by the view op itself: the same strides and offset a
      // plan's View step gives it (a reshape of a non-contiguous view copies, as there).
      const SegmentNode& n = seg_.nodes[r.node];
      for (const ValueRef& in : n.inputs) (void)value(seg_.value_id(in));
      OpCall c = seg_.call_of(r.node, values_);
      const OutputInfos infos = infer_outputs(c);
      const TensorList outs = Executor::make_outputs(c, infos, d_, nullptr);
      Executor::run_eager_into(c, outs, st_);
      for (size_t k = 0; k < outs.size(); ++k)
        values_[seg_.value_id(ValueRef::of(r.node, static_cast<int>(k)))] = outs[k];
    } else {
      values_[v] = filled(seg_.shape(r), seg_.dtype(r));
    }
    return values_[v];
  }
  // Binds a value the caller made (a GEMM's output, say).
  const Tensor& dense(int v) {
    if (!values_[v].defined()) {
      const ValueRef r = seg_.value_ref(v);
      values_[v] = zeros(seg_.shape(r), seg_.dtype(r), d_);
    }
    return values_[v];
  }
  std::span<const Tensor> all() const { return values_; }
  OpCall call_of(int node) {
    for (const ValueRef& in : seg_.nodes[node].inputs) (void)value(seg_.value_id(in));
    return seg_.call_of(node, values_);
  }

  Tensor filled(const Shape& s, DType t) {
    if (!is_floating(t)) return zeros(s, t, d_);
    return rand_uniform(s, 0x7e57 + seed_++, -1.0, 1.0, t, d_);
  }

 private:
  // An external with its representative strides when they are usable (non-negative), over a
  // fresh block just large enough; dense otherwise.
  Tensor external(const ExternalInfo& e) {
    bool strided = e.strides.rank == e.shape.rank && !(e.strides == contiguous_strides(e.shape));
    int64_t extent = 1;
    for (int i = 0; strided && i < e.shape.rank; ++i) {
      if (e.strides[i] < 0) strided = false;
      else if (e.shape[i] > 0) extent += (e.shape[i] - 1) * e.strides[i];
    }
    if (!strided || e.shape.numel() == 0) return filled(e.shape, e.dtype);
    const Tensor base = filled(Shape{extent}, e.dtype);
    return Tensor(std::make_shared<TensorImpl>(base.impl()->storage, 0, e.shape, e.strides,
                                               e.dtype, d_));
  }

  const Segment& seg_;
  Device d_;
  Stream st_;
  std::vector<Tensor> values_;
  uint64_t seed_ = 0;
};

cuda::LtAct act_of(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::ReluBias:
      return cuda::LtAct::relu;
    case GemmEpilogue::GeluBias:
      return cuda::LtAct::gelu_tanh;
    default:
      return cuda::LtAct::none;
  }
}

// A plain GEMM node into a dense scratch output: run_node's path.
void run_plain(const PlannedSegment& p, int node, Scratch& s, const Stream& st) {
  OpCall c = s.call_of(node);
  TensorList outs;
  for (int k = 0; k < static_cast<int>(p.segment.nodes[node].outputs.size()); ++k)
    outs.push_back(s.dense(p.segment.value_id(ValueRef::of(node, k))));
  Executor::run_eager_into(c, outs, st);
}

// launch_merged_gemm_cuda's GEMM: the leader's linear over weights [sum N, K] (and a bias
// [sum N]); siblings of one width (batched_siblings) as the strided-batched GEMM into outputs
// back to back, as the plan's binding sets allocate them, others into a dense product shaped
// like the first sibling's output with its last dim sum N.
void run_merged(const PlannedSegment& p, const GemmStep& gs, Scratch& s, const Stream& st) {
  const Segment& seg = p.segment;
  int64_t cols = 0;
  for (int j : gs.siblings) cols += seg.shape(seg.nodes[j].inputs[1])[0];
  const SegmentNode& lead = seg.nodes[gs.node];
  OpCall c = s.call_of(gs.node);
  const Shape& w = seg.shape(lead.inputs[1]);
  c.inputs[1] = s.filled(Shape{cols, w[1]}, seg.dtype(lead.inputs[1]));
  if (lead.attrs.i[0] != 0) c.inputs[2] = s.filled(Shape{cols}, seg.dtype(lead.inputs[2]));
  Shape ps = seg.shape(ValueRef::of(gs.siblings[0]));
  const DType dt = seg.dtype(ValueRef::of(gs.node));
  const Device d = c.inputs[0].device();
  if (planner::detail::batched_siblings(seg, gs)) {
    const auto run = allocate_storage_run(d, static_cast<size_t>(ps.numel()) * dtype_size(dt),
                                          static_cast<int>(gs.siblings.size()), st.handle());
    std::vector<Tensor> outs;
    for (const auto& b : run)
      outs.emplace_back(std::make_shared<TensorImpl>(b, 0, ps, contiguous_strides(ps), dt, d));
    if (ps.numel() == 0 || cuda::run_gemv_split(nullptr, c, outs, st.handle()) ||
        cuda::run_linear_tc(c, cuda::TcAct::none, outs, st.handle()) || cuda::run_sibling_linears(c, outs, st.handle()))
      return;
  }
  if (gs.siblings.size() > static_cast<size_t>(cuda::kMaxSplitParts)) {
    for (int j : gs.siblings) run_plain(p, j, s, st);  // the plan runs them one by one too
    return;
  }
  ps.v[ps.rank - 1] = cols;
  const Tensor product = zeros(ps, dt, d);
  if (product.numel() == 0) return;
  Executor::run_eager_into(c, TensorList{product}, st);
}

void tune_step(const PlannedSegment& p, const GemmStep& gs, Scratch& s, const Stream& st) {
  if (!gs.siblings.empty()) return run_merged(p, gs, s, st);
  if (gs.partials > 1) return;  // a split GEMM (split_k_rows.hpp): cuBLASLt's top-1 for its slices
  if (gs.epilogue == GemmEpilogue::BiasAct && gs.final_value >= 0) {
    // The tensor-core GEMM's (no cuBLASLt algorithm), unless it refuses the shapes.
    const Tensor& out = s.dense(gs.final_value);
    if (cuda::run_linear_tc(s.call_of(gs.node), cuda::tc_act_of(gs.act), std::span<const Tensor>(&out, 1), st.handle())) return;
    return run_plain(p, gs.node, s, st);
  }
  if (gs.epilogue != GemmEpilogue::None && gs.final_value >= 0) {
    // The epilogue runner's path (plan.cpp's cublaslt_epilogue): act(product + bias) or
    // product (+ bias) + residual into the tail's final value.
    const bool wants_residual =
        gs.epilogue == GemmEpilogue::Residual || gs.epilogue == GemmEpilogue::BiasResidual;
    const OpCall c = s.call_of(gs.node);
    const Tensor& out = s.dense(gs.final_value);
    const Tensor* bias = gs.bias_value >= 0 ? &s.value(gs.bias_value) : nullptr;
    const Tensor* residual = gs.residual_value >= 0 ? &s.value(gs.residual_value) : nullptr;
    if ((!wants_residual || residual) &&
        cuda::run_gemm_epilogue(c, static_cast<uint8_t>(act_of(gs.epilogue)), bias, residual,
                                out, st.handle()))
      return;
  }
  run_plain(p, gs.node, s, st);
}

}  // namespace

void tune_plan_gemms(const PlannedSegment& p, Device d) {
  if (!d.is_cuda() || !config().gemm_tune || !cuda_available()) return;
  int gemms = 0, failed = 0;
  std::string first_error;
  const cuda::GemmTuneCounters before = cuda::gemm_tune_counters();
  try {
    if (cudaSetDevice(d.index) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    const Stream st = planner_stream(d);
    const StreamGuard on(st);  // scratch allocations and view copies go to the planner's stream
    const cuda::GemmTuning tuning;
    Scratch scratch(p, d, st);
    for (const Step& step : p.steps) {
      const auto* gs = std::get_if<GemmStep>(&step.body);
      if (!gs) continue;
      ++gemms;
      try {
        tune_step(p, *gs, scratch, st);
      } catch (const std::exception& e) {
        ++failed;
        if (first_error.empty()) first_error = step.label + ": " + e.what();
      }
    }
    st.synchronize();
  } catch (const std::exception& e) {
    ++failed;
    if (first_error.empty()) first_error = e.what();
  }
  const cuda::GemmTuneCounters after = cuda::gemm_tune_counters();
  if (after.tuned != before.tuned)
    record_decision("planner", "gemm tuning",
                    "tuned " + std::to_string(after.tuned - before.tuned) + " GEMM shapes",
                    std::to_string(after.improved - before.improved) +
                        " run faster with another algorithm than the heuristic's top-1 "
                        "(gemm_tuning counters)");
  if (failed)
    record_decision("planner", "gemm tuning",
                    "tuning failed for " + std::to_string(failed) + " of " +
                        std::to_string(gemms) + " GEMM steps (the heuristic's choice stays)",
                    first_error);
}

void register_gemm_tuning_counters() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_counter_source("gemm_tuning", [](CounterSink& sink) {
      const cuda::GemmTuneCounters c = cuda::gemm_tune_counters();
      sink.add("tuned", c.tuned);
      sink.add("candidates_timed", c.candidates_timed);
      sink.add("candidates_failed", c.candidates_failed);
      sink.add("candidates_wrong", c.candidates_wrong);
      sink.add("improved", c.improved);
      sink.add("skipped_capturing", c.skipped_capturing);
      sink.add("table_hits", c.table_hits);
      sink.add("entries", c.entries);
      sink.add("family_algos", c.family_algos);
      sink.add("family_representatives", c.family_representatives);
      // The summed GPU time per run of the tuned shapes (kept records): top-1 against chosen.
      double top1 = 0, chosen = 0;
      for (const cuda::GemmTuneRecord& r : cuda::gemm_tune_records())
        if (r.top1_us >= 0 && r.chosen_us >= 0) top1 += r.top1_us, chosen += r.chosen_us;
      sink.add("recorded_top1_ns", static_cast<uint64_t>(top1 * 1000.0));
      sink.add("recorded_chosen_ns", static_cast<uint64_t>(chosen * 1000.0));
    });
  });
}

#else  // CPU-only builds: cuBLASLt is not there, nothing to tune.

void tune_plan_gemms(const PlannedSegment& p, Device d) { (void)p, (void)d; }
void register_gemm_tuning_counters() {}

#endif

}  // namespace livefuse::planner
