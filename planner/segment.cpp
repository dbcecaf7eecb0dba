#include "planner/segment.hpp"

#include <algorithm>
#include <map>
#include <sstream>

#include "livefuse/error.hpp"
#include "monitor/candidate.hpp"

namespace livefuse::planner {

int Segment::num_values() const {
  int n = static_cast<int>(externals.size());
  for (const auto& nd : nodes) n += static_cast<int>(nd.outputs.size());
  return n;
}

OpCall Segment::call_of(int j, std::span<const Tensor> values) const {
  const SegmentNode& n = nodes[j];
  OpCall c;
  c.op = n.op;
  c.attrs = n.attrs;
  c.out_specs = n.out_specs.get();
  for (const ValueRef& r : n.inputs) {
    const int v = value_id(r);
    LF_ASSERT(v >= 0 && static_cast<size_t>(v) < values.size() && values[v].defined(), "value ", v,
              " (input of node ", j, ") is not bound");
    c.inputs.push_back(values[v]);
  }
  return c;
}

int Segment::value_id(const ValueRef& r) const {
  if (r.is_external()) return r.external;
  int id = static_cast<int>(externals.size());
  for (int j = 0; j < r.node; ++j) id += static_cast<int>(nodes[j].outputs.size());
  return id + r.output;
}

ValueRef Segment::value_ref(int id) const {
  if (id < static_cast<int>(externals.size())) return ValueRef::ext(id);
  id -= static_cast<int>(externals.size());
  for (int j = 0; j < static_cast<int>(nodes.size()); ++j) {
    const int n = static_cast<int>(nodes[j].outputs.size());
    if (id < n) return ValueRef::of(j, id);
    id -= n;
  }
  LF_ASSERT(false, "value id out of range");
  return {};
}

const Shape& Segment::shape(const ValueRef& r) const {
  return r.is_external() ? externals[r.external].shape : nodes[r.node].outputs[r.output].shape;
}

DType Segment::dtype(const ValueRef& r) const {
  return r.is_external() ? externals[r.external].dtype : nodes[r.node].outputs[r.output].dtype;
}

bool Segment::is_output(const ValueRef& r) const {
  return std::find(outputs.begin(), outputs.end(), r) != outputs.end();
}

std::vector<std::vector<std::pair<int, int>>> Segment::users() const {
  std::vector<std::vector<std::pair<int, int>>> u(num_values());
  for (int j = 0; j < static_cast<int>(nodes.size()); ++j)
    for (int k = 0; k < static_cast<int>(nodes[j].inputs.size()); ++k)
      u[value_id(nodes[j].inputs[k])].push_back({j, k});
  return u;
}

std::string Segment::str() const {
  std::ostringstream os;
  for (size_t e = 0; e < externals.size(); ++e)
    os << "  e" << e << ": " << dtype_name(externals[e].dtype) << externals[e].shape.str() << "\n";
  for (size_t j = 0; j < nodes.size(); ++j) {
    const SegmentNode& n = nodes[j];
    os << "  #" << j << " = " << op_name(n.op) << "(";
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const ValueRef& r = n.inputs[k];
      os << (k ? ", " : "");
      if (r.is_external()) os << "e" << r.external;
      else {
        os << "#" << r.node;
        if (r.output) os << "." << r.output;
      }
    }
    if (n.attrs.scalar_operand) os << ", " << n.attrs.f[0];
    os << ") -> ";
    for (size_t k = 0; k < n.outputs.size(); ++k)
      os << (k ? ", " : "") << dtype_name(n.outputs[k].dtype) << n.outputs[k].shape.str();
    if (is_output(ValueRef::of(static_cast<int>(j)))) os << "  [out]";
    os << "\n";
  }
  return os.str();
}

void* shape_only_tag() {
  static char tag;
  return &tag;
}

Tensor shape_only_tensor(const Shape& shape, DType dtype, const Strides& strides, Device device) {
  const Strides st = strides.rank == shape.rank ? strides : contiguous_strides(shape);
  auto impl = std::make_shared<TensorImpl>(nullptr, 0, shape, st, dtype, device);
  impl->pending = shape_only_tag();
  return Tensor(std::move(impl));
}

namespace {

// Output infos (and normalised attrs) of a node whose inputs have the given layouts.
OutputInfos infer_node(SegmentNode& n, const std::vector<Tensor>& ins) {
  OpCall call;
  call.op = n.op;
  call.attrs = n.attrs;
  for (const auto& t : ins) call.inputs.push_back(t);
  if (n.out_specs) call.out_specs = n.out_specs.get();
  OutputInfos infos = infer_outputs(call);
  n.attrs = call.attrs;
  return infos;
}

}  // namespace

// ---- builder --------------------------------------------------------------------------------
ValueRef SegmentBuilder::input(const Shape& shape, DType dtype) {
  return input_strided(shape, contiguous_strides(shape), dtype);
}

ValueRef SegmentBuilder::input_strided(const Shape& shape, const Strides& strides, DType dtype) {
  seg_.externals.push_back({shape, dtype, strides});
  return ValueRef::ext(static_cast<int>(seg_.externals.size()) - 1);
}

ValueRef SegmentBuilder::add(OpId op, std::vector<ValueRef> inputs, Attrs attrs) {
  SegmentNode n;
  n.op = op;
  n.attrs = attrs;
  n.inputs = std::move(inputs);
  std::vector<Tensor> ins;
  for (const auto& r : n.inputs) {
    if (r.is_external()) {
      const ExternalInfo& e = seg_.externals[r.external];
      ins.push_back(shape_only_tensor(e.shape, e.dtype, e.strides));
    } else {
      ins.push_back(shape_only_tensor(seg_.shape(r), seg_.dtype(r)));
    }
  }
  for (const auto& info : infer_node(n, ins)) n.outputs.push_back(info);
  seg_.nodes.push_back(std::move(n));
  return ValueRef::of(static_cast<int>(seg_.nodes.size()) - 1);
}

ValueRef SegmentBuilder::scalar_op(OpId op, ValueRef a, double s) {
  Attrs at;
  at.scalar_operand = true;
  at.push_float(s);
  return add(op, {a}, at);
}

ValueRef SegmentBuilder::opaque(uint32_t kernel_id, std::vector<ValueRef> inputs, std::vector<OutputSpec> outs) {
  SegmentNode n;
  n.op = OpId::opaque;
  n.attrs.custom_id = kernel_id;
  n.inputs = std::move(inputs);
  n.out_specs = std::make_shared<const std::vector<OutputSpec>>(std::move(outs));
  for (const auto& o : *n.out_specs) n.outputs.push_back({o.shape, o.dtype});
  seg_.nodes.push_back(std::move(n));
  return ValueRef::of(static_cast<int>(seg_.nodes.size()) - 1);
}

void SegmentBuilder::output(ValueRef v) {
  if (!seg_.is_output(v)) seg_.outputs.push_back(v);
}

// ---- adapters ---------------------------------------------------------------------------------
Segment segment_from_calls(const std::vector<OpCall>& calls, const std::vector<TensorList>& outputs,
                           const std::vector<ValueRef>& live) {
  LF_ASSERT(calls.size() == outputs.size(), "segment_from_calls: calls/outputs differ");
  Segment seg;
  std::map<const TensorImpl*, ValueRef> produced;
  std::map<const TensorImpl*, int> slots;
  for (size_t j = 0; j < calls.size(); ++j) {
    SegmentNode n;
    n.op = calls[j].op;
    n.attrs = calls[j].attrs;
    if (calls[j].out_specs) n.out_specs = std::make_shared<const std::vector<OutputSpec>>(*calls[j].out_specs);
    for (const Tensor& t : calls[j].inputs) {
      if (auto it = produced.find(t.impl()); it != produced.end()) {
        n.inputs.push_back(it->second);
        continue;
      }
      auto [it, fresh] = slots.emplace(t.impl(), static_cast<int>(seg.externals.size()));
      if (fresh) seg.externals.push_back({t.shape(), t.dtype(), t.strides()});
      n.inputs.push_back(ValueRef::ext(it->second));
    }
    for (size_t k = 0; k < outputs[j].size(); ++k) {
      n.outputs.push_back({outputs[j][k].shape(), outputs[j][k].dtype()});
      produced[outputs[j][k].impl()] = ValueRef::of(static_cast<int>(j), static_cast<int>(k));
    }
    seg.nodes.push_back(std::move(n));
  }
  seg.outputs = live;
  return seg;
}

Segment from_candidate(const monitor::Candidate& c) {
  using monitor::DimRef;
  using monitor::WireRef;
  Segment seg;
  // The most frequent shape tuple is the representative; a family counts as one tuple, the
  // newest of its lengths (its members are not in `tuples`).
  const monitor::ShapeTuple* rep = nullptr;
  for (const auto& t : c.shapes.tuples)
    if (!rep || t.count > rep->count) rep = &t;
  monitor::ShapeTuple from_family;
  if (const ShapeFamily& f = c.shapes.family; f.defined() && (!rep || c.shapes.family_count >= rep->count)) {
    f.tuple(f.n_max, from_family.dims);
    rep = &from_family;
  }
  auto dims_of = [&](DimRef::Kind kind, int index, int output, int rank, std::vector<bool>* varying) {
    Shape s;
    s.rank = rank;
    if (varying) varying->assign(rank, false);
    for (size_t k = 0; k < c.shapes.layout.size(); ++k) {
      const DimRef& d = c.shapes.layout[k];
      if (d.kind != kind || d.index != index || (kind == DimRef::Kind::output && d.output != output)) continue;
      if (d.axis < rank && rep) s.v[d.axis] = rep->dims[k];
      if (varying && d.axis < rank && k < c.shapes.varying.size()) (*varying)[d.axis] = c.shapes.varying[k];
    }
    return s;
  };
  for (size_t e = 0; e < c.externals.size(); ++e) {
    std::vector<bool> var;
    const Shape s = dims_of(DimRef::Kind::external, static_cast<int>(e), 0, c.externals[e].rank, &var);
    seg.externals.push_back({s, c.externals[e].dtype, contiguous_strides(s)});
    seg.varying.push_back(var);
  }
  for (size_t j = 0; j < c.ops.size(); ++j) {
    const monitor::CandidateOp& op = c.ops[j];
    SegmentNode n;
    n.op = op.op;
    n.attrs = op.attrs;
    for (const WireRef& w : op.inputs)
      n.inputs.push_back(w.kind == WireRef::Kind::external ? ValueRef::ext(w.index) : ValueRef::of(w.index, w.output));
    std::vector<OutputSpec> specs;
    for (size_t k = 0; k < op.out_dtypes.size(); ++k) {
      std::vector<bool> var;
      const Shape s = dims_of(DimRef::Kind::output, static_cast<int>(j), static_cast<int>(k), op.out_ranks[k], &var);
      n.outputs.push_back({s, op.out_dtypes[k]});
      specs.push_back({s, op.out_dtypes[k]});
      seg.varying.push_back(var);
    }
    // Opaque ops keep the representative output specs: their shapes are the user's business.
    if (n.op == OpId::opaque) n.out_specs = std::make_shared<const std::vector<OutputSpec>>(specs);
    seg.nodes.push_back(std::move(n));
  }
  for (const auto& l : c.liveness) {
    if (l.must_materialize()) seg.outputs.push_back(ValueRef::of(l.op, l.output));
    if ((l.used_after || l.alive_at_end) && l.op + 1u < c.ops.size())
      seg.escapes += (seg.escapes.empty() ? "" : "; ") + std::string(op_name(c.ops[l.op].op)) + " #" +
                     std::to_string(l.op) + "." + std::to_string(l.output) + " held " +
                     std::to_string(l.alive_at_end) + ", read " + std::to_string(l.used_after) + " of " +
                     std::to_string(l.observed) + (l.must_materialize() ? ": written out" : ": rare, in registers");
  }
  return seg;
}

}  // namespace livefuse::planner
