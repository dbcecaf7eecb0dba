// matmul and linear as GemmProblems: views become strides, nothing is copied.
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/gemm.hpp"

namespace livefuse::cpu {
namespace {

// The last two dims of v as a matrix (a rank-1 operand is a row for A, a column for B), and the
// dims before them as batch dims.
struct Matrix {
  int64_t rows = 1, cols = 1, rs = 0, cs = 0;
  Shape batch;
  Strides batch_strides;
};

Matrix as_matrix(const View& v, bool is_a) {
  Matrix m;
  const int r = v.shape.rank;
  if (r == 1) {
    if (is_a) {
      m.cols = v.shape.v[0];
      m.cs = v.strides.v[0];
    } else {
      m.rows = v.shape.v[0];
      m.rs = v.strides.v[0];
    }
    return m;
  }
  LF_ASSERT(r >= 2, "matmul operand of rank ", r);
  m.rows = v.shape.v[r - 2];
  m.cols = v.shape.v[r - 1];
  m.rs = v.strides.v[r - 2];
  m.cs = v.strides.v[r - 1];
  for (int d = 0; d < r - 2; ++d) {
    m.batch.push_back(v.shape.v[d]);
    m.batch_strides.push_back(v.strides.v[d]);
  }
  return m;
}

}  // namespace

GemmProblem matmul_problem(const OpCall& call, const Tensor& out) {
  const View a = view_of(call.inputs[0]), b = view_of(call.inputs[1]);
  const View o = out_view(out);
  const Matrix ma = as_matrix(a, true), mb = as_matrix(b, false);
  LF_ASSERT(ma.cols == mb.rows, describe_call(call), ": inner dims differ");
  const Shape bshape = broadcast_shapes(ma.batch, mb.batch, "matmul");
  LF_ASSERT(bshape.numel() * ma.rows * mb.cols == o.shape.numel(), describe_call(call), " output ",
            o.shape.str(), " does not match");
  GemmProblem p;
  p.M = ma.rows;
  p.N = mb.cols;
  p.K = ma.cols;
  p.batch = bshape.numel();
  p.a = {a.base, a.dtype, ma.rs, ma.cs,
         StridedIndex(bshape, broadcast_strides(ma.batch, ma.batch_strides, bshape)), nullptr};
  p.b = {b.base, b.dtype, mb.rs, mb.cs,
         StridedIndex(bshape, broadcast_strides(mb.batch, mb.batch_strides, bshape)),
         call.inputs[1].impl()->storage};
  p.out = o.base;
  p.out_dtype = o.dtype;
  // x[B.., M, K] @ W[K, N] with W shared by every batch: when A's batch and row dims fold into
  // one strided dim, run one tall GEMM instead of many short ones.
  const bool b_shared = std::all_of(p.b.batch.strides.begin(), p.b.batch.strides.end(),
                                    [](int64_t s) { return s == 0; });
  if (p.batch > 1 && b_shared) {
    Shape rows = bshape;
    Strides rst = p.a.batch.strides;
    rows.push_back(p.M);
    rst.push_back(p.a.rs);
    collapse_dims(rows, &rst, 1);
    if (rows.rank == 1) {
      p.M *= p.batch;
      p.a.rs = rst.v[0];
      p.batch = 1;
      p.a.batch = p.b.batch = StridedIndex();
    }
  }
  return p;
}

GemmProblem linear_problem(const OpCall& call, const Tensor& out) {
  const View x = view_of(call.inputs[0]), w = view_of(call.inputs[1]);
  const View o = out_view(out);
  const bool has_bias = call.attrs.i[0] != 0;
  LF_ASSERT(w.shape.rank == 2 && x.shape.rank >= 1, describe_call(call));
  GemmProblem p;
  p.K = x.shape.v[x.shape.rank - 1];
  p.N = w.shape.v[0];
  // Rows of x: its leading dims, folded as far as the strides allow; whatever does not fold
  // becomes batch dims (W is shared by all batches).
  Shape lead;
  Strides lst;
  for (int d = 0; d + 1 < x.shape.rank; ++d) {
    lead.push_back(x.shape.v[d]);
    lst.push_back(x.strides.v[d]);
  }
  if (lead.numel() == 0) return GemmProblem{};  // M = 0: nothing to compute
  collapse_dims(lead, &lst, 1);
  p.M = lead.v[lead.rank - 1];
  Shape bshape;
  Strides bst;
  for (int d = 0; d + 1 < lead.rank; ++d) {
    bshape.push_back(lead.v[d]);
    bst.push_back(lead.v[d] == 1 ? 0 : lst.v[d]);
  }
  p.batch = bshape.numel();
  p.a = {x.base, x.dtype, lst.v[lead.rank - 1], x.strides.v[x.shape.rank - 1],
         StridedIndex(bshape, bst), nullptr};
  Strides zero;
  zero.rank = bshape.rank;
  // B[k, n] = W[n, k]
  p.b = {w.base, w.dtype, w.strides.v[1], w.strides.v[0], StridedIndex(bshape, zero),
         call.inputs[1].impl()->storage};
  p.out = o.base;
  p.out_dtype = o.dtype;
  if (has_bias) {
    const View bias = view_of(call.inputs[2]);
    p.bias = bias.base;
    p.bias_dtype = bias.dtype;
    p.bias_stride = bias.shape.rank > 0 ? bias.strides.v[bias.shape.rank - 1] : 0;
  }
  return p;
}

void run_matmul(const OpCall& call, const Tensor& out) { gemm(matmul_problem(call, out)); }
void run_linear(const OpCall& call, const Tensor& out) { gemm(linear_problem(call, out)); }

}  // namespace livefuse::cpu
