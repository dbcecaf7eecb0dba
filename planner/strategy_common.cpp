#include <algorithm>

#include "kernels/jit/render.hpp"
#include "kernels/jit/row_schedule.hpp"
#include "livefuse/error.hpp"
#include "planner/lowering.hpp"
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

Step single_group_kernel(const FusionGraph& g, const Group& gr, jit::SpecKind kind,
                         const std::string& label) {
  auto spec = std::make_shared<jit::KernelSpec>();
  spec->kind = kind;
  spec->name = label + " " + g.nodes_str(gr.nodes);
  FusedKernelStep fk;
  PartIo io;
  spec->parts.push_back(lower_group(g, gr, &io));
  fk.parts.push_back(io);
  fk.nodes = gr.nodes;
  spec->variants = choose_variants(g, *spec, fk.parts);
  fk.spec = spec;
  Step s;
  s.label = spec->name;
  s.body = std::move(fk);
  return s;
}

uint32_t choose_variants(const FusionGraph& g, const jit::KernelSpec& spec, const std::vector<PartIo>& parts) {
  using jit::Variant;
  const Segment& seg = g.seg;
  constexpr int64_t kBig = int64_t{1} << 30;  // 2x headroom under int32 for shapes that grow
  bool big = false, dense = true, exact = true;
  const int pack = spec.kind == jit::SpecKind::Pointwise ? jit::pointwise_vec_width(spec) : 1;
  for (size_t p = 0; p < parts.size(); ++p) {
    const Shape& f = seg.shape(seg.value_ref(parts[p].shape_value));
    big = big || f.numel() >= kBig;
    // Exact when numel stays a multiple of VEC for every size the varying dims may take: the
    // product of the dims that did not vary is one.
    const int sv = parts[p].shape_value;
    int64_t fixed = 1;
    for (int d = 0; d < f.rank; ++d) {
      const bool varies = sv < static_cast<int>(seg.varying.size()) && d < static_cast<int>(seg.varying[sv].size()) &&
                          seg.varying[sv][d];
      if (!varies) fixed *= f.v[d];
    }
    exact = exact && fixed % pack == 0;
    for (int v : parts[p].inputs) {
      const ValueRef r = seg.value_ref(v);
      const Shape& s = seg.shape(r);
      big = big || s.numel() >= kBig;
      bool contiguous = g.value_kind.empty() || g.value_kind[v] != ValueKind::View;
      if (r.is_external()) {
        const ExternalInfo& e = seg.externals[r.external];
        contiguous = e.strides.rank != e.shape.rank || e.strides == contiguous_strides(e.shape);
      }
      dense = dense && contiguous && s == f;
    }
  }
  if (spec.kind == jit::SpecKind::Pointwise) {
    // Exact: no tail after the packs; a launch with one compiles the sibling variant then.
    if (dense && exact) return jit::variant_bit(big ? Variant::VecExactI64 : Variant::VecExactI32);
    if (dense) return jit::variant_bit(big ? Variant::VecI64 : Variant::VecI32);
    return jit::variant_bit(big ? Variant::StridedI64 : Variant::StridedI32);
  }
  const Shape& f = seg.shape(seg.value_ref(parts[0].shape_value));
  const int64_t cols = f.rank ? f.v[f.rank - 1] : 1;
  const jit::KernelPart& part = spec.parts[0];
  const int ncache = jit::schedule_row(part, jit::RowCacheMode::CacheFloat).ncache;
  const bool cache = ncache > 0 && static_cast<int64_t>(ncache) * cols * 4 <= 48 * 1024;
  // 16-byte column packs when every per-element operand walks its last dim with stride 1. A view
  // made inside the plan (a decoder head's slice of the last position) has strides and an
  // address known only at launch: the packed and the one-column variant are both compiled, and
  // the launch takes packs where the view allows them (cuda_launch.cpp checks strides and
  // alignment). Asked for the one-column variant alone, such a row never ran in packs: the GPT-2
  // head's layer_norm over one row took 16.2 us against ~4 for the layers' (H200, ncu).
  const int64_t rv = jit::row_vec_width(part);
  bool vec = rv > 1 && cols % rv == 0, through_view = false;
  for (size_t k = 0; k < part.inputs.size(); ++k) {
    if (part.inputs[k].space != jit::Space::Full) continue;
    const int v = parts[0].inputs[k];
    const ValueRef r = seg.value_ref(v);
    const Shape& s = seg.shape(r);
    bool unit = s.rank > 0 && s.v[s.rank - 1] == cols;
    through_view = through_view || (!g.value_kind.empty() && g.value_kind[v] == ValueKind::View);
    if (r.is_external()) {
      const ExternalInfo& e = seg.externals[r.external];
      unit = unit && (e.strides.rank != e.shape.rank || e.strides.v[e.shape.rank - 1] == 1);
    }
    vec = vec && unit;
  }
  const Variant one = cache ? (big ? Variant::CacheI64 : Variant::CacheI32) : (big ? Variant::RecomputeI64 : Variant::RecomputeI32);
  if (!vec) return jit::variant_bit(one);
  const Variant packed =
      cache ? (big ? Variant::VecCacheI64 : Variant::VecCacheI32) : (big ? Variant::VecRecomputeI64 : Variant::VecRecomputeI32);
  return jit::variant_bit(packed) | (through_view ? jit::variant_bit(one) : 0u);
}

FusedKernelStep* Step::generated_kernel() {
  if (auto* gs = std::get_if<GemmStep>(&body)) return gs->tail.get();
  return std::get_if<FusedKernelStep>(&body);
}

std::vector<int> Step::nodes() const {
  if (const auto* f = std::get_if<FusedKernelStep>(&body)) return f->nodes;
  if (const auto* a = std::get_if<AttentionStep>(&body)) return a->nodes;
  if (const auto* r = std::get_if<RotaryStep>(&body)) return r->nodes;
  if (const auto* g = std::get_if<GemmStep>(&body)) {
    std::vector<int> n = g->siblings.empty() ? std::vector<int>{g->node} : g->siblings;
    const std::vector<int> pro = g->prologue_nodes();
    n.insert(n.begin(), pro.begin(), pro.end());
    if (g->tail) n.insert(n.end(), g->tail->nodes.begin(), g->tail->nodes.end());
    n.insert(n.end(), g->rotary.nodes.begin(), g->rotary.nodes.end());
    return n;
  }
  if (const auto* e = std::get_if<EagerStep>(&body)) return {e->node};
  if (const auto* v = std::get_if<ViewStep>(&body)) return {v->node};
  return {std::get<OpaqueStep>(body).node};
}

int Step::launches() const {
  if (const auto* g = std::get_if<GemmStep>(&body))
    return 1 + ((g->tail && g->epilogue == GemmEpilogue::None) || g->split_kernel ? 1 : 0);
  if (std::holds_alternative<ViewStep>(body)) return 0;
  return 1;
}

const Strategy& pointwise_strategy();
const Strategy& row_strategy();
const Strategy& gemm_strategy();
const Strategy& single_strategy();
const Strategy& attention_strategy();
const Strategy& rotary_strategy();

const Strategy& strategy_for(GroupKind kind) {
  switch (kind) {
    case GroupKind::Pointwise: return pointwise_strategy();
    case GroupKind::Row: return row_strategy();
    case GroupKind::Gemm: return gemm_strategy();
    case GroupKind::Attention: return attention_strategy();
    case GroupKind::Rotary: return rotary_strategy();
    default: return single_strategy();
  }
}

}  // namespace livefuse::planner
