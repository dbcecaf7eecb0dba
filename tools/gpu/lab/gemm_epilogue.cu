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
// The kernel: a block of 4 warps computes a BM x BN tile (warps 2 x 2, each (BM/2) x (BN/2) as
// m16n8k16 tiles), K in steps of 64 through a kStages-deep cp.async ring of swizzled tiles
// (the attention kernel's, kernels/cuda/attention_mma.cuh); rows past M are zero-filled and not
// stored. Takes N % BN == 0, K % 64 == 0.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention_mma.cuh"
#include "lab_timing.cuh"
#define CK LAB_CK

namespace {
using livefuse::cuda::F16;
namespace tc = livefuse::cuda::tc;

enum Act : int { kNone = 0, kGeluErf = 1 };
constexpr int kBK = 64, kThreads = 128;

struct Args {
  const lf_u16 *x, *w, *bias;  // [M, K], [N, K], [N]
  lf_u16* out;                 // parts outputs [M, N / parts] back to back
  int m, n, k, parts;
};

__device__ __forceinline__ float gelu_erf(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }

template <int BM, int BN, int kStages, int kAct>
__global__ void __launch_bounds__(kThreads) gemm_tc(Args a) {
  constexpr int WM = BM / 2, WN = BN / 2, MT = WM / 16, NT = WN / 8;
  static_assert(NT % 2 == 0, "B fragments come in pairs of n8 tiles");
  extern __shared__ __align__(128) lf_u16 smem[];
  lf_u16* const sa = smem;                       // [kStages][BM][kBK]
  lf_u16* const sb = smem + kStages * BM * kBK;  // [kStages][BN][kBK]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp / 2, wn = warp % 2;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * BM, col0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int steps = a.k / kBK;
  auto load = [&](int s, int stage) {
    const int64_t k0 = static_cast<int64_t>(s) * kBK;
    tc::load_tile<kBK, BM, kThreads>(sa + stage * BM * kBK, a.x + row0 * a.k + k0, a.k, 0, a.m - row0, tid);
    tc::load_tile<kBK, BN, kThreads>(sb + stage * BN * kBK, a.w + col0 * a.k + k0, a.k, 0, BN, tid);
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load(s, s);
    tc::cp_async_commit();
  }
  float acc[MT][NT][4] = {};
  const int a_row = lane & 15, a_half = lane >> 4;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_half = (lane >> 3) & 1;
  for (int s = 0; s < steps; ++s) {
    tc::cp_async_wait<kStages - 2>();
    __syncthreads();
    // The ring slot freed last step takes step s + kStages - 1 while this one computes.
    if (s + kStages - 1 < steps) load(s + kStages - 1, (s + kStages - 1) % kStages);
    tc::cp_async_commit();
    const lf_u16* ta = sa + (s % kStages) * BM * kBK;
    const lf_u16* tb = sb + (s % kStages) * BN * kBK;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t af[MT][4];
#pragma unroll
      for (int i = 0; i < MT; ++i)
        tc::ldmatrix_x4(af[i], tc::smem_address(ta + tc::swizzled<kBK>(wm * WM + i * 16 + a_row, 2 * kk + a_half)));
#pragma unroll
      for (int j = 0; j < NT / 2; ++j) {
        uint32_t bf[4];
        tc::ldmatrix_x4(bf, tc::smem_address(tb + tc::swizzled<kBK>(wn * WN + j * 16 + b_row, 2 * kk + b_half)));
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          tc::mma<F16>(acc[i][2 * j], af[i], bf[0], bf[1]);
          tc::mma<F16>(acc[i][2 * j + 1], af[i], bf[2], bf[3]);
        }
      }
    }
  }
  tc::cp_async_wait<0>();
  // Epilogue: element e of tile (i, j) is row g + 8 (e / 2), column 2t + e % 2.
  const int g = lane / 4, t = lane % 4;
  const int64_t width = a.n / a.parts;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int64_t col = col0 + wn * WN + j * 8 + 2 * t;
    const float b0 = lf_h2f(a.bias[col]), b1 = lf_h2f(a.bias[col + 1]);
    const int64_t part = col / width, pcol = col % width;
    lf_u16* const base = a.out + part * a.m * width + pcol;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = row0 + wm * WM + i * 16 + g + 8 * h;
        if (row >= a.m) continue;
        float v0 = lf_h2f(lf_f2h(acc[i][j][2 * h] + b0)), v1 = lf_h2f(lf_f2h(acc[i][j][2 * h + 1] + b1));
        if constexpr (kAct == kGeluErf) v0 = gelu_erf(v0), v1 = gelu_erf(v1);
        const uint32_t packed = static_cast<uint32_t>(lf_f2h(v0)) | (static_cast<uint32_t>(lf_f2h(v1)) << 16);
        *reinterpret_cast<uint32_t*>(base + row * width) = packed;
      }
    }
  }
}

template <int BM, int BN, int kStages, int kAct>
void launch(const Args& a, cudaStream_t st) {
  constexpr int smem = kStages * (BM + BN) * kBK * 2;
  static bool once = [] {
    CK(cudaFuncSetAttribute(gemm_tc<BM, BN, kStages, kAct>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)once;
  const dim3 grid(a.n / BN, (a.m + BM - 1) / BM);
  gemm_tc<BM, BN, kStages, kAct><<<grid, kThreads, smem, st>>>(a);
}

__global__ void gelu_kernel(lf_u16* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = lf_f2h(gelu_erf(lf_h2f(y[i])));
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

// Our kernel's variants: (BM, BN, stages).
using Launch = void (*)(const Args&, cudaStream_t);
struct Variant {
  const char* name;
  Launch run[2];  // by act
};
const Variant kVariants[] = {
    {"64x64x3", {launch<64, 64, 3, kNone>, launch<64, 64, 3, kGeluErf>}},
    {"64x32x4", {launch<64, 32, 4, kNone>, launch<64, 32, 4, kGeluErf>}},
    {"128x64x3", {launch<128, 64, 3, kNone>, launch<128, 64, 3, kGeluErf>}},
    {"32x64x4", {launch<32, 64, 4, kNone>, launch<32, 64, 4, kGeluErf>}},
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
    const Args a{x, w, b, got, c.m, c.n, c.k, c.parts};
    for (const Variant& v : kVariants) {
      CK(cudaMemset(got, 0xff, outs * 2));
      v.run[c.act](a, st);
      CK(cudaGetLastError());
      CK(cudaStreamSynchronize(st));
      const std::vector<float> o = host(got, outs);
      double err = 0, peak = 0;
      for (size_t i = 0; i < outs; ++i) {
        err = std::fmax(err, std::fabs(double(o[i]) - r[i]));
        peak = std::fmax(peak, std::fabs(double(r[i])));
      }
      if (!(err <= 4e-3 * std::fmax(peak, 1.0))) bad = true;  // (NaN fails too)
      const double t = lab_time_graph_us(st, reps, [&] { for (int i = 0; i < kLaunches; ++i) v.run[c.act](a, st); }) / kLaunches;
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
