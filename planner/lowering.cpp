#include "planner/lowering.hpp"

#include <algorithm>
#include <map>

#include "livefuse/error.hpp"
#include "planner/passes.hpp"

namespace livefuse::planner {
namespace {

using jit::PartBuilder;
using jit::Space;

int lower_elementwise(PartBuilder& b, const SegmentNode& n, std::span<const int> args, DType out) {
  const std::array<double, 2> s = {n.attrs.f[0], n.attrs.f[1]};
  if (n.op == OpId::custom) return b.custom(n.attrs.custom_id, args, out);
  if (n.op == OpId::contiguous) return b.op(OpId::cast, {args[0]}, out);
  return b.op(n.op, args, out, s, n.attrs.scalar_operand);
}

// Final conversion of an f32 row result to the node's dtype.
int to_dtype(PartBuilder& b, int v, DType out) { return out == DType::f32 ? v : b.op(OpId::cast, {v}, out); }

int lower_row_op(PartBuilder& b, const SegmentNode& n, std::span<const int> args, DType out) {
  const DType f = DType::f32;
  const double eps = n.attrs.f[0];
  switch (n.op) {
    case OpId::sum: return b.reduce_sum(args[0], out);
    case OpId::max: return b.reduce_max(args[0], out);
    case OpId::mean: {
      const int s = b.reduce_sum(args[0], f);
      return b.op(OpId::div, {s, b.col_count()}, out);
    }
    case OpId::softmax: {
      const double scale = n.attrs.f[0];
      const bool has_mask = n.attrs.ni > 0 && n.attrs.i[0] != 0;
      int z = args[0];
      if (scale != 1.0) z = b.op(OpId::mul, {z}, f, {scale, 0}, true);
      if (has_mask) z = b.op(OpId::add, {z, args[1]}, f);
      const int m = b.reduce_max(z, f);
      const int e = b.op(OpId::exp, {b.op(OpId::sub, {z, m}, f)}, f);
      const int inv = b.op(OpId::div, {b.constant(1.0), b.reduce_sum(e, f)}, f);
      return b.op(OpId::mul, {e, inv}, out);
    }
    case OpId::layer_norm: {
      const bool has_w = n.attrs.i[0] != 0, has_b = n.attrs.i[1] != 0;
      const int c = b.col_count();
      const int mean = b.op(OpId::div, {b.reduce_sum(args[0], f), c}, f);
      const int d = b.op(OpId::sub, {args[0], mean}, f);
      const int var = b.op(OpId::div, {b.reduce_sum(b.op(OpId::mul, {d, d}, f), f), c}, f);
      const int rstd = b.op(OpId::rsqrt, {b.op(OpId::add, {var}, f, {eps, 0}, true)}, f);
      int y = b.op(OpId::mul, {d, rstd}, f);
      if (has_w) y = b.op(OpId::mul, {y, args[1]}, f);
      if (has_b) y = b.op(OpId::add, {y, args[has_w ? 2 : 1]}, f);
      return to_dtype(b, y, out);
    }
    case OpId::rms_norm: {
      const bool has_w = n.attrs.i[0] != 0;
      const int ss = b.reduce_sum(b.op(OpId::mul, {args[0], args[0]}, f), f);
      const int ms = b.op(OpId::div, {ss, b.col_count()}, f);
      const int r = b.op(OpId::rsqrt, {b.op(OpId::add, {ms}, f, {eps, 0}, true)}, f);
      int y = b.op(OpId::mul, {args[0], r}, f);
      if (has_w) y = b.op(OpId::mul, {y, args[1]}, f);
      return to_dtype(b, y, out);
    }
    default: break;
  }
  LF_ASSERT(false, op_name(n.op), " is not a row op");
  return -1;
}

}  // namespace

jit::KernelPart lower_group(const FusionGraph& g, const Group& gr, PartIo* io) {
  PartBuilder b;
  const bool row = gr.kind == GroupKind::Row;
  const Shape& f = gr.shape;
  std::map<int, int> instr_of;
  std::map<std::pair<int, int>, int> loads;
  const std::vector<int> outs = group_outputs(g, gr);
  auto is_out = [&](int v) { return std::find(outs.begin(), outs.end(), v) != outs.end(); };
  auto row_space = [&](const Shape& s) { return s.rank == f.rank ? Space::RowKeep : Space::RowFlat; };

  io->inputs.clear();
  io->outputs.clear();
  io->shape_value = -1;
  for (int j : gr.nodes) {
    const SegmentNode& n = g.seg.nodes[j];
    const bool full = !row || g.full_space[j];
    // Row ops read per-element operands even when their result is per row.
    const bool operands_full = full || g.role[j] == Role::Row;
    const Shape& out_shape = n.outputs[0].shape;
    int args[3] = {-1, -1, -1};
    const int nargs = static_cast<int>(std::min<size_t>(n.inputs.size(), 3));
    for (int k = 0; k < nargs; ++k) {
      const ValueRef& r = n.inputs[k];
      const int v = g.seg.value_id(r);
      if (g.producer_group(r) == gr.id) {
        args[k] = instr_of.at(v);
        continue;
      }
      const Space sp = operands_full ? Space::Full : row_space(out_shape);
      auto [it, fresh] = loads.emplace(std::make_pair(v, static_cast<int>(sp)), -1);
      if (fresh) {
        it->second = b.load(g.seg.dtype(r), sp);
        io->inputs.push_back(v);
      }
      args[k] = it->second;
    }
    const DType out = n.outputs[0].dtype;
    const std::span<const int> a(args, nargs);
    const int res = g.role[j] == Role::Row ? lower_row_op(b, n, a, out) : lower_elementwise(b, n, a, out);
    const int v = g.seg.value_id(ValueRef::of(j));
    instr_of[v] = res;
    if (io->shape_value < 0 && !row) io->shape_value = v;
    if (is_out(v)) {
      b.store(res, out, full ? Space::Full : row_space(out_shape));
      io->outputs.push_back(v);
    }
  }
  if (row) {  // the rows are the input of the first row op
    for (int j : gr.nodes)
      if (g.role[j] == Role::Row) {
        io->shape_value = g.seg.value_id(g.seg.nodes[j].inputs[0]);
        break;
      }
  }
  return b.take();
}

}  // namespace livefuse::planner
