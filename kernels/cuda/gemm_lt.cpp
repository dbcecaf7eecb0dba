// cuBLASLt calls: handles, per-shape plans and per-stream workspaces.
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
#include "kernels/cuda/gemm_lt.hpp"

#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/gemm.hpp"

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

struct GemmKey {
  std::array<int64_t, 22> v{};
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
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}


GemmPlan* plan_for(const LtCall& c, int device, cublasLtHandle_t handle) {
  // Per thread, and never destroyed: a thread's last GEMMs may run from other thread_local
  // destructors (deferred work flushed at thread exit), after this map would be gone. At most
  // kMaxPlans small descriptors per thread that ever ran a GEMM.
  thread_local auto& plans =
      *new std::unordered_map<GemmKey, std::unique_ptr<GemmPlan>, GemmKeyHash>();
  GemmKey key;
  key.v = {static_cast<int64_t>(c.dtype),
           c.tf32,
           c.a.op,
           c.b.op,
           c.m,
           c.n,
           c.k,
           c.a.ld,
           c.b.ld,
           c.ldd,
           c.batch,
           c.stride_a,
           c.stride_b,
           c.stride_d,
           c.bias != nullptr,
           alignment_of(c.a.ptr),
           alignment_of(c.b.ptr),
           alignment_of(c.d),
           c.bias ? alignment_of(c.bias) : 0,
           c.c ? alignment_of(c.c) : -1,
           device,
           static_cast<int64_t>(c.act)};
  auto it = plans.find(key);
  if (it != plans.end()) return it->second.get();
  if (plans.size() >= kMaxPlans) plans.clear();

  auto p = std::make_unique<GemmPlan>();
  const cudaDataType_t t = cuda_type(c.dtype);
  const cublasComputeType_t compute =
      c.dtype == DType::f32 && c.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  LF_CUBLAS_CALL(cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F));
  LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &c.a.op,
                                                sizeof(c.a.op)));
  LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &c.b.op,
                                                sizeof(c.b.op)));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  switch (c.act) {
    case LtAct::none:
      epi = c.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
      break;
    case LtAct::relu:
      epi = c.bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
      break;
    case LtAct::gelu_tanh:
      epi = c.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
      break;
  }
  if (epi != CUBLASLT_EPILOGUE_DEFAULT)
    LF_CUBLAS_CALL(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (c.bias) {
    LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t,
                                                  sizeof(t)));
    LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                  &c.bias, sizeof(c.bias)));
  }
  const auto make_layout = [&](cublasLtMatrixLayout_t* l, int64_t rows, int64_t cols, int64_t ld,
                               int64_t stride) {
    LF_CUBLAS_CALL(cublasLtMatrixLayoutCreate(l, t, static_cast<uint64_t>(rows),
                                              static_cast<uint64_t>(cols), ld));
    if (c.batch > 1) {
      const int32_t count = static_cast<int32_t>(c.batch);
      LF_CUBLAS_CALL(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                      &count, sizeof(count)));
      LF_CUBLAS_CALL(cublasLtMatrixLayoutSetAttribute(
          *l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
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
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al_a = static_cast<uint32_t>(alignment_of(c.a.ptr));
  const uint32_t al_b = static_cast<uint32_t>(alignment_of(c.b.ptr));
  const uint32_t al_d = static_cast<uint32_t>(alignment_of(c.d));
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  const uint32_t al_c = c.c ? std::min(al_d, static_cast<uint32_t>(alignment_of(c.c))) : al_d;
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  LF_CUBLAS_CALL(cublasLtMatmulAlgoGetHeuristic(handle, p->desc, p->a, p->b, p->d, p->d, pref, 1,
                                                &result, &found));
  LF_CHECK(found > 0, "matmul", "cuBLASLt has no algorithm for ", dtype_name(c.dtype), " m=", c.m,
           " n=", c.n, " k=", c.k, " batch=", c.batch, " (column-major terms; lda=", c.a.ld,
           " ldb=", c.b.ld, ")");
  p->algo = result.algo;
  p->workspace = result.workspaceSize;
  GemmPlan* raw = p.get();
  plans.emplace(key, std::move(p));
  return raw;
}

}  // namespace

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

void lt_matmul(const LtCall& c, cudaStream_t s) {
  const int device = current_device();
  cublasLtHandle_t handle = handle_for(device);
  void* ws = workspace_for(device, s);
  GemmPlan* p = plan_for(c, device, handle);
  if (c.bias)
    LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                  &c.bias, sizeof(c.bias)));
  LF_ASSERT(!c.c || c.act == LtAct::none, "a GEMM's C input with an activation epilogue");
  const float alpha = 1.0f, beta = c.c ? 1.0f : 0.0f;
  LF_CUBLAS_CALL(cublasLtMatmul(handle, p->desc, &alpha, c.a.ptr, p->a, c.b.ptr, p->b, &beta,
                                c.c ? c.c : c.d, p->d, c.d, p->d, &p->algo, ws, p->workspace, s));
}

}  // namespace livefuse::cuda
