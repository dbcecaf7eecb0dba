// matmul and linear: tensors (any batch broadcast, transposed views) -> cuBLASLt calls.
//
// Row-major C[M, N] = A[M, K] @ B[K, N] is computed as the column-major product
// C^T[N, M] = B^T[N, K] @ A^T[K, M], so cuBLASLt's "A" is our B and its "B" is our A. Each
// operand needs one unit stride: a row-major matrix is used as is, a transposed view (unit
// stride on rows) through the TRANSA/TRANSB flag -- no copy either way. Only a view with no
// unit stride at all (a strided slice) is copied to a dense temporary first.
#include <cuda_runtime_api.h>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/gemm_views.hpp"
#include "kernels/cuda/layout.hpp"
#include "kernels/cuda/strided.hpp"

namespace livefuse::cuda {

namespace detail {

bool epilogue_operands(const Tensor& out, uint8_t act, const Tensor* bias, const Tensor* residual,
                       const void** bias_ptr) {
  if (out.numel() == 0 || !out.is_contiguous()) return false;
  *bias_ptr = nullptr;
  if (bias) {
    if (bias->dtype() != out.dtype() || bias->rank() != 1 ||
        bias->shape()[0] != out.shape()[out.rank() - 1] || bias->strides()[0] != 1 ||
        reinterpret_cast<uintptr_t>(bias->impl()->data()) % 16 != 0)
      return false;
    *bias_ptr = bias->impl()->data();
  }
  return !residual || (residual->dtype() == out.dtype() && residual->shape() == out.shape() &&
                       residual->is_contiguous() && act == 0 &&
                       reinterpret_cast<uintptr_t>(residual->impl()->data()) % 16 == 0);
}

OutView out_view_of(const Shape& shape, const Tensor& like) {
  OutView o{nullptr, shape, like.dtype(), like.device()};
  if (o.shape.rank == 1) o.shape = Shape{1, shape[0]};
  return o;
}

OutView out_view(const Tensor& out) {
  OutView o = out_view_of(out.shape(), out);
  o.ptr = out.impl()->data();
  return o;
}

bool fold_rows(const MatView& a, int64_t k, int64_t* rows, int64_t* row_stride) {
  const int ra = a.shape.rank;
  const Shape rows_shape = Dims(std::span<const int64_t>(a.shape.begin(), ra - 1));
  StridedLayout l = make_layout(rows_shape);
  add_operand(l, rows_shape, Dims(std::span<const int64_t>(a.strides.begin(), ra - 1)));
  coalesce(l);
  if (l.rank > 1) return false;
  *rows = l.rank == 0 ? 1 : l.sizes[0];
  *row_stride = l.rank == 0 ? k : l.strides[0][0];
  return true;
}

}  // namespace detail

namespace {

using detail::MatView;
using detail::OutView;
using detail::epilogue_operands;
using detail::gemv_args_for;
using detail::linear_views;
using detail::out_view;
using detail::view_of;

// Dense copy of a view whose last two dims have no unit stride. Allocates (rare path).
Tensor materialise(const MatView& v, DType dtype, Device device, cudaStream_t s) {
  Tensor tmp = empty(v.shape, dtype, device);
  StridedLayout l = make_layout(v.shape);
  add_dense_operand(l);
  add_operand(l, v.shape, v.strides);
  launch_copy(tmp.impl()->data(), v.ptr, dtype_size(dtype), l, s);
  return tmp;
}

// The product (+ bias) (act) (+ residual) as the few-row GEMV, when it takes it (gemv_args_for).
// f32 there is exact, never tf32.
bool try_gemv(const MatView& a, const MatView& b, const OutView& out, const void* bias, LtAct act,
              const void* residual, cudaStream_t s) {
  GemvArgs g;
  if (!gemv_args_for(a, b, out, &g)) return false;
  g.bias = bias;
  g.residual = residual;
  g.act = static_cast<GemvAct>(act);
  launch_gemv(g, s);
  return true;
}

// out[..., M, N] = a[..., M, K] @ b[..., K, N] (+ bias[N]) (+ residual, dense like out); batch
// dims broadcast.
void gemm_nd(MatView a, MatView b, const OutView& out, const void* bias, bool tf32,
             cudaStream_t s, LtAct act = LtAct::none, const void* residual = nullptr) {
  const DType dt = out.dtype;
  const int ra = a.shape.rank, rb = b.shape.rank, ro = out.shape.rank;
  const int64_t M = a.shape[ra - 2], K = a.shape[ra - 1], N = b.shape[rb - 1];
  LF_ASSERT(K != 0 || !residual, "gemm_nd: a residual with K == 0");
  if (K == 0) {  // empty inner dim: the product is zeros (the caller adds any bias)
    LF_CUDA_CALL(
        cudaMemsetAsync(out.ptr, 0, static_cast<size_t>(out.shape.numel()) * dtype_size(dt), s));
    return;
  }
  if (try_gemv(a, b, out, bias, act, residual, s)) return;
  if (!bias && act == LtAct::none && !residual && detail::launch_few_row_batched(a, b, out, s)) return;
  LtCall c;
  c.dtype = dt;
  c.tf32 = tf32;
  c.bias = bias;
  c.act = act;
  c.m = N, c.n = M, c.k = K, c.ldd = N;
  // cuBLASLt's A is our b, its B is our a (see the top of this file).
  Tensor tmp_a, tmp_b;
  if (!as_transposed(K, N, b.strides[rb - 2], b.strides[rb - 1], &c.a)) {
    tmp_b = materialise(b, dt, out.device, s);
    b = view_of(tmp_b);
    LF_ASSERT(as_transposed(K, N, b.strides[rb - 2], b.strides[rb - 1], &c.a),
              "dense b not usable");
  }
  if (!as_transposed(M, K, a.strides[ra - 2], a.strides[ra - 1], &c.b)) {
    tmp_a = materialise(a, dt, out.device, s);
    a = view_of(tmp_a);
    LF_ASSERT(as_transposed(M, K, a.strides[ra - 2], a.strides[ra - 1], &c.b),
              "dense a not usable");
  }
  const auto dims = [](const Dims& d, int n) {
    return Dims(std::span<const int64_t>(d.begin(), n));
  };
  const Shape ob = dims(out.shape, ro - 2);
  const Shape ab = dims(a.shape, ra - 2), as = dims(a.strides, ra - 2);
  const Shape bb = dims(b.shape, rb - 2), bs = dims(b.strides, rb - 2);

  // Fold: when b is shared by every batch and a's [batch..., M] rows are evenly spaced, the
  // batch becomes part of M -- one large GEMM instead of many small ones (linear on [B, S, K]).
  {
    Shape rows_shape = ob, af = ab, afs = as, bf = bb, bfs = bs;
    rows_shape.push_back(M);
    af.push_back(M), afs.push_back(a.strides[ra - 2]);
    bf.push_back(1), bfs.push_back(0);
    StridedLayout l = make_layout(rows_shape);
    add_dense_operand(l);
    add_operand(l, af, afs);
    add_operand(l, bf, bfs);
    coalesce(l);
    LtMat folded;
    const int64_t rows = l.rank == 0 ? 1 : l.sizes[0];
    const int64_t row_stride = l.rank == 0 ? K : l.strides[1][0];
    if (l.rank <= 1 && (l.rank == 0 || l.strides[2][0] == 0) &&
        as_transposed(rows, K, row_stride, a.strides[ra - 1], &folded)) {
      folded.ptr = a.ptr;
      c.b = folded;
      c.n = rows;
      c.a.ptr = b.ptr;
      c.d = out.ptr;
      c.c = residual;
      lt_matmul(c, s);
      return;
    }
  }

  // Strided batches over the innermost batch dim; a host loop over the rest.
  StridedLayout l = make_layout(ob);
  add_dense_operand(l);
  for (int d = 0; d < l.rank; ++d) l.strides[0][d] *= M * N;
  add_operand(l, ab, as);
  add_operand(l, bb, bs);
  coalesce(l);
  const int inner = l.rank - 1;
  if (inner >= 0) {
    c.batch = l.sizes[inner];
    c.stride_d = l.strides[0][inner];
    c.stride_b = l.strides[1][inner];  // our a is cuBLASLt's B
    c.stride_a = l.strides[2][inner];
  }
  int64_t outer = 1;
  for (int d = 0; d < inner; ++d) outer *= l.sizes[d];
  // Batch dims that do not collapse to one stride -- heads split out of a [B, S, H*D]
  // projection are [B, H, S, D] with strides (S*H*D, D, H*D, 1) -- would cost a host-loop
  // launch per outer batch. A dense copy of such an operand is one kernel, and then one
  // strided-batch GEMM covers every batch.
  if (outer > 2) {
    const auto dense = [](const MatView& v) {
      return v.strides == contiguous_strides(v.shape);
    };
    bool copied = false;
    if (ab == ob && !dense(a)) {
      tmp_a = materialise(a, dt, out.device, s);
      a = view_of(tmp_a);
      copied = true;
    }
    if (bb == ob && !dense(b)) {
      tmp_b = materialise(b, dt, out.device, s);
      b = view_of(tmp_b);
      copied = true;
    }
    if (copied) return gemm_nd(a, b, out, bias, tf32, s, act, residual);
  }
  const size_t es = dtype_size(dt);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rem = o, off[3] = {0, 0, 0};
    for (int d = inner - 1; d >= 0; --d) {
      const int64_t i = rem % l.sizes[d];
      rem /= l.sizes[d];
      for (int k = 0; k < 3; ++k) off[k] += i * l.strides[k][d];
    }
    c.d = static_cast<char*>(out.ptr) + off[0] * es;
    c.c = residual ? static_cast<const char*>(residual) + off[0] * es : nullptr;
    c.b.ptr = static_cast<const char*>(a.ptr) + off[1] * es;
    c.a.ptr = static_cast<const char*>(b.ptr) + off[2] * es;
    lt_matmul(c, s);
  }
}

}  // namespace

void run_matmul(const OpCall& call, const Tensor& out, void* stream) {
  const bool tf32 = call.attrs.ni > 1 && call.attrs.i[1] != 0;
  const OutView o{out.impl()->data(), out.shape(), out.dtype(), out.device()};
  gemm_nd(view_of(call.inputs[0]), view_of(call.inputs[1]), o, nullptr, tf32,
          static_cast<cudaStream_t>(stream));
}

bool run_gemm_epilogue(const OpCall& call, uint8_t act, const Tensor* bias,
                       const Tensor* residual, const Tensor& out, void* stream) {
  if (call.op != OpId::linear && call.op != OpId::matmul) return false;
  const void* bias_ptr = nullptr;
  if (!epilogue_operands(out, act, bias, residual, &bias_ptr)) return false;
  MatView a{}, b{};
  bool tf32 = false;
  if (call.op == OpId::linear) {
    linear_views(call.inputs[0], call.inputs[1], &a, &b);
    tf32 = call.attrs.i[1] != 0;
  } else {
    a = view_of(call.inputs[0]), b = view_of(call.inputs[1]);
    tf32 = call.attrs.ni > 1 && call.attrs.i[1] != 0;
    if (a.shape.rank < 2 || b.shape.rank < 2) return false;  // vector products: no epilogue
  }
  if (a.shape[a.shape.rank - 1] == 0) return false;  // K == 0: gemm_nd writes zeros only
  const OutView o = out_view(out);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const void* residual_ptr = residual ? residual->impl()->data() : nullptr;
  if (try_gemv(a, b, o, bias_ptr, static_cast<LtAct>(act), residual_ptr, s)) return true;
  // A half-precision residual only where the GEMV adds it: it rounds the product before the add,
  // as eager does; cuBLASLt's C is added before its one rounding (gemv.hpp).
  if (residual && out.dtype() != DType::f32) return false;
  gemm_nd(a, b, o, bias_ptr, tf32, s, static_cast<LtAct>(act), residual_ptr);
  return true;
}

bool run_sibling_linears(const OpCall& call, std::span<const Tensor> outs, void* stream) {
  if (call.op != OpId::linear || outs.size() < 2) return false;
  const Tensor &x = call.inputs[0], &w = call.inputs[1];
  const bool has_bias = call.attrs.i[0] != 0;
  const int64_t parts = static_cast<int64_t>(outs.size());
  const Tensor& first = outs[0];
  const int64_t n = first.rank() > 0 ? first.shape()[first.rank() - 1] : 0;
  if (x.rank() < 1 || w.rank() != 2 || !w.is_contiguous() || w.shape()[0] != parts * n || n == 0)
    return false;
  const int64_t k = w.shape()[1];
  if (k == 0 || first.numel() == 0) return false;  // gemm_nd's zero fill and bias pass: the split path
  const size_t es = dtype_size(first.dtype());
  const auto* base = static_cast<const char*>(first.impl()->data());
  const int64_t stride_bytes = static_cast<const char*>(outs[1].impl()->data()) - base;
  if (stride_bytes <= 0 || stride_bytes % static_cast<int64_t>(es) != 0) return false;
  for (int64_t i = 0; i < parts; ++i) {
    const Tensor& o = outs[static_cast<size_t>(i)];
    if (o.dtype() != first.dtype() || !(o.shape() == first.shape()) || !o.is_contiguous() ||
        static_cast<const char*>(o.impl()->data()) != base + i * stride_bytes)
      return false;
  }
  const int64_t stride = stride_bytes / static_cast<int64_t>(es);
  if (stride < first.numel()) return false;  // the outputs would overlap
  const void* bias = nullptr;
  if (has_bias) {
    const Tensor& b = call.inputs[2];
    if (b.rank() != 1 || b.shape()[0] != parts * n || !b.is_contiguous() ||
        reinterpret_cast<uintptr_t>(b.impl()->data()) % 16 != 0)
      return false;
    bias = b.impl()->data();
  }
  // The input's rows [.., M] as one evenly spaced run (gemm_nd's fold).
  MatView a{}, b{};
  linear_views(x, w, &a, &b);
  const int ra = a.shape.rank;
  int64_t rows = 0, row_stride = 0;
  if (!detail::fold_rows(a, k, &rows, &row_stride) || rows * n != first.numel()) return false;
  LtCall c;
  c.dtype = first.dtype();
  c.tf32 = call.attrs.i[1] != 0;
  c.bias = bias;
  c.m = n, c.n = rows, c.k = k, c.ldd = n;
  if (!as_transposed(k, n, b.strides[0], b.strides[1], &c.a) ||
      !as_transposed(rows, k, row_stride, a.strides[ra - 1], &c.b))
    return false;
  c.a.ptr = w.impl()->data();
  c.b.ptr = x.impl()->data();
  c.d = first.impl()->data();
  c.batch = parts;
  c.stride_a = n * k;   // weight rows [i N, (i + 1) N)
  c.stride_b = 0;       // one input for every sibling
  c.stride_d = stride;
  c.stride_bias = n;
  lt_matmul(c, static_cast<cudaStream_t>(stream));
  return true;
}

void run_linear(const OpCall& call, const Tensor& out, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const Tensor& x = call.inputs[0];
  const bool has_bias = call.attrs.i[0] != 0;
  const bool tf32 = call.attrs.i[1] != 0;
  MatView a{}, b{};
  linear_views(call.inputs[0], call.inputs[1], &a, &b);
  // The epilogue reads the bias as a dense, aligned vector; anything else is added after.
  const void* epilogue_bias = nullptr;
  if (has_bias) {
    const Tensor& bias = call.inputs[2];
    const bool ok = (bias.strides()[0] == 1 || bias.shape()[0] == 1) &&
                    reinterpret_cast<uintptr_t>(bias.impl()->data()) % 16 == 0;
    if (ok) epilogue_bias = bias.impl()->data();
  }
  OutView o{out.impl()->data(), out.shape(), out.dtype(), out.device()};
  if (x.rank() == 1) o.shape = Shape{1, out.shape()[0]};
  gemm_nd(a, b, o, epilogue_bias, tf32, s);
  if (has_bias && (!epilogue_bias || x.shape()[x.rank() - 1] == 0)) {
    // out += bias, in place through the eager add kernel (same index read then written).
    const Tensor& bias = call.inputs[2];
    EwPlan p;
    p.op = OpId::add;
    p.arity = 2;
    p.out = out.impl()->data();
    p.out_dtype = out.dtype();
    p.numel = out.numel();
    p.in[0] = p.out;
    p.in[1] = bias.impl()->data();
    p.in_dtype[0] = p.in_dtype[1] = out.dtype();
    p.layout = make_layout(out.shape());
    add_dense_operand(p.layout);
    add_dense_operand(p.layout);
    add_operand(p.layout, bias.shape(), bias.strides());
    coalesce(p.layout);
    p.idx32 = fits_uint32(p.layout);
    launch_elementwise(p, s);
  }
}

}  // namespace livefuse::cuda
