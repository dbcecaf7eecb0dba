#pragma once
// The op API. Every function here builds one OpCall and hands it to Executor::submit, the
// single dispatch path (tracing, plan matching and eager execution all hang off it).
// Binary ops broadcast like NumPy and require both operands to have one dtype (cast first).
#include <initializer_list>
#include <utility>
#include <vector>

#include "livefuse/tensor.hpp"

namespace livefuse {

// ---- elementwise ---------------------------------------------------------------------
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);       // erf form
Tensor gelu_tanh(const Tensor& x);  // tanh approximation
Tensor silu(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor cast(const Tensor& x, DType to);
Tensor clamp(const Tensor& x, double lo, double hi);

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
// Scalar variants: the scalar is the right-hand operand.
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor maximum(const Tensor& a, double b);
Tensor minimum(const Tensor& a, double b);
Tensor pow(const Tensor& a, double b);
// Comparisons: bool results, computed in the operands' dtype (which must agree); broadcast.
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
Tensor eq(const Tensor& a, double b);
// cond: bool (or any dtype, nonzero = true); a and b share a dtype; all three broadcast.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- reductions (over one dim) ---------------------------------------------------------
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);  // i64 result
// The k largest values along the last dim, largest first (ties: lower index first; NaN ranks
// above every number), and their indices (i64). Floating inputs.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k);

// ---- normalisation (over the last dim) --------------------------------------------------
// softmax(x * scale + mask); mask (optional) is additive, same dtype, broadcastable to x.
Tensor softmax(const Tensor& x, double scale = 1.0, const Tensor& mask = {});
// weight / bias optional (undefined Tensor = absent), of shape [x.dim(-1)].
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

// ---- matrix products ---------------------------------------------------------------------
// 2-D or batched with broadcast batch dims; transposed (view) operands are used without copies.
Tensor matmul(const Tensor& a, const Tensor& b);
// x[..., in] @ W[out, in]^T + b[out]  (b optional).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = {});
// f32 matmul/linear on CUDA may use TF32 tensor cores when allowed (off by default).
void set_allow_tf32(bool allow);
bool allow_tf32();

// ---- layout (views where possible) ---------------------------------------------------------
Tensor reshape(const Tensor& x, const Shape& shape);  // one dim may be -1
Tensor permute(const Tensor& x, std::initializer_list<int64_t> dims);
Tensor permute(const Tensor& x, const Dims& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor contiguous(const Tensor& x);
// A view with stride 0 along new leading dims and size-1 dims grown to `shape` (-1 keeps a
// dim), like torch.Tensor.expand: grouped-query attention's K/V heads without a copy.
Tensor expand(const Tensor& x, const Shape& shape);
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);

// ---- in-place writes (runtime/src/copy_into.cpp) -----------------------------------------
// Writes `src` into the memory `dst` views (a slice of a preallocated KV cache, say): same
// shape and dtype, one device. Every call made before sees dst's old values, every call after
// the new ones (a sync point for deferred work). dst may not be immutable or broadcast.
void copy_into(const Tensor& dst, const Tensor& src);
// copy_into(slice(dst, dim, pos, pos + src.dim(dim)), src), with the positions checked: HF's
// StaticCache `index_copy_` for consecutive positions.
void index_copy(const Tensor& dst, int64_t dim, int64_t pos, const Tensor& src);

// ---- gather --------------------------------------------------------------------------
// Rows of weight[num, dim] picked by ids (i32 or i64, any shape): result ids.shape + [dim].
Tensor embedding(const Tensor& weight, const Tensor& ids);

}  // namespace livefuse
