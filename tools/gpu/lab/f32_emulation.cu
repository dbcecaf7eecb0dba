// Lab (run THERE, built by f32_emulation.sh): BERT-base's f32 GEMMs on cuBLASLt with the SIMT
// compute type (CUBLAS_COMPUTE_32F, what eager and plans run) against BF16x9 emulation on tensor
// cores (CUBLAS_COMPUTE_32F_EMULATED_16BFX9) and TF32 (for scale only: not f32's accuracy).
// Per shape and compute type: whether the heuristic has an algorithm, us a GEMM (median of 7
// timings of 50 back-to-back runs), and the largest error against an f64 reference relative to
// the largest |value|.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#define CK(x) do { auto e_ = (x); if (e_ != 0) { std::printf("error %d at %s:%d\n", (int)e_, __FILE__, __LINE__); return 1; } } while (0)

int main() {
  struct Shape { int m, k, n; const char* name; };
  const Shape shapes[] = {{128, 768, 2304, "qkv"}, {128, 768, 768, "out"}, {128, 768, 3072, "ffn1"},
                          {128, 3072, 768, "ffn2"}, {1024, 768, 3072, "ffn1 b8"}};
  const std::pair<cublasComputeType_t, const char*> computes[] = {
      {CUBLAS_COMPUTE_32F, "32F"}, {CUBLAS_COMPUTE_32F_EMULATED_16BFX9, "BF16x9"}, {CUBLAS_COMPUTE_32F_FAST_TF32, "TF32"}};
  cublasLtHandle_t h;
  CK(cublasLtCreate(&h));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  void* ws;
  const size_t ws_bytes = 32u << 20;
  CK(cudaMalloc(&ws, ws_bytes));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::mt19937 rng(7);
  std::printf("%-8s %-7s %5s %9s %10s\n", "gemm", "compute", "algos", "us", "max_err");
  for (const Shape& sh : shapes) {
    // Row-major x[m, k] and w[n, k] (a linear): column-major out^T[n, m] = w[n, k] . x^T.
    std::vector<float> x(size_t(sh.m) * sh.k), w(size_t(sh.n) * sh.k);
    std::uniform_real_distribution<float> u(-1, 1);
    for (float& v : x) v = u(rng);
    const float sc = 1.0f / std::sqrt(float(sh.k));
    for (float& v : w) v = u(rng) * sc;
    std::vector<double> ref(size_t(sh.m) * sh.n);
    double peak = 0;
    for (int i = 0; i < sh.m; ++i)
      for (int j = 0; j < sh.n; ++j) {
        double acc = 0;
        for (int k = 0; k < sh.k; ++k) acc += double(x[size_t(i) * sh.k + k]) * w[size_t(j) * sh.k + k];
        ref[size_t(i) * sh.n + j] = acc;
        peak = std::max(peak, std::fabs(acc));
      }
    float *dx, *dw, *dy;
    CK(cudaMalloc(&dx, x.size() * 4));
    CK(cudaMalloc(&dw, w.size() * 4));
    CK(cudaMalloc(&dy, ref.size() * 4));
    CK(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
    for (const auto& [ct, cname] : computes) {
      cublasLtMatmulDesc_t d;
      CK(cublasLtMatmulDescCreate(&d, ct, CUDA_R_32F));
      const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
      CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
      CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof(nt)));
      cublasLtMatrixLayout_t la, lb, lc;
      CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, sh.k, sh.n, sh.k));  // w^T viewed: k x n, op T -> n x k
      CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, sh.k, sh.m, sh.k));  // x^T: k x m
      CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, sh.n, sh.m, sh.n));  // out^T: n x m
      cublasLtMatmulPreference_t pref;
      CK(cublasLtMatmulPreferenceCreate(&pref));
      CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
      cublasLtMatmulHeuristicResult_t r[8];
      int found = 0;
      const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, lc, lc, pref, 8, r, &found);
      if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
        std::printf("%-8s %-7s %5d %9s %10s (heuristic status %d)\n", sh.name, cname, found, "-", "-", (int)hs);
        continue;
      }
      const float one = 1, zero = 0;
      double best = 1e30, err = 0;
      for (int a = 0; a < found; ++a) {
        if (r[a].state != CUBLAS_STATUS_SUCCESS) continue;
        const auto run = [&] {
          return cublasLtMatmul(h, d, &one, dw, la, dx, lb, &zero, dy, lc, dy, lc, &r[a].algo, ws, ws_bytes, s);
        };
        if (run() != CUBLAS_STATUS_SUCCESS) continue;
        CK(cudaStreamSynchronize(s));
        std::vector<float> times;
        for (int rep = 0; rep < 7; ++rep) {
          CK(cudaEventRecord(e0, s));
          for (int i = 0; i < 50; ++i) run();
          CK(cudaEventRecord(e1, s));
          CK(cudaEventSynchronize(e1));
          float ms;
          CK(cudaEventElapsedTime(&ms, e0, e1));
          times.push_back(ms * 1000 / 50);
        }
        std::sort(times.begin(), times.end());
        if (times[3] < best) {
          best = times[3];
          std::vector<float> y(ref.size());
          CK(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost));
          // out^T column-major n x m == row-major [m, n]
          err = 0;
          for (size_t i = 0; i < y.size(); ++i) err = std::max(err, std::fabs(y[i] - ref[i]));
        }
      }
      std::printf("%-8s %-7s %5d %9.2f %10.2e\n", sh.name, cname, found, best, err / peak);
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(lc);
      cublasLtMatmulDescDestroy(d);
    }
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dy);
  }
  return 0;
}
