// Validation and output shapes of every op: the one place where user mistakes become
// livefuse::Error messages naming the op, what was given and what was expected.
#include <algorithm>

#include "livefuse/error.hpp"
#include "runtime/op_call.hpp"
#include "runtime/registry.hpp"

namespace livefuse {

namespace {

std::string given(const OpCall& c) { return " (got " + describe_call(c) + ")"; }

void check_common(const OpCall& c, const char* op) {
  LF_CHECK(!c.inputs.empty(), op, "needs at least one input");
  for (size_t k = 0; k < c.inputs.size(); ++k)
    LF_CHECK(c.inputs[k].defined(), op, "input ", k, " is an undefined Tensor", given(c));
  const Device d = c.inputs[0].device();
  for (size_t k = 1; k < c.inputs.size(); ++k)
    LF_CHECK(c.inputs[k].device() == d, op, "inputs are on different devices: input 0 on ", d.str(),
             ", input ", k, " on ", c.inputs[k].device().str(), given(c));
}

void check_float(const OpCall& c, const char* op, size_t k) {
  LF_CHECK(is_floating(c.inputs[k].dtype()), op,
           "expected a floating dtype (f32, f16 or bf16) for input ", k, ", got ",
           dtype_name(c.inputs[k].dtype()), given(c));
}

void check_same_dtype(const OpCall& c, const char* op, size_t a, size_t b) {
  LF_CHECK(c.inputs[a].dtype() == c.inputs[b].dtype(), op, "inputs ", a, " and ", b,
           " must have the same dtype, got ", dtype_name(c.inputs[a].dtype()), " and ",
           dtype_name(c.inputs[b].dtype()), " (cast one first)", given(c));
}

// Built in place (every op call passes here): an initializer list copied the shape twice more.
OutputInfos one(const Shape& s, DType t) {
  OutputInfos r;
  r.emplace_back(OutputInfo{s, t});
  return r;
}

OutputInfos elementwise(OpCall& c, const char* op) {
  const OpInfo& info = op_info(c.op);
  int arity = info.arity;
  if (c.op == OpId::custom) arity = custom_op(c.attrs.custom_id).arity;
  if (c.attrs.scalar_operand) {
    LF_CHECK(arity == 2 && c.inputs.size() == 1 && c.attrs.nf == 1, op,
             "scalar operand form needs one tensor and one scalar", given(c));
  } else {
    LF_CHECK(static_cast<int>(c.inputs.size()) == arity, op, "expected ", arity, " inputs, got ",
             c.inputs.size(), given(c));
  }
  // `where`'s condition may be any dtype; the values must agree.
  const size_t first_value = c.op == OpId::where ? 1 : 0;
  for (size_t k = first_value + 1; k < c.inputs.size(); ++k)
    check_same_dtype(c, op, first_value, k);
  const DType t = c.inputs[first_value].dtype();
  if (c.op == OpId::cast) return one(c.inputs[0].shape(), c.attrs.dtype);
  if (!info.int_ok || c.op == OpId::custom) check_float(c, op, first_value);
  LF_CHECK(t != DType::boolean || c.op == OpId::where, op,
           "bool inputs are not supported (cast first)", given(c));
  Shape s = c.inputs[0].shape();
  for (size_t k = 1; k < c.inputs.size(); ++k) s = broadcast_shapes(s, c.inputs[k].shape(), op);
  if (c.op == OpId::clamp)
    LF_CHECK(c.attrs.f[0] <= c.attrs.f[1], op, "lo (", c.attrs.f[0], ") must be <= hi (",
             c.attrs.f[1], ")", given(c));
  return one(s, is_comparison(c.op) ? DType::boolean : t);
}

OutputInfos reduction(OpCall& c, const char* op) {
  LF_CHECK(c.inputs.size() == 1, op, "expected 1 input", given(c));
  const Tensor& x = c.inputs[0];
  LF_CHECK(x.rank() >= 1, op, "expected a tensor of rank >= 1", given(c));
  if (c.op == OpId::topk) {
    check_float(c, op, 0);
    const int64_t n = x.shape()[x.rank() - 1], k = c.attrs.i[0];
    LF_CHECK(k >= 1 && k <= n, op, "k must be in [1, ", n, "] (the last dim), got ", k, given(c));
    Shape s = x.shape();
    s[s.rank - 1] = k;
    OutputInfos outs{OutputInfo{s, x.dtype()}, OutputInfo{s, DType::i64}};
    return outs;
  }
  LF_CHECK(x.dtype() != DType::boolean, op, "bool inputs are not supported (cast first)", given(c));
  if (c.op == OpId::mean) check_float(c, op, 0);
  const int d = normalize_dim(c.attrs.i[0], x.rank(), op);
  c.attrs.i[0] = d;
  if (c.op == OpId::max || c.op == OpId::argmax)
    LF_CHECK(x.shape()[d] > 0, op, "cannot reduce over dim ", d, " of size 0", given(c));
  Shape s;
  for (int k = 0; k < x.rank(); ++k) {
    if (k != d)
      s.push_back(x.shape()[k]);
    else if (c.attrs.i[1])
      s.push_back(1);
  }
  return one(s, c.op == OpId::argmax ? DType::i64 : x.dtype());
}

void check_row_param(const OpCall& c, const char* op, size_t k, const char* what) {
  const Tensor& x = c.inputs[0];
  const Tensor& p = c.inputs[k];
  LF_CHECK(p.rank() == 1 && p.shape()[0] == x.shape()[x.rank() - 1], op, what, " must have shape [",
           x.shape()[x.rank() - 1], "], got ", p.shape().str(), given(c));
  check_same_dtype(c, op, 0, k);
}

OutputInfos normalization(OpCall& c, const char* op) {
  const Tensor& x = c.inputs[0];
  check_float(c, op, 0);
  LF_CHECK(x.rank() >= 1, op, "expected a tensor of rank >= 1", given(c));
  size_t expected = 1;
  if (c.op == OpId::softmax) {
    expected += static_cast<size_t>(c.attrs.i[0]);
    if (c.attrs.i[0]) {
      check_same_dtype(c, op, 0, 1);
      const Shape& m = c.inputs[1].shape();
      bool fits = m.rank <= x.rank();
      for (int k = 0; fits && k < m.rank; ++k) {
        const int64_t dm = m[m.rank - 1 - k], dx = x.shape()[x.rank() - 1 - k];
        fits = dm == dx || dm == 1;
      }
      LF_CHECK(fits, op, "mask of shape ", m.str(), " must broadcast to the scores' shape ",
               x.shape().str(), given(c));
    }
  } else {
    expected += static_cast<size_t>(c.attrs.i[0] + (c.op == OpId::layer_norm ? c.attrs.i[1] : 0));
    LF_CHECK(c.attrs.f[0] >= 0, op, "eps must be >= 0, got ", c.attrs.f[0]);
  }
  LF_CHECK(c.inputs.size() == expected, op, "expected ", expected, " inputs", given(c));
  for (size_t k = 1; c.op != OpId::softmax && k < c.inputs.size(); ++k)
    check_row_param(c, op, k, k == 1 && c.attrs.i[0] ? "weight" : "bias");
  return one(x.shape(), x.dtype());
}

OutputInfos matmul(OpCall& c, const char* op) {
  LF_CHECK(c.inputs.size() == 2, op, "expected 2 inputs", given(c));
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  check_float(c, op, 0);
  check_same_dtype(c, op, 0, 1);
  LF_CHECK(a.rank() >= 2 && b.rank() >= 2, op, "expected operands of rank >= 2", given(c));
  const int64_t k1 = a.shape()[a.rank() - 1], k2 = b.shape()[b.rank() - 2];
  LF_CHECK(k1 == k2, op, "inner dimensions differ: ", a.shape().str(), " @ ", b.shape().str(), " (",
           k1, " vs ", k2, ")");
  Shape ba(std::span<const int64_t>(a.shape().begin(), a.rank() - 2));
  Shape bb(std::span<const int64_t>(b.shape().begin(), b.rank() - 2));
  Shape s = broadcast_shapes(ba, bb, op);
  s.push_back(a.shape()[a.rank() - 2]);
  s.push_back(b.shape()[b.rank() - 1]);
  return one(s, a.dtype());
}

OutputInfos linear(OpCall& c, const char* op) {
  LF_CHECK(c.inputs.size() == 2u + static_cast<size_t>(c.attrs.i[0]), op, "expected x, weight",
           c.attrs.i[0] ? ", bias" : "", given(c));
  const Tensor &x = c.inputs[0], &w = c.inputs[1];
  check_float(c, op, 0);
  check_same_dtype(c, op, 0, 1);
  LF_CHECK(x.rank() >= 1 && w.rank() == 2, op, "expected x of rank >= 1 and weight [out, in]",
           given(c));
  LF_CHECK(x.shape()[x.rank() - 1] == w.shape()[1], op, "x's last dim (", x.shape()[x.rank() - 1],
           ") must equal weight's in-features (", w.shape()[1], ")", given(c));
  if (c.attrs.i[0]) {
    check_same_dtype(c, op, 0, 2);
    LF_CHECK(c.inputs[2].rank() == 1 && c.inputs[2].shape()[0] == w.shape()[0], op,
             "bias must have shape [", w.shape()[0], "], got ", c.inputs[2].shape().str(),
             given(c));
  }
  Shape s = x.shape();
  s[s.rank - 1] = w.shape()[0];
  return one(s, x.dtype());
}

OutputInfos layout(OpCall& c, const char* op) {
  const Tensor& x = c.inputs[0];
  switch (c.op) {
    case OpId::reshape: {
      int infer = -1;
      int64_t known = 1;
      for (int k = 0; k < c.attrs.ni; ++k) {
        const int64_t d = c.attrs.i[k];
        if (d == -1) {
          LF_CHECK(infer < 0, op, "only one dim may be -1");
          infer = k;
        } else {
          LF_CHECK(d >= 0, op, "invalid target dim ", d);
          known *= d;
        }
      }
      if (infer >= 0) {
        LF_CHECK(known > 0 && x.numel() % known == 0, op, "cannot infer -1: ", x.numel(),
                 " elements into a shape with product ", known, given(c));
        c.attrs.i[infer] = x.numel() / known;
      }
      Shape s(std::span<const int64_t>(c.attrs.i.data(), c.attrs.ni));
      LF_CHECK(s.numel() == x.numel(), op, "cannot reshape ", x.shape().str(), " (", x.numel(),
               " elements) to ", s.str(), " (", s.numel(), " elements)");
      return one(s, x.dtype());
    }
    case OpId::permute: {
      LF_CHECK(c.attrs.ni == x.rank(), op, "permutation has ", int(c.attrs.ni),
               " dims but the tensor has rank ", x.rank(), given(c));
      std::array<bool, kMaxDims> seen{};
      Shape s;
      for (int k = 0; k < c.attrs.ni; ++k) {
        const int d = normalize_dim(c.attrs.i[k], x.rank(), op);
        LF_CHECK(!seen[d], op, "dim ", d, " appears twice in the permutation", given(c));
        seen[d] = true;
        c.attrs.i[k] = d;
        s.push_back(x.shape()[d]);
      }
      return one(s, x.dtype());
    }
    case OpId::slice: {
      LF_CHECK(x.rank() >= 1, op, "cannot slice a rank-0 tensor");
      const int d = normalize_dim(c.attrs.i[0], x.rank(), op);
      const int64_t n = x.shape()[d], step = c.attrs.i[3];
      LF_CHECK(step > 0, op, "step must be > 0, got ", step, given(c));
      auto clampi = [n](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + n : v, 0, n); };
      const int64_t start = clampi(c.attrs.i[1]), end = std::max(start, clampi(c.attrs.i[2]));
      c.attrs.i[0] = d, c.attrs.i[1] = start, c.attrs.i[2] = end;
      Shape s = x.shape();
      s[d] = (end - start + step - 1) / step;
      return one(s, x.dtype());
    }
    case OpId::expand: {
      // Like torch.Tensor.expand: new dims go in front; a dim of size 1 takes any size; -1
      // keeps the dim. Normalised to the full target shape.
      const int r = c.attrs.ni, lead = r - x.rank();
      LF_CHECK(lead >= 0, op, "target shape has ", r, " dims, fewer than the tensor's ", x.rank(),
               given(c));
      Shape s;
      for (int k = 0; k < r; ++k) {
        const int64_t want = c.attrs.i[k];
        if (k < lead) {
          LF_CHECK(want >= 0, op, "a new leading dim cannot be ", want, given(c));
        } else {
          const int64_t have = x.shape()[k - lead];
          if (want == -1) c.attrs.i[k] = have;
          LF_CHECK(c.attrs.i[k] == have || (have == 1 && c.attrs.i[k] >= 0), op, "dim ", k,
                   " of size ", have, " cannot expand to ", want,
                   " (only size-1 dims expand; -1 keeps a dim)", given(c));
        }
        s.push_back(c.attrs.i[k]);
      }
      return one(s, x.dtype());
    }
    case OpId::contiguous:
      return one(x.shape(), x.dtype());
    case OpId::concat: {
      const int d = normalize_dim(c.attrs.i[0], x.rank(), op);
      c.attrs.i[0] = d;
      Shape s = x.shape();
      for (size_t k = 1; k < c.inputs.size(); ++k) {
        const Tensor& y = c.inputs[k];
        check_same_dtype(c, op, 0, k);
        LF_CHECK(y.rank() == x.rank(), op, "input ", k, " has rank ", y.rank(), ", expected ",
                 x.rank(), given(c));
        for (int j = 0; j < x.rank(); ++j)
          LF_CHECK(j == d || y.shape()[j] == x.shape()[j], op, "input ", k, " has shape ",
                   y.shape().str(), "; all dims but ", d, " must match ", x.shape().str());
        s[d] += y.shape()[d];
      }
      return one(s, x.dtype());
    }
    default:
      break;
  }
  LF_ASSERT(false, "unhandled layout op ", op_name(c.op));
}

OutputInfos embedding(OpCall& c, const char* op) {
  LF_CHECK(c.inputs.size() == 2, op, "expected weight and ids", given(c));
  const Tensor &w = c.inputs[0], &ids = c.inputs[1];
  check_float(c, op, 0);
  LF_CHECK(w.rank() == 2, op, "weight must be [num, dim]", given(c));
  LF_CHECK(is_integral(ids.dtype()), op, "ids must be i32 or i64, got ", dtype_name(ids.dtype()),
           given(c));
  Shape s = ids.shape();
  s.push_back(w.shape()[1]);
  return one(s, w.dtype());
}

}  // namespace

OutputInfos infer_outputs(OpCall& c) {
  // Table names are string literals (null-terminated): no allocation on the hot path.
  const char* op = op_name(c.op).data();
  if (c.op == OpId::custom) op = custom_op(c.attrs.custom_id).name.c_str();
  if (c.op == OpId::opaque) {
    const OpaqueKernelDef& k = opaque_kernel(c.attrs.custom_id);
    for (size_t i = 0; i < c.inputs.size(); ++i)
      LF_CHECK(c.inputs[i].defined(), k.name, "input ", i, " is an undefined Tensor");
    LF_CHECK(c.out_specs && !c.out_specs->empty(), k.name,
             "an opaque kernel needs at least one output spec");
    OutputInfos outs;
    for (const OutputSpec& s : *c.out_specs) {
      for (int64_t d : s.shape)
        LF_CHECK(d >= 0, k.name, "negative dim in output shape ", s.shape.str());
      outs.push_back({s.shape, s.dtype});
    }
    return outs;
  }
  check_common(c, op);
  for (const Tensor& t : c.inputs)
    LF_CHECK(has_data(*t.impl()), op, "input ", t.str(), " has no storage");
  switch (c.category()) {
    case OpCategory::Elementwise:
      return elementwise(c, op);
    case OpCategory::Reduction:
      return reduction(c, op);
    case OpCategory::Normalization:
      return normalization(c, op);
    case OpCategory::Matmul:
      return c.op == OpId::matmul ? matmul(c, op) : linear(c, op);
    case OpCategory::Layout:
      return layout(c, op);
    case OpCategory::Gather:
      return embedding(c, op);
    case OpCategory::Opaque:
      break;
  }
  LF_ASSERT(false, "unhandled op ", op);
}

}  // namespace livefuse
