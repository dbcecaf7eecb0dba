// GEMM-with-epilogue lab (not part of the meson build; run on the GPU machine): BERT-base's
// linears at batch 1 and 8 (128 / 1024 rows, f16) as a tensor-core GEMM of our own whose
// epilogue does what cuBLASLt cannot --
//   qkv    one launch writes Q, K and V dense and back to back (the plan's sibling outputs)
//          where cuBLASLt takes a strided-batched call of three products;
//   ffn1   bias + erf-GELU (HF BERT's "gelu"): cuBLASLt's GELU epilogue is the tanh form, so a
//          plan runs its GEMM + bias, then a GELU kernel;
//   out    a plain bias, as cuBLASLt does it (the cost of the kernel itself);
// -- against cuBLASLt on the same operands, each as a graph of 20 launches back to back (the
// way livefuse-bench-gemm-tune times them), the median of `reps` replays.
//   bash tools/gpu/lab/gemm_epilogue.sh      [reps] [--json PATH]
// Numerics as eager's: the f32 sum plus the bias rounded to f16 once, then (ffn1) the GELU of
// that f16 value rounded again -- what cuBLASLt's BIAS epilogue then an eager GELU give. Checked
// against cuBLASLt's result (the two sum in different orders: within a few f16 ulps).
//
// The kernel is livefuse's (kernels/cuda/gemm_tc.cuh) at each of its tile shapes.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/gemm_tc.cuh"
#include "lab_timing.cuh"
#define CK LAB_CK

namespace {
using livefuse::cuda::F16;
using livefuse::cuda::GemmTcArgs;
using livefuse::cuda::TcAct;
namespace tc = livefuse::cuda::tc;

enum Act : int { kNone = 0, kGeluErf = 1 };

template <int BM, int kStages>
void launch(const GemmTcArgs& a, cudaStream_t st) {
  constexpr int smem = tc::kGemmSmem<BM, kStages>;
  static bool once = [] {
    CK(cudaFuncSetAttribute(tc::gemm_tc_kernel<F16, BM, kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)once;
  const dim3 grid(static_cast<unsigned>(a.n / tc::kGemmBN), static_cast<unsigned>((a.m + BM - 1) / BM));
  tc::gemm_tc_kernel<F16, BM, kStages><<<grid, tc::kGemmThreads, smem, st>>>(a);
}

__global__ void gelu_kernel(lf_u16* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = lf_f2h(lf_gelu(lf_h2f(y[i])));
}

// cuBLASLt: out[M, N] row-major = x w^T + bias, as D (N x M, column-major) = W^T-view... the
// usual row-major trick: column-major D[N, M] = op(W)[N, K] * X^T[K, M] with W stored [N, K].
struct Lt {
  cublasLtHandle_t h = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = 32 << 20;
  Lt() {
    cublasLtCreate(&h);
    CK(cudaMalloc(&ws, ws_bytes));
  }
  // batch > 1: batch b multiplies weight rows [b n, (b + 1) n) into out + b m n (the plan's siblings).
  void run(const lf_u16* x, const lf_u16* w, const lf_u16* bias, lf_u16* out, int m, int n, int k, int batch,
           cudaStream_t st) {
    cublasLtMatmulDesc_t op;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const cublasOperation_t tn = CUBLAS_OP_T, nn = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tn, sizeof tn);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn);
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    const cudaDataType_t bt = CUDA_R_16F;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, k, n, k);  // W^T viewed: k x n col-major, op T
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, k, m, k);  // X^T: k x m
    cublasLtMatrixLayoutCreate(&ld, CUDA_R_16F, n, m, n);
    if (batch > 1) {
      const int64_t sa = static_cast<int64_t>(n) * k, sb = 0, sd = static_cast<int64_t>(n) * m, sbias = n;
      for (auto* l : {la, lb, ld}) cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
      cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof sa);
      cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof sb);
      cublasLtMatrixLayoutSetAttribute(ld, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sd, sizeof sd);
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &sbias, sizeof sbias);
    }
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
    cublasLtMatmulHeuristicResult_t r{};
    int found = 0;
    cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &r, &found);
    if (!found) {
      std::fprintf(stderr, "cuBLASLt: no algorithm\n");
      std::exit(2);
    }
    const float one = 1.0f, zero = 0.0f;
    if (cublasLtMatmul(h, op, &one, w, la, x, lb, &zero, out, ld, out, ld, &r.algo, ws, ws_bytes, st) !=
        CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cuBLASLt: matmul failed\n");
      std::exit(2);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    for (auto* l : {la, lb, ld}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(op);
  }
};

lf_u16* device_random(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<lf_u16> h(n);
  for (auto& v : h) v = lf_f2h(u(rng));
  lf_u16* d;
  CK(cudaMalloc(&d, n * 2));
  CK(cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice));
  return d;
}

std::vector<float> host(const lf_u16* d, size_t n) {
  std::vector<lf_u16> h(n);
  CK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = lf_h2f(h[i]);
  return f;
}

struct Case {
  const char* name;
  int m, k, n, parts, act;
};

// The kernel's tile shapes (rows x 64 columns, ring stages): livefuse takes 32 x 64 x 4 where
// 64-row tiles are fewer than the SMs, else 64 x 64 x 3 (kernels/cuda/gemm_tc.cu).
using Launch = void (*)(const GemmTcArgs&, cudaStream_t);
struct Variant {
  const char* name;
  Launch run;
};
const Variant kVariants[] = {
    {"32x64x4", launch<32, 4>}, {"32x64x3", launch<32, 3>}, {"64x64x3", launch<64, 3>},
    {"64x64x4", launch<64, 4>}, {"128x64x3", launch<128, 3>},
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 50;
  const char* json = nullptr;
  lab_args(argc, argv, &reps, &json);
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("gemm_epilogue lab on %s: f16, us per GEMM in a graph of 20, median of %d\n", prop.name, reps);
  const Case cases[] = {
      {"qkv", 128, 768, 2304, 3, kNone},   {"out", 128, 768, 768, 1, kNone},
      {"ffn1", 128, 768, 3072, 1, kGeluErf}, {"ffn2", 128, 3072, 768, 1, kNone},
      {"qkv", 1024, 768, 2304, 3, kNone},  {"ffn1", 1024, 768, 3072, 1, kGeluErf},
  };
  std::mt19937 rng(7);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  Lt lt;
  FILE* jf = json ? std::fopen(json, "w") : nullptr;
  if (jf) std::fprintf(jf, "[\n");
  bool first = true, bad = false;
  constexpr int kLaunches = 20;
  for (const Case& c : cases) {
    lf_u16* x = device_random(static_cast<size_t>(c.m) * c.k, 1.0f, rng);
    lf_u16* w = device_random(static_cast<size_t>(c.n) * c.k, 1.0f / std::sqrt(float(c.k)), rng);
    lf_u16* b = device_random(c.n, 0.1f, rng);
    lf_u16 *ref, *got;
    const size_t outs = static_cast<size_t>(c.m) * c.n;
    CK(cudaMalloc(&ref, outs * 2));
    CK(cudaMalloc(&got, outs * 2));
    // cuBLASLt as a plan runs it: batched for siblings, then the GELU kernel for ffn1.
    auto lt_run = [&] {
      lt.run(x, w, b, ref, c.m, c.n / c.parts, c.k, c.parts, st);
      if (c.act == kGeluErf) gelu_kernel<<<(outs + 255) / 256, 256, 0, st>>>(ref, outs);
    };
    lt_run();
    CK(cudaStreamSynchronize(st));
    const std::vector<float> r = host(ref, outs);
    const double t_lt = lab_time_graph_us(st, reps, [&] { for (int i = 0; i < kLaunches; ++i) lt_run(); }) / kLaunches;
    std::printf("%-5s %5dx%-5d->%-5d parts %d  cuBLASLt%s %7.2f us\n", c.name, c.m, c.k, c.n, c.parts,
                c.act == kGeluErf ? "+gelu" : "     ", t_lt);
    GemmTcArgs a;
    a.m = c.m, a.n = c.n, a.k = c.k, a.x = x, a.ldx = c.k, a.w = w, a.bias = b;
    a.act = c.act == kGeluErf ? TcAct::gelu : TcAct::none;
    a.parts = c.parts, a.width = c.n / c.parts;
    for (int p = 0; p < c.parts; ++p) a.out[p] = got + static_cast<size_t>(p) * c.m * a.width;
    for (const Variant& v : kVariants) {
      CK(cudaMemset(got, 0xff, outs * 2));
      v.run(a, st);
      CK(cudaGetLastError());
      CK(cudaStreamSynchronize(st));
      const std::vector<float> o = host(got, outs);
      double err = 0, peak = 0;
      for (size_t i = 0; i < outs; ++i) {
        err = std::fmax(err, std::fabs(double(o[i]) - r[i]));
        peak = std::fmax(peak, std::fabs(double(r[i])));
      }
      if (!(err <= 4e-3 * std::fmax(peak, 1.0))) bad = true;  // (NaN fails too)
      const double t = lab_time_graph_us(st, reps, [&] { for (int i = 0; i < kLaunches; ++i) v.run(a, st); }) / kLaunches;
      std::printf("      %-10s %7.2f us  (%.2fx cuBLASLt)  max |diff| %.2e of peak %.2f%s\n", v.name, t, t_lt / t, err,
                  peak, err <= 4e-3 * std::fmax(peak, 1.0) ? "" : "  FAIL");
      if (jf)
        std::fprintf(jf, "%s{\"case\": \"%s\", \"m\": %d, \"k\": %d, \"n\": %d, \"variant\": \"%s\", \"us\": %.3f, \"cublaslt_us\": %.3f, \"max_diff\": %.3e}",
                     first ? "" : ",\n", c.name, c.m, c.k, c.n, v.name, t, t_lt, err), first = false;
    }
    for (lf_u16* p : {x, w, b, ref, got}) CK(cudaFree(p));
  }
  if (jf) std::fprintf(jf, "\n]\n"), std::fclose(jf);
  return bad ? 1 : 0;
}
