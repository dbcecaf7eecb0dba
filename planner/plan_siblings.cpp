// Merged sibling GEMMs: one product over the concatenated weights, every sibling's output dense
// as eager gives it (DESIGN, "Eager semantics": the outputs may be handed to the program).
//   CPU   the blocked GEMM stores each column range of a tile straight into its sibling's output
//         (GemmProblem::Split): one pass, no copy after it.
//   CUDA  siblings of one width N (Q/K/V, gate/up): with LIVEFUSE_GEMM_TC=1 livefuse's
//         tensor-core GEMM writes the columns of sibling i into its dense output as it stores the
//         product (gemm_tc.hpp, one launch, where it takes the shapes); else (the default: it is
//         the slower) one strided-batched cuBLASLt GEMM, batch i
//         reading weight rows [i N, (i + 1) N) and the one input (batch stride 0), writes
//         sibling i's dense output, the outputs laid back to back in one allocation
//         (allocate_storage_run; FusedPlan's binding sets allocate them so): one launch.
//         Otherwise cuBLASLt (with the BIAS epilogue over the concatenated bias) writes the
//         [.., sum N] product into a plan-owned buffer, and one split kernel copies the column
//         ranges out: two launches for any number of siblings. Column-slice views of the product
//         would save the split, but views made by later calls keep the dense strides they were
//         recorded with, and a slice can escape to the program: dense outputs are what keeps
//         every value equal to eager's. Few rows: the GEMV writes every output (one launch).
#include "planner/plan_siblings.hpp"

#include "kernels/cpu/gemm.hpp"
#include "livefuse/error.hpp"
#include "livefuse/stream.hpp"
#include "planner/merged_weights.hpp"
#include "planner/passes.hpp"
#include "planner/rotary_epilogue.hpp"
#include "planner/rotary_step.hpp"
#include "runtime/memory_pool.hpp"
#include "runtime/executor.hpp"
#if LIVEFUSE_HAS_CUDA
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/split_columns.hpp"
#endif

namespace livefuse::planner {
namespace {

struct Operands {
  Tensor x;
  std::vector<Tensor> weights, biases, outs;
  int64_t cols = 0;  // sum of N_i
};

Operands operands(const PlannedSegment& p, const GemmStep& gs, std::span<const Tensor> values) {
  const Segment& seg = p.segment;
  Operands o;
  for (int j : gs.siblings) {
    const SegmentNode& n = seg.nodes[j];
    o.x = values[seg.value_id(n.inputs[0])];
    o.weights.push_back(values[seg.value_id(n.inputs[1])]);
    if (n.attrs.i[0] != 0) o.biases.push_back(values[seg.value_id(n.inputs[2])]);
    o.outs.push_back(values[seg.value_id(ValueRef::of(j))]);
    o.cols += o.weights.back().shape()[0];
  }
  return o;
}

Stream stream_on(Device d, void* handle) {
  if (d.is_cpu()) return Stream::current(d);
  const Stream cur = Stream::current(d);
  return cur.handle() == handle ? cur : Stream::wrap(handle, d);
}

// The leader's linear call, reading the concatenated weights.
OpCall merged_call(const PlannedSegment& p, const GemmStep& gs, std::span<const Tensor> values,
                   const MergedWeights::Copy& c) {
  OpCall call = p.segment.call_of(gs.node, values);
  call.inputs[1] = c.weight;
  if (c.bias.defined()) call.inputs[2] = c.bias;
  return call;
}

#if LIVEFUSE_HAS_CUDA
// Outputs (of one size: batched_siblings) none of which has storage yet get one run of storages, evenly spaced
// (allocate_storage_run): what run_sibling_linears writes in one launch. Outputs already bound
// (the plan's binding sets allocate them as a run too, or the caller's own) are left as they are.
void give_storage_run(std::span<const Tensor> outs, const Stream& st) {
  for (const Tensor& t : outs)
    if (t.impl()->storage) return;
  const auto run = allocate_storage_run(outs[0].device(), outs[0].impl()->nbytes(),
                                        static_cast<int>(outs.size()), st.handle());
  for (size_t i = 0; i < outs.size(); ++i) detail::ensure_storage(outs[i], run[i]);
}
#endif

#if LIVEFUSE_HAS_CUDA
// A Gated step's activation as the GEMV names it (take_gate admits only these).
uint8_t gemv_gate_act(OpId op) {
  const cuda::GemvAct a = op == OpId::silu        ? cuda::GemvAct::silu
                          : op == OpId::gelu      ? cuda::GemvAct::gelu
                          : op == OpId::gelu_tanh ? cuda::GemvAct::gelu_tanh
                                                  : cuda::GemvAct::relu;
  return static_cast<uint8_t>(a);
}
#endif

Shape merged_shape(const Tensor& out, int64_t cols) {
  Shape s = out.shape();
  s.v[s.rank - 1] = cols;
  return s;
}

}  // namespace

namespace detail {

// One width: outputs of one size, back to back (the batched GEMM's layout). Others -- the
// few-row GEMV over grouped-query widths, say -- keep a buffer each.
bool batched_siblings(const Segment& seg, const GemmStep& gs) {
  return !gs.siblings.empty() && !gs.split_kernel && siblings_one_width(seg, gs.siblings);
}

std::vector<std::vector<int>> sibling_output_runs(const PlannedSegment& p) {
  std::vector<std::vector<int>> runs;
  for (const Step& s : p.steps) {
    const auto* gs = std::get_if<GemmStep>(&s.body);
    if (!gs || !batched_siblings(p.segment, *gs)) continue;
    std::vector<int>& r = runs.emplace_back();
    for (int j : gs->siblings) r.push_back(p.segment.value_id(ValueRef::of(j)));
  }
  return runs;
}

bool run_merged_gemm_cpu(const PlannedSegment& p, const GemmStep& gs,
                         std::span<const Tensor> values) {
  Operands o = operands(p, gs, values);
  if (o.outs.size() > static_cast<size_t>(cpu::GemmProblem::Split::kMaxParts)) return false;
  const MergedWeights::Copy c = gs.merged->get(o.weights, o.biases, Stream::current(Device::cpu()));
  if (!c.defined()) return false;
  for (const Tensor& t : o.outs) {
    ensure_storage(t);
    if (!t.is_contiguous()) return false;  // a caller's own binding: leave it to the siblings
  }
  if (o.outs[0].numel() == 0) return true;
  cpu::GemmProblem prob = cpu::linear_problem(merged_call(p, gs, values, c), o.outs[0]);
  prob.out = nullptr;
  prob.split.parts = static_cast<int>(o.outs.size());
  for (size_t i = 0; i < o.outs.size(); ++i) {
    prob.split.out[i] = static_cast<std::byte*>(o.outs[i].impl()->data());
    prob.split.begin[i + 1] = prob.split.begin[i] + o.weights[i].shape()[0];
  }
  cpu::gemm(prob);
  return true;
}

bool launch_merged_gemm_cuda(const PlannedSegment& p, const GemmStep& gs,
                             std::span<const Tensor> values, void* stream) {
#if LIVEFUSE_HAS_CUDA
  Operands o = operands(p, gs, values);
  const Stream st = stream_on(o.x.device(), stream);
  const MergedWeights::Copy c = gs.merged->get(o.weights, o.biases, st);
  if (!c.defined()) return false;
  const bool batched = batched_siblings(p.segment, gs);
  if (batched) give_storage_run(o.outs, st);
  for (const Tensor& t : o.outs) {
    ensure_storage(t);
    if (!t.is_contiguous()) return false;
  }
  if (o.outs[0].numel() == 0) return true;
  // Few rows: one GEMV writes every sibling's output (no product, no split).
  if (cuda::run_gemv_split(nullptr, merged_call(p, gs, values, c), o.outs, st.handle())) return true;
  // One width: the tensor-core GEMM (LIVEFUSE_GEMM_TC=1) writes each sibling's columns where its
  // output lives; or, outputs evenly spaced, one strided-batched cuBLASLt GEMM writes them in place.
  if (batched && cuda::run_linear_tc(merged_call(p, gs, values, c), cuda::TcAct::none, o.outs, st.handle()))
    return true;
  if (batched && cuda::run_sibling_linears(merged_call(p, gs, values, c), o.outs, st.handle()))
    return true;
  if (o.outs.size() > static_cast<size_t>(cuda::kMaxSplitParts)) return false;
  const Tensor product = gs.merged->scratch(merged_shape(o.outs[0], o.cols), o.outs[0].dtype(), st);
  if (!product.defined()) return false;
  Executor::run_eager_into(merged_call(p, gs, values, c), TensorList{product}, st);
  cuda::SplitColumnsArgs a;
  a.src = product.impl()->data();
  a.cols = o.cols;
  a.rows = product.numel() / o.cols;
  a.parts = static_cast<int>(o.outs.size());
  a.elem_bytes = static_cast<int>(dtype_size(product.dtype()));
  for (size_t i = 0; i < o.outs.size(); ++i) {
    a.dst[i] = o.outs[i].impl()->data();
    a.begin[i + 1] = a.begin[i] + o.weights[i].shape()[0];
  }
  cuda::split_columns(a, st.handle());
  return true;
#else
  (void)p, (void)gs, (void)values, (void)stream;
  return false;
#endif
}

bool launch_merged_gemv_cuda(const PlannedSegment& p, const GemmStep& gs, std::span<const Tensor> values,
                             const OpCall* norm, bool round_first, void* stream) {
#if LIVEFUSE_HAS_CUDA
  const bool gated = gs.epilogue == GemmEpilogue::Gated && gs.tail && gs.final_value >= 0;
  if (!gated && !norm) return false;  // the merged GEMM's own path takes a plain GEMV
  Operands o = operands(p, gs, values);
  const Stream st = stream_on(o.outs[0].device(), stream);
  const MergedWeights::Copy c = gs.merged->get(o.weights, o.biases, st);
  if (!c.defined()) return false;
  if (gated) {
    const Tensor& out = values[gs.final_value];
    ensure_storage(out);
    return cuda::run_gemv_gated(norm, merged_call(p, gs, values, c), gemv_gate_act(gs.act), gs.gate_second,
                                out, st.handle(), round_first);
  }
  for (const Tensor& t : o.outs) ensure_storage(t);
  return cuda::run_gemv_split(norm, merged_call(p, gs, values, c), o.outs, st.handle(), round_first);
#else
  (void)p, (void)gs, (void)values, (void)norm, (void)round_first, (void)stream;
  return false;
#endif
}

bool launch_merged_gemv_rotary_cuda(const PlannedSegment& p, const GemmStep& gs, std::span<const Tensor> values,
                                    const OpCall* norm, bool round_first, void* stream) {
#if LIVEFUSE_HAS_CUDA
  if (gs.rotary.parts.empty() || gs.tail) return false;
  Operands o = operands(p, gs, values);
  const Stream st = stream_on(o.outs[0].device(), stream);
  const MergedWeights::Copy c = gs.merged->get(o.weights, o.biases, st);
  if (!c.defined()) return false;
  for (const Tensor& t : o.outs) ensure_storage(t);
  RotaryArgs parts[kRotaryMaxParts];
  Tensor results[kRotaryMaxParts];
  const int n = bind_rotary(gs.rotary, values, parts, results);
  cuda::GemvRope rope;
  if (!gemv_rope_of(std::span<const RotaryArgs>(parts, n), std::span<const Tensor>(results, n), o.outs, &rope))
    return false;
  return cuda::run_gemv_split(norm, merged_call(p, gs, values, c), o.outs, st.handle(), round_first, &rope);
#else
  (void)p, (void)gs, (void)values, (void)norm, (void)round_first, (void)stream;
  return false;
#endif
}

}  // namespace detail

uint64_t prepare_merged_weights(const PlannedSegment& p, std::span<const Tensor> values,
                                void* stream) {
  uint64_t h = 0x51b1;
  auto mix = [&](const void* ptr) {
    h = (h ^ (reinterpret_cast<uintptr_t>(ptr) * 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
  };
  for (const Step& s : p.steps) {
    const auto* gs = std::get_if<GemmStep>(&s.body);
    if (!gs || gs->siblings.empty()) continue;
    const Operands o = operands(p, *gs, values);
    const Stream st = stream_on(o.x.device(), stream);
    const MergedWeights::Copy c = gs->merged->get(o.weights, o.biases, st);
    mix(c.defined() ? c.weight.impl()->storage->ptr : nullptr);
    mix(c.bias.defined() ? c.bias.impl()->storage->ptr : nullptr);
    if (o.x.device().is_cuda() && gs->split_kernel) {
      const Tensor product =
          gs->merged->scratch(merged_shape(o.outs[0], o.cols), o.outs[0].dtype(), st);
      mix(product.defined() ? product.impl()->storage->ptr : nullptr);
    }
  }
  return h;
}

}  // namespace livefuse::planner
