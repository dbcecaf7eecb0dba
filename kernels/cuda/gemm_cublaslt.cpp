// GEMMs through cuBLASLt.
//
// Row-major C[M, N] = A[M, K] @ B[K, N] is computed as the column-major product
// C^T[N, M] = B^T[N, K] @ A^T[K, M], so cuBLASLt's "A" is our B and its "B" is our A. Each
// operand needs one unit stride: a row-major matrix is used as is, a transposed view (unit
// stride on rows) through the TRANSA/TRANSB flag -- no copy either way. Only a view with no
// unit stride at all (a strided slice) is copied to a dense temporary first.
//
// [ Note -- what is cached ]
//  * one cublasLtHandle_t per device (created once, never destroyed: cuBLASLt may be torn down
//    before static destructors run);
//  * one workspace of kGemmWorkspaceBytes per (device, stream), allocated on the stream's
//    first GEMM and kept: later calls allocate nothing, so they can be captured in a graph;
//  * per thread, a GemmPlan per GemmKey: the matmul descriptor, the three matrix layouts and
//    the heuristic's algorithm. The key holds everything the heuristic sees: dtype, tf32,
//    transposes, m/n/k, leading dims, batch count and strides, bias on/off, the alignment of
//    every pointer (cuBLASLt picks kernels by alignment) and the device. Thread-local, so the
//    per-call bias pointer can be set on the cached descriptor without a lock or a race.
//    Bounded: past kMaxPlans entries the thread's cache is dropped and rebuilt.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/layout.hpp"
#include "kernels/cuda/strided.hpp"

namespace livefuse::cuda {
namespace {

constexpr size_t kMaxPlans = 1024;

// ---- handles and workspaces ---------------------------------------------------------------
cublasLtHandle_t handle_for(int device) {
  static std::mutex mu;
  static std::unordered_map<int, cublasLtHandle_t> handles;  // leaked on purpose (see note)
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  LF_CUBLAS_CALL(cublasLtCreate(&h));
  handles.emplace(device, h);
  return h;
}

void* workspace_for(int device, cudaStream_t s) {
  thread_local int last_device = -1;
  thread_local cudaStream_t last_stream = nullptr;
  thread_local void* last_ws = nullptr;
  if (last_ws && last_device == device && last_stream == s) return last_ws;
  static std::mutex mu;
  static std::unordered_map<uint64_t, void*> workspaces;
  const uint64_t key = reinterpret_cast<uint64_t>(s) ^ (uint64_t(device) << 56);
  std::lock_guard<std::mutex> lock(mu);
  void*& ws = workspaces[key];
  if (!ws) LF_CUDA_CALL(cudaMalloc(&ws, kGemmWorkspaceBytes));
  last_device = device, last_stream = s, last_ws = ws;
  return ws;
}

// ---- the problem -----------------------------------------------------------------------------
// A matrix operand for cuBLASLt: already in its (column-major) terms.
struct LtMat {
  const void* ptr = nullptr;
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t rows = 0, cols = 0, ld = 0;  // of the stored matrix, before op
};

// Row-major [R, C] view with strides (sr, sc) as a column-major cuBLASLt matrix whose op()
// is the transpose of the view, i.e. op(M) = view^T with shape [C, R]. False if the view has
// no unit stride (it must be copied).
bool as_transposed(int64_t R, int64_t C, int64_t sr, int64_t sc, LtMat* m) {
  // A dim of size 1 is never stepped: its stride may be anything, so pick one that fits.
  if (C == 1) sc = 1;
  if (R == 1) sr = std::max<int64_t>(C, 1);
  if (sc == 1 && sr >= std::max<int64_t>(C, 1)) {  // row-major: memory is view^T col-major
    m->op = CUBLAS_OP_N;
    m->rows = C, m->cols = R, m->ld = sr;
    return true;
  }
  if (sr == 1 && sc >= std::max<int64_t>(R, 1)) {  // column-major view: use op = T
    m->op = CUBLAS_OP_T;
    m->rows = R, m->cols = C, m->ld = sc;
    return true;
  }
  return false;
}

struct GemmKey {
  std::array<int64_t, 20> v{};
  bool operator==(const GemmKey& o) const { return v == o.v; }
};
struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t x : k.v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
    return h;
  }
};

struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  GemmPlan() = default;
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan() {
    // Errors on teardown are ignored: nothing useful can be done with them here.
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
  }
};

int64_t alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int64_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// One cuBLASLt call: D' = op(A') op(B') (+ bias), `batch` strided matrices.
struct LtCall {
  DType dtype = DType::f32;
  bool tf32 = false;
  LtMat a, b;  // cuBLASLt's A (our B) and B (our A)
  void* d = nullptr;
  int64_t m = 0, n = 0, k = 0, ldd = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_d = 0;
  const void* bias = nullptr;
};

GemmPlan* plan_for(const LtCall& c, int device, cublasLtHandle_t handle) {
  thread_local std::unordered_map<GemmKey, std::unique_ptr<GemmPlan>, GemmKeyHash> plans;
  GemmKey key;
  key.v = {static_cast<int64_t>(c.dtype), c.tf32, c.a.op, c.b.op, c.m, c.n, c.k, c.a.ld, c.b.ld,
           c.ldd, c.batch, c.stride_a, c.stride_b, c.stride_d, c.bias != nullptr,
           alignment_of(c.a.ptr), alignment_of(c.b.ptr), alignment_of(c.d),
           c.bias ? alignment_of(c.bias) : 0, device};
  auto it = plans.find(key);
  if (it != plans.end()) return it->second.get();
  if (plans.size() >= kMaxPlans) plans.clear();

  auto p = std::make_unique<GemmPlan>();
  const cudaDataType_t t = cuda_type(c.dtype);
  const cublasComputeType_t compute =
      c.dtype == DType::f32 && c.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  LF_CUBLAS_CALL(cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F));
  LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &c.a.op, sizeof(c.a.op)));
  LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &c.b.op, sizeof(c.b.op)));
  if (c.bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof(t)));
    LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof(c.bias)));
  }
  const auto make_layout = [&](cublasLtMatrixLayout_t* l, int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
    LF_CUBLAS_CALL(cublasLtMatrixLayoutCreate(l, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
    if (c.batch > 1) {
      const int32_t count = static_cast<int32_t>(c.batch);
      LF_CUBLAS_CALL(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      LF_CUBLAS_CALL(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    }
  };
  make_layout(&p->a, c.a.rows, c.a.cols, c.a.ld, c.stride_a);
  make_layout(&p->b, c.b.rows, c.b.cols, c.b.ld, c.stride_b);
  make_layout(&p->d, c.m, c.n, c.ldd, c.stride_d);

  cublasLtMatmulPreference_t pref = nullptr;
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceCreate(&pref));
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } guard{pref};
  const uint64_t ws = kGemmWorkspaceBytes;
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al_a = static_cast<uint32_t>(alignment_of(c.a.ptr));
  const uint32_t al_b = static_cast<uint32_t>(alignment_of(c.b.ptr));
  const uint32_t al_d = static_cast<uint32_t>(alignment_of(c.d));
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d)));
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  LF_CUBLAS_CALL(cublasLtMatmulAlgoGetHeuristic(handle, p->desc, p->a, p->b, p->d, p->d, pref, 1, &result, &found));
  LF_CHECK(found > 0, "matmul", "cuBLASLt has no algorithm for ", dtype_name(c.dtype), " m=", c.m,
           " n=", c.n, " k=", c.k, " batch=", c.batch, " (column-major terms; lda=", c.a.ld,
           " ldb=", c.b.ld, ")");
  p->algo = result.algo;
  p->workspace = result.workspaceSize;
  GemmPlan* raw = p.get();
  plans.emplace(key, std::move(p));
  return raw;
}

void lt_matmul(const LtCall& c, cudaStream_t s) {
  const int device = current_device();
  cublasLtHandle_t handle = handle_for(device);
  void* ws = workspace_for(device, s);
  GemmPlan* p = plan_for(c, device, handle);
  if (c.bias)
    LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c.bias, sizeof(c.bias)));
  const float alpha = 1.0f, beta = 0.0f;
  LF_CUBLAS_CALL(cublasLtMatmul(handle, p->desc, &alpha, c.a.ptr, p->a, c.b.ptr, p->b, &beta, c.d, p->d,
                                 c.d, p->d, &p->algo, ws, p->workspace, s));
}

// ---- from tensors to cuBLASLt calls -----------------------------------------------------------
// A strided matrix view [R, C] (plus batch dims) of one operand.
struct MatView {
  const void* ptr;
  Shape shape;  // [..batch, R, C]
  Strides strides;
};

MatView view_of(const Tensor& t) { return {t.impl()->data(), t.shape(), t.strides()}; }

// Dense copy of a view whose last two dims have no unit stride. Allocates (rare path).
Tensor materialise(const MatView& v, DType dtype, Device device, cudaStream_t s) {
  Tensor tmp = empty(v.shape, dtype, device);
  StridedLayout l = make_layout(v.shape);
  add_dense_operand(l);
  add_operand(l, v.shape, v.strides);
  launch_copy(tmp.impl()->data(), v.ptr, dtype_size(dtype), l, s);
  return tmp;
}

struct OutView {
  void* ptr;
  Shape shape;  // [..batch, M, N], dense
  DType dtype;
  Device device;
};

// out[..., M, N] = a[..., M, K] @ b[..., K, N] (+ bias[N]); batch dims broadcast.
void gemm_nd(MatView a, MatView b, const OutView& out, const void* bias, bool tf32, cudaStream_t s) {
  const DType dt = out.dtype;
  const int ra = a.shape.rank, rb = b.shape.rank, ro = out.shape.rank;
  const int64_t M = a.shape[ra - 2], K = a.shape[ra - 1], N = b.shape[rb - 1];
  if (K == 0) {  // empty inner dim: the product is zeros (the caller adds any bias)
    LF_CUDA_CALL(cudaMemsetAsync(out.ptr, 0, static_cast<size_t>(out.shape.numel()) * dtype_size(dt), s));
    return;
  }
  LtCall c;
  c.dtype = dt;
  c.tf32 = tf32;
  c.bias = bias;
  c.m = N, c.n = M, c.k = K, c.ldd = N;
  // cuBLASLt's A is our b, its B is our a (see the top of this file).
  Tensor tmp_a, tmp_b;
  if (!as_transposed(K, N, b.strides[rb - 2], b.strides[rb - 1], &c.a)) {
    tmp_b = materialise(b, dt, out.device, s);
    b = view_of(tmp_b);
    LF_ASSERT(as_transposed(K, N, b.strides[rb - 2], b.strides[rb - 1], &c.a), "dense b not usable");
  }
  if (!as_transposed(M, K, a.strides[ra - 2], a.strides[ra - 1], &c.b)) {
    tmp_a = materialise(a, dt, out.device, s);
    a = view_of(tmp_a);
    LF_ASSERT(as_transposed(M, K, a.strides[ra - 2], a.strides[ra - 1], &c.b), "dense a not usable");
  }
  const auto dims = [](const Dims& d, int n) { return Dims(std::span<const int64_t>(d.begin(), n)); };
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
  const size_t es = dtype_size(dt);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rem = o, off[3] = {0, 0, 0};
    for (int d = inner - 1; d >= 0; --d) {
      const int64_t i = rem % l.sizes[d];
      rem /= l.sizes[d];
      for (int k = 0; k < 3; ++k) off[k] += i * l.strides[k][d];
    }
    c.d = static_cast<char*>(out.ptr) + off[0] * es;
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

void run_linear(const OpCall& call, const Tensor& out, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  const bool has_bias = call.attrs.i[0] != 0;
  const bool tf32 = call.attrs.i[1] != 0;
  MatView a = view_of(x);
  if (a.shape.rank == 1) {  // [K] -> [1, K]
    a.shape = Shape{1, x.shape()[0]};
    a.strides = Strides{x.shape()[0], x.strides()[0]};
  }
  // W[N, K]^T as a [K, N] view: strides swapped, no copy.
  const MatView b{w.impl()->data(), Shape{w.shape()[1], w.shape()[0]}, Strides{w.strides()[1], w.strides()[0]}};
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
