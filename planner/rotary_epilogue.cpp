#include "planner/rotary_epilogue.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>

namespace livefuse::planner {
namespace {

// What a rotary part reads: a reshape of the output of one sibling of a merged GEMM step.
struct Source {
  int step = -1;     // the GEMM step
  int sibling = -1;  // its index in GemmStep::siblings (the product's column order)
  int linear = -1, view = -1;  // the sibling's node, the reshape's
};

std::optional<Source> source_of(const PlannedSegment& p, const std::vector<int>& step_of, int x) {
  const Segment& seg = p.segment;
  const ValueRef xr = seg.value_ref(x);
  if (xr.is_external() || xr.output != 0) return std::nullopt;
  const SegmentNode& view = seg.nodes[xr.node];
  if (view.op != OpId::reshape || view.inputs.empty() || view.inputs[0].is_external() || view.inputs[0].output != 0)
    return std::nullopt;
  Source s;
  s.view = xr.node;
  s.linear = view.inputs[0].node;
  s.step = step_of[s.linear];
  const auto* gs = s.step >= 0 ? std::get_if<GemmStep>(&p.steps[s.step].body) : nullptr;
  if (!gs || !gs->merged || gs->tail || gs->partials > 1 || gs->epilogue != GemmEpilogue::None ||
      !gs->rotary.parts.empty())
    return std::nullopt;
  const auto it = std::find(gs->siblings.begin(), gs->siblings.end(), s.linear);
  if (it == gs->siblings.end()) return std::nullopt;
  s.sibling = static_cast<int>(it - gs->siblings.begin());
  return s;
}

// Whether `v` is read by `readers` alone and is not an output of the segment.
bool read_only_by(const Segment& seg, const std::vector<std::vector<std::pair<int, int>>>& users, int v,
                  const std::vector<int>& readers) {
  if (seg.is_output(seg.value_ref(v))) return false;
  for (const auto& [node, input] : users[v])
    if (std::find(readers.begin(), readers.end(), node) == readers.end()) return false;
  return true;
}

}  // namespace

void fold_rotary_epilogues(PlannedSegment& p) {
  const Segment& seg = p.segment;
  const auto users = seg.users();
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const auto* r = std::get_if<RotaryStep>(&p.steps[i].body);
    if (!r || r->parts.empty()) continue;
    std::vector<int> step_of(seg.nodes.size(), -1);
    for (size_t s = 0; s < p.steps.size(); ++s)
      for (int n : p.steps[s].nodes()) step_of[n] = static_cast<int>(s);
    std::vector<int> rotated;  // sibling index per part
    int gemm = -1;
    bool ok = true;
    for (const RotaryOperands& o : r->parts) {
      const std::optional<Source> s = source_of(p, step_of, o.x);
      ok = ok && s && (gemm < 0 || s->step == gemm) && o.cos == r->parts[0].cos && o.sin == r->parts[0].sin;
      if (!ok) break;
      gemm = s->step;
      rotated.push_back(s->sibling);
      // Only the reshape reads the sibling's output and only the rotary its view: the GEMV
      // writes neither (a call it cannot take still does, through the fallback).
      const ValueRef lin = ValueRef::of(s->linear);
      const Shape& ls = seg.shape(lin);
      ok = read_only_by(seg, users, seg.value_id(lin), {s->view}) && read_only_by(seg, users, o.x, r->nodes) &&
           ls.rank >= 1 && ls.v[ls.rank - 1] > 0 && ls.numel() == ls.v[ls.rank - 1];  // one row
      if (!ok) break;
    }
    if (!ok || gemm < 0 || gemm >= static_cast<int>(i)) continue;
    // The rotated siblings lead the product's columns (the kernel rotates a prefix of them).
    std::vector<int> sorted = rotated;
    std::sort(sorted.begin(), sorted.end());
    bool prefix = true;
    for (size_t k = 0; k < sorted.size(); ++k) prefix = prefix && sorted[k] == static_cast<int>(k);
    if (!prefix) continue;
    // cos and sin are there when the GEMM step runs: externals, or made by a step before it.
    bool ready = true;
    for (int v : {r->parts[0].cos, r->parts[0].sin}) {
      const ValueRef vr = seg.value_ref(v);
      ready = ready && (vr.is_external() || step_of[vr.node] < gemm);
    }
    if (!ready) continue;
    auto& gs = std::get<GemmStep>(p.steps[gemm].body);
    gs.rotary = std::move(std::get<RotaryStep>(p.steps[i].body));
    p.decisions.push_back({p.steps[i].label + " runs inside the GEMV of " + p.steps[gemm].label,
                           "a one-row product rotates q and k as it writes them: one launch less "
                           "(fallback: the GEMM, then the rotary's kernel)"});
    p.steps[gemm].label += " + " + p.steps[i].label + " (in the GEMV)";
    p.steps.erase(p.steps.begin() + static_cast<std::ptrdiff_t>(i));
    --i;
  }
}

#if LIVEFUSE_HAS_CUDA
bool gemv_rope_of(std::span<const RotaryArgs> parts, std::span<const Tensor> results, std::vector<Tensor>& outs,
                  cuda::GemvRope* rope) {
  if (parts.empty() || parts.size() != results.size() || parts.size() > outs.size()) return false;
  const RotaryArgs& first = parts[0];
  std::vector<Tensor> rotated(outs.size());
  int64_t cols = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    // One row ([1, 1, heads, d]), x a dense view of a sibling's output, cos and sin the same
    // for every part and broadcast over the heads.
    const RotaryArgs& a = parts[k];
    const int64_t d = a.d, heads = a.n[2];
    if (a.n[0] != 1 || a.n[1] != 1 || d != first.d || d < 2 || a.x_st[3] != 1 || (heads > 1 && a.x_st[2] != d) ||
        a.cos != first.cos || a.sin != first.sin || a.cos_st[2] != 0 || a.sin_st[2] != 0 ||
        a.cos_st[3] != first.cos_st[3] || a.sin_st[3] != first.sin_st[3] || a.dtype != first.dtype || !a.x)
      return false;
    size_t i = 0;
    while (i < outs.size() && !(outs[i].impl()->storage && outs[i].impl()->data() == a.x)) ++i;
    if (i == outs.size() || rotated[i].defined() || outs[i].numel() != heads * d || !outs[i].is_contiguous())
      return false;
    // The rotary's dense result seen in the sibling's shape: what the GEMV writes as its part.
    const TensorImpl& res = *results[k].impl();
    const TensorImpl& sib = *outs[i].impl();
    if (!res.storage || !results[k].is_contiguous() || res.numel() != sib.numel() || res.dtype != sib.dtype)
      return false;
    rotated[i] = Tensor(std::make_shared<TensorImpl>(res.storage, res.offset, sib.shape, sib.strides, sib.dtype,
                                                     sib.device));
    cols += heads * d;
  }
  // The rotated siblings lead the product's columns: the kernel rotates columns [0, cols).
  for (size_t i = 0; i < parts.size(); ++i)
    if (!rotated[i].defined()) return false;
  rope->cols = cols;
  rope->d = first.d;
  rope->cos = first.cos;
  rope->sin = first.sin;
  rope->cos_stride = first.cos_st[3];
  rope->sin_stride = first.sin_st[3];
  for (size_t i = 0; i < parts.size(); ++i) outs[i] = rotated[i];
  return true;
}
#endif

}  // namespace livefuse::planner
