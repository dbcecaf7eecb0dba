// Lab (run THERE, built by f32_emulation.sh): BERT-base's f32 GEMMs on cuBLASLt with the SIMT
// compute type (CUBLAS_COMPUTE_32F, what eager and plans run) against BF16x9 emulation on tensor
// cores (CUBLAS_COMPUTE_32F_EMULATED_16BFX9) and TF32 (for scale only: not f32's accuracy).
// Then livefuse's own 3xTF32 kernel (kernels/cuda/gemm_tc_f32.cuh: f32 split into two TF32
// parts, three tensor-core products) over its tile shapes and K splits, and once with FFN1's
// bias + erf-GELU epilogue. Per shape and kind: whether the heuristic has an algorithm, us a
// GEMM (the median of 50 replays of a graph of 20 launches, over the heuristic's algorithms: the
// best), and the largest error against an f64 reference relative to the largest |value|; ours
// also whether two launches gave the same bits.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/gemm_tc_f32.cuh"
#include "lab_timing.cuh"

#define CK(x) do { auto e_ = (x); if (e_ != 0) { std::printf("error %d at %s:%d\n", (int)e_, __FILE__, __LINE__); return 1; } } while (0)

namespace tc = livefuse::cuda::tc;
using livefuse::cuda::GemmTcArgs;
using livefuse::cuda::TcAct;

// Largest |y - ref| of a device result laid out as row-major [m, n].
double max_err(const float* dy, const std::vector<double>& ref) {
  std::vector<float> y(ref.size());
  if (cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost) != cudaSuccess) return 1e30;
  double e = 0;
  for (size_t i = 0; i < y.size(); ++i) e = std::max(e, std::fabs(y[i] - ref[i]));
  return e;
}

template <int BM, int BN, int kStages, bool kVec = false>
void launch_ours(const GemmTcArgs& a, cudaStream_t st) {
  constexpr int kSmem = tc::kGemmF32Smem<BM, BN, kStages, kVec>;
  static const bool configured = [] {
    LAB_CK(cudaFuncSetAttribute(tc::gemm_tc_f32_kernel<BM, BN, kStages, kVec>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned(a.n / BN), unsigned((a.m + BM - 1) / BM), unsigned(a.splits));
  tc::gemm_tc_f32_kernel<BM, BN, kStages, kVec><<<grid, tc::kGemmThreads, kSmem, st>>>(a);
}

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
        const double us = lab_time_graph_us(s, 50, [&] { for (int i = 0; i < 20; ++i) run(); }) / 20;
        if (us < best) {
          best = us;
          err = max_err(dy, ref);
        }
      }
      std::printf("%-8s %-7s %5d %9.2f %10.2e\n", sh.name, cname, found, best, err / peak);
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(lc);
      cublasLtMatmulDescDestroy(d);
    }
    // livefuse's 3xTF32 kernel: tiles x K splits.
    {
      float *part;
      unsigned* counters;
      CK(cudaMalloc(&part, size_t(8) * sh.m * sh.n * 4));
      CK(cudaMalloc(&counters, size_t(sh.m / 16 + 1) * (sh.n / 32) * 4));
      CK(cudaMemset(counters, 0, size_t(sh.m / 16 + 1) * (sh.n / 32) * 4));
      // "v": fragments read 16 bytes a lane (kVecK).
      struct Cfg { int bm, bn; bool vec; void (*fn)(const GemmTcArgs&, cudaStream_t); };
      const Cfg cfgs[] = {{32, 32, false, launch_ours<32, 32, 4>},      {64, 64, false, launch_ours<64, 64, 3>},
                          {32, 32, true, launch_ours<32, 32, 4, true>}, {64, 64, true, launch_ours<64, 64, 3, true>},
                          {32, 64, true, launch_ours<32, 64, 4, true>}, {64, 32, true, launch_ours<64, 32, 4, true>}};
      for (const Cfg& c : cfgs)
        for (int splits : {1, 2, 4, 8}) {
          const int steps = sh.k / int(tc::kF32BK);
          if (splits > steps / 4) continue;
          GemmTcArgs a;
          a.dtype = livefuse::DType::f32;
          a.m = sh.m, a.n = sh.n, a.k = sh.k, a.ldx = sh.k;
          a.x = dx, a.w = dw, a.width = sh.n, a.out[0] = dy;
          a.splits = splits, a.partial = part, a.counters = counters;
          CK(cudaMemset(dy, 0, ref.size() * 4));
          c.fn(a, s);
          CK(cudaStreamSynchronize(s));
          CK(cudaGetLastError());
          const double e = max_err(dy, ref);
          std::vector<float> y1(ref.size()), y2(ref.size());
          CK(cudaMemcpy(y1.data(), dy, y1.size() * 4, cudaMemcpyDeviceToHost));
          c.fn(a, s);
          CK(cudaStreamSynchronize(s));
          CK(cudaMemcpy(y2.data(), dy, y2.size() * 4, cudaMemcpyDeviceToHost));
          const bool same = std::memcmp(y1.data(), y2.data(), y1.size() * 4) == 0;
          const double us = lab_time_graph_us(s, 50, [&] { for (int i = 0; i < 20; ++i) c.fn(a, s); }) / 20;
          char name[32];
          std::snprintf(name, sizeof name, "x3%s %dx%d/%d", c.vec ? "v" : "", c.bm, c.bn, splits);
          std::printf("%-8s %-12s %9.2f %10.2e %s\n", sh.name, name, us, e / peak, same ? "same bits" : "BITS DIFFER");
        }
      // FFN1's epilogue: bias + erf-GELU, against gelu(ref + bias) in f64.
      if (sh.n == 3072 && sh.m == 128) {
        std::vector<float> b(sh.n);
        std::uniform_real_distribution<float> ub(-0.5f, 0.5f);
        for (float& v : b) v = ub(rng);
        float* db;
        CK(cudaMalloc(&db, b.size() * 4));
        CK(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice));
        std::vector<double> gref(ref.size());
        for (size_t i = 0; i < ref.size(); ++i) {
          const double v = ref[i] + b[i % sh.n];
          gref[i] = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
        }
        GemmTcArgs a;
        a.dtype = livefuse::DType::f32;
        a.m = sh.m, a.n = sh.n, a.k = sh.k, a.ldx = sh.k;
        a.x = dx, a.w = dw, a.width = sh.n, a.out[0] = dy, a.bias = db, a.act = TcAct::gelu;
        a.splits = 2, a.partial = part, a.counters = counters;
        launch_ours<32, 32, 4, true>(a, s);
        CK(cudaStreamSynchronize(s));
        std::printf("%-8s %-12s %9s %10.2e (bias + erf-GELU, vec 32x32/2)\n", sh.name, "x3 gelu", "-", max_err(dy, gref) / peak);
        cudaFree(db);
      }
      cudaFree(part);
      cudaFree(counters);
    }
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dy);
  }
  return 0;
}
