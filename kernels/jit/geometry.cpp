#include "kernels/jit/geometry.hpp"

#include <limits>

#include "livefuse/error.hpp"

namespace livefuse::jit {
namespace {

// Strides of a tensor (shape s, strides st) seen broadcast to `target` (right-aligned).
Strides broadcast_into(const Shape& s, const Strides& st, const Shape& target) {
  LF_CHECK(s.rank <= target.rank, "fused kernel", "operand of shape ", s.str(),
           " does not broadcast to ", target.str());
  Strides out;
  out.rank = target.rank;
  const int off = target.rank - s.rank;
  for (int d = 0; d < target.rank; ++d) {
    if (d < off) { out.v[d] = 0; continue; }
    const int64_t n = s.v[d - off];
    LF_CHECK(n == target.v[d] || n == 1, "fused kernel", "operand of shape ", s.str(),
             " does not broadcast to ", target.str());
    out.v[d] = (n == 1 && target.v[d] != 1) ? 0 : st.v[d - off];
  }
  return out;
}

// Drops size-1 dims and merges dims d, d+1 when every stride set walks them as one.
void coalesce(Shape& shape, std::vector<Strides*>& sets) {
  Shape ns;
  std::vector<Strides> nsets(sets.size());
  for (int d = 0; d < shape.rank; ++d) {
    if (shape.v[d] == 1) continue;
    bool merge = ns.rank > 0;
    for (size_t k = 0; merge && k < sets.size(); ++k) {
      const Strides& s = *sets[k];
      merge = nsets[k].v[ns.rank - 1] == s.v[d] * shape.v[d];
    }
    if (merge) {
      ns.v[ns.rank - 1] *= shape.v[d];
      for (size_t k = 0; k < sets.size(); ++k) nsets[k].v[ns.rank - 1] = sets[k]->v[d];
    } else {
      ns.push_back(shape.v[d]);
      for (size_t k = 0; k < sets.size(); ++k) nsets[k].push_back(sets[k]->v[d]);
    }
  }
  shape = ns;
  for (size_t k = 0; k < sets.size(); ++k) {
    nsets[k].rank = ns.rank;
    *sets[k] = nsets[k];
  }
}

int64_t max_offset(const Shape& s, const Strides& st) {
  int64_t m = 0;
  for (int d = 0; d < s.rank; ++d) m += (s.v[d] - 1) * (st.v[d] < 0 ? -st.v[d] : st.v[d]);
  return m;
}

// Row parts: strides of a row-space operand over the leading dims R.
Strides row_strides(const TensorArg& t, Space space, const Shape& lead) {
  if (space == Space::RowKeep) {
    Shape target = lead;
    target.push_back(1);
    Strides st = broadcast_into(t.shape, t.strides, target);
    st.rank = lead.rank;
    return st;
  }
  return broadcast_into(t.shape, t.strides, lead);
}

}  // namespace

PartGeometry make_geometry(const KernelPart& part, SpecKind kind, const PartBinding& b) {
  LF_ASSERT(b.inputs.size() == part.inputs.size() && b.outputs.size() == part.outputs.size(),
            "binding has ", b.inputs.size(), "/", b.outputs.size(), " operands, part wants ",
            part.inputs.size(), "/", part.outputs.size());
  PartGeometry g;
  g.kind = kind;
  const size_t nin = b.inputs.size(), nout = b.outputs.size();
  g.inputs.resize(nin);
  g.outputs.resize(nout);
  std::vector<Strides> st(nin + nout);
  std::vector<Strides*> sets;
  for (auto& s : st) sets.push_back(&s);
  auto io_at = [&](size_t k) -> IoGeometry& { return k < nin ? g.inputs[k] : g.outputs[k - nin]; };
  auto arg_at = [&](size_t k) -> const TensorArg& { return k < nin ? b.inputs[k] : b.outputs[k - nin]; };
  auto desc_at = [&](size_t k) -> const IoDesc& { return k < nin ? part.inputs[k] : part.outputs[k - nin]; };

  if (kind == SpecKind::Pointwise) {
    Shape shape = b.shape;
    for (size_t k = 0; k < nin + nout; ++k) st[k] = broadcast_into(arg_at(k).shape, arg_at(k).strides, shape);
    g.numel = shape.numel();
    coalesce(shape, sets);
    g.shape = shape;
    g.dense = true;
    const Strides dense = contiguous_strides(shape);
    for (size_t k = 0; k < nin + nout; ++k) {
      io_at(k).data = arg_at(k).data;
      io_at(k).strides = st[k];
      if (!(st[k] == dense)) g.dense = false;
      if (max_offset(shape, st[k]) > std::numeric_limits<int32_t>::max()) g.fits_i32 = false;
    }
  } else {
    LF_CHECK(b.shape.rank >= 1, "fused kernel", "row kernel over a 0-d shape");
    const int r = b.shape.rank;
    Shape lead;
    for (int d = 0; d < r - 1; ++d) lead.push_back(b.shape.v[d]);
    g.cols = b.shape.v[r - 1];
    for (size_t k = 0; k < nin + nout; ++k) {
      const TensorArg& t = arg_at(k);
      if (desc_at(k).space == Space::Full) {
        Strides full = broadcast_into(t.shape, t.strides, b.shape);
        io_at(k).col_stride = full.v[r - 1];
        full.rank = r - 1;
        st[k] = full;
      } else {
        st[k] = row_strides(t, desc_at(k).space, lead);
        io_at(k).col_stride = 0;
      }
    }
    g.numel = lead.numel();
    coalesce(lead, sets);
    g.shape = lead;
    for (size_t k = 0; k < nin + nout; ++k) {
      io_at(k).data = arg_at(k).data;
      io_at(k).strides = st[k];
      const int64_t m = max_offset(lead, st[k]) + (g.cols - 1) * io_at(k).col_stride;
      if (m > std::numeric_limits<int32_t>::max()) g.fits_i32 = false;
    }
  }
  if (g.numel * g.cols > std::numeric_limits<int32_t>::max() / 2) g.fits_i32 = false;
  LF_CHECK(g.shape.rank <= kMaxDims, "fused kernel", "too many dims");
  return g;
}

}  // namespace livefuse::jit
