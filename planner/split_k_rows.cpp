#include "planner/split_k_rows.hpp"

#include <algorithm>

#include "livefuse/error.hpp"

namespace livefuse::planner {

jit::KernelPart read_as_partials(const jit::KernelPart& part, int k, int slices, bool with_bias) {
  using jit::Instr;
  using jit::InstrKind;
  LF_ASSERT(k >= 0 && k < static_cast<int>(part.inputs.size()) && slices >= 1, "read_as_partials: input ", k);
  const DType dt = part.inputs[k].dtype;
  LF_ASSERT(part.inputs[k].space == jit::Space::Full, "read_as_partials: the product is not a full-row input");
  jit::KernelPart out;
  for (int i = 0; i < static_cast<int>(part.inputs.size()); ++i) {
    if (i != k) out.inputs.push_back(part.inputs[i]);
    else
      for (int s = 0; s < slices; ++s) out.inputs.push_back({DType::f32, jit::Space::Full});
  }
  const int bias_io = static_cast<int>(out.inputs.size());
  if (with_bias) out.inputs.push_back({dt, jit::Space::Full});
  out.outputs = part.outputs;
  const auto emit = [&](Instr in) {
    out.instrs.push_back(in);
    return static_cast<int>(out.instrs.size()) - 1;
  };
  const auto load = [&](int io, DType d) {
    Instr in;
    in.kind = InstrKind::Load;
    in.dtype = in.compute = d;
    in.io = io;
    return emit(in);
  };
  const auto op = [&](OpId id, std::initializer_list<int> args, DType result) {
    Instr in;
    in.kind = InstrKind::Op;
    in.op = id;
    in.nargs = static_cast<int8_t>(args.size());
    DType operands[3];
    int a = 0;
    for (int x : args) {
      in.arg[a] = x;
      operands[a++] = out.instrs[x].dtype;
    }
    in.dtype = result;
    in.compute = jit::compute_type(id, std::span<const DType>(operands, args.size()), result);
    return emit(in);
  };
  std::vector<int> map(part.instrs.size(), -1);
  for (size_t i = 0; i < part.instrs.size(); ++i) {
    Instr in = part.instrs[i];
    if (in.kind == InstrKind::Load && in.io == k) {
      int sum = load(k, DType::f32);
      for (int s = 1; s < slices; ++s) sum = op(OpId::add, {sum, load(k + s, DType::f32)}, DType::f32);
      map[i] = with_bias ? op(OpId::add, {sum, load(bias_io, dt)}, dt) : op(OpId::cast, {sum}, dt);
      continue;
    }
    if (in.kind == InstrKind::Load && in.io > k) in.io += slices - 1;
    for (int a = 0; a < in.nargs; ++a) in.arg[a] = map[in.arg[a]];
    map[i] = emit(in);
  }
  return out;
}

namespace {

// The one row kernel step reading value `v`, when every reader of `v` is a node of it; else -1.
int sole_row_reader(const PlannedSegment& p, int v) {
  const Segment& seg = p.segment;
  int step = -1, readers = 0, in_step = 0;
  for (size_t s = 0; s < p.steps.size(); ++s)
    for (int n : p.steps[s].nodes())
      for (const ValueRef& r : seg.nodes[n].inputs) {
        if (seg.value_id(r) != v) continue;
        ++readers;
        const auto* fk = std::get_if<FusedKernelStep>(&p.steps[s].body);
        if (!fk || (step >= 0 && step != static_cast<int>(s))) continue;
        step = static_cast<int>(s);
        ++in_step;
      }
  if (step < 0 || readers != in_step) return -1;
  const auto& fk = std::get<FusedKernelStep>(p.steps[step].body);
  if (!fk.spec || fk.spec->kind != jit::SpecKind::Row || fk.spec->parts.size() != 1 || !fk.parts[0].slice.empty())
    return -1;
  return static_cast<int>(std::count(fk.parts[0].inputs.begin(), fk.parts[0].inputs.end(), v)) == 1 ? step : -1;
}

}  // namespace

void fold_split_k_into_rows(PlannedSegment& p, const PlannerOptions& opts) {
  if (!opts.cuda || !opts.split_k) return;
  const Segment& seg = p.segment;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    auto* gs = std::get_if<GemmStep>(&p.steps[i].body);
    if (!gs || !gs->siblings.empty() || gs->prologue >= 0 || gs->tail || gs->epilogue != GemmEpilogue::None ||
        gs->partials > 1)
      continue;
    const SegmentNode& n = seg.nodes[gs->node];
    const ValueRef y = ValueRef::of(gs->node);
    const int yv = seg.value_id(y);
    const DType dt = seg.dtype(y);
    if (n.op != OpId::linear || seg.is_output(y) || p.values[yv] != ValueKind::Materialized ||
        (dt != DType::f16 && dt != DType::bf16))
      continue;
    const Shape& ws = seg.shape(n.inputs[1]);
    const Shape& ys = seg.shape(y);
    const bool bias = n.attrs.i[0] != 0;
    if (ws.rank != 2 || ys.rank < 1 || ws.v[0] == 0 || ys.v[ys.rank - 1] != ws.v[0]) continue;
    if (gemv_rows(ys)) continue;  // a few rows (a decode step's) run as the GEMV: nothing to reduce
    if (bias && (seg.shape(n.inputs[2]).rank != 1 || seg.dtype(n.inputs[2]) != dt)) continue;
    // A value whose extents vary (a decode step's) lives outside the binding sets: its storage
    // would be allocated per run, inside the graph being replayed.
    const auto& vary = static_cast<size_t>(yv) < seg.varying.size() ? seg.varying[static_cast<size_t>(yv)]
                                                                     : std::vector<bool>{};
    if (std::find(vary.begin(), vary.end(), true) != vary.end()) continue;
    const int r = sole_row_reader(p, yv);
    if (r < static_cast<int>(i)) continue;
    const int64_t cols = ws.v[0], k = ws.v[1], rows = ys.numel() / cols;
    const int slices = opts.split_k(rows, cols, k, dt, bias);
    if (slices < 2) continue;
    auto& fk = std::get<FusedKernelStep>(p.steps[r].body);
    PartIo& io = fk.parts[0];
    const int at = static_cast<int>(std::find(io.inputs.begin(), io.inputs.end(), yv) - io.inputs.begin());
    auto spec = std::make_shared<jit::KernelSpec>(*fk.spec);
    spec->parts[0] = read_as_partials(spec->parts[0], at, slices, bias);
    spec->name += " (+ " + std::to_string(slices) + " partial products)";
    jit::validate(*spec);
    fk.spec = spec;
    io.inputs.erase(io.inputs.begin() + at);
    io.inputs.insert(io.inputs.begin() + at, static_cast<size_t>(slices), yv);
    io.slice.assign(io.inputs.size(), -1);
    for (int s = 0; s < slices; ++s) io.slice[static_cast<size_t>(at + s)] = s;
    if (bias) {
      io.inputs.push_back(seg.value_id(n.inputs[2]));
      io.slice.push_back(-1);
    }
    gs->partials = slices;
    p.partials.resize(p.values.size(), 0);
    p.partials[static_cast<size_t>(yv)] = slices;
    p.decisions.push_back({p.steps[i].label + " writes " + std::to_string(slices) + " f32 partial products over K; " +
                               p.steps[r].label + " adds them up" + (bias ? " with the bias" : ""),
                           "cuBLASLt splits this GEMM's K " + std::to_string(slices) +
                               " ways and adds the parts in a kernel of its own: the row kernel reads the product "
                               "anyway (pass split_k_rows)"});
    p.steps[i].label += " (K in " + std::to_string(slices) + " f32 partials)";
    p.steps[r].label += " (+ partials)";
  }
}

void undo_partials(PlannedSegment& p, std::vector<Step>& steps, const FusedKernelStep& reader) {
  for (const PartIo& io : reader.parts)
    for (size_t k = 0; k < io.slice.size(); ++k) {
      if (io.slice[k] < 0) continue;
      const int y = io.inputs[k];
      if (static_cast<size_t>(y) < p.partials.size()) p.partials[static_cast<size_t>(y)] = 0;
      for (Step& s : steps)
        if (auto* gs = std::get_if<GemmStep>(&s.body);
            gs && gs->partials > 1 && p.segment.value_id(ValueRef::of(gs->node)) == y) {
          gs->partials = 0;
          s.label += " (its product written: the row kernel did not compile)";
        }
    }
}

}  // namespace livefuse::planner
