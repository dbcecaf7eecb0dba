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
// The kernels are livefuse's mma.sync one (kernels/cuda/gemm_tc.cuh; `sN`: K split N ways over
// grid z, the partials summed by each tile's last block through global memory) and the wgmma
// one (gemm_wgmma.cuh, `wgWxBNxR`: W warpgroups, 64 W x BN tiles, a ring of R stages, `o`: one step's products in
// flight while the next step's copies are waited for; `sN`: a cluster of N blocks
// summing through distributed shared memory), each timed twice: launched plainly,
// and with PDL and its first weight tiles loaded before its wait ("pdl"). A third timing puts
// the GEMM where a plan has it, after a short kernel that rewrites its input (a row kernel's
// stand-in): 20 pairs in a graph, cuBLASLt's pair against the kernel's with PDL -- what
// overlapping the weights' first round trip with the kernel before is worth. cuBLASLt's chosen
// algorithm (tile, stages, K splits, reduction) is printed for each case.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/gemm_tc.cuh"
#include "kernels/cuda/gemm_wgmma.cuh"
#include "kernels/cuda/pdl.cuh"
#include "lab_timing.cuh"
#define CK LAB_CK

namespace {
using livefuse::cuda::F16;
using livefuse::cuda::GemmTcArgs;
using livefuse::cuda::TcAct;
namespace tc = livefuse::cuda::tc;

enum Act : int { kNone = 0, kGeluErf = 1 };

// a.splits, a.partial, a.counters and a.early_weights as the caller set them; PDL when `pdl`.
template <int BM, int kStages>
void launch(const GemmTcArgs& a, bool pdl, cudaStream_t st) {
  constexpr int smem = tc::kGemmSmem<BM, kStages>;
  static bool once = [] {
    CK(cudaFuncSetAttribute(tc::gemm_tc_kernel<F16, BM, kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)once;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(a.n / tc::kGemmBN), static_cast<unsigned>((a.m + BM - 1) / BM),
                     static_cast<unsigned>(a.splits));
  cfg.blockDim = dim3(tc::kGemmThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute at{};
  at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at.val.programmaticStreamSerializationAllowed = 1;
  if (pdl) cfg.attrs = &at, cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, tc::gemm_tc_kernel<F16, BM, kStages>, a));
}

// The wgmma kernel (gemm_wgmma.cuh): 64 WG x BN tiles; a tile's K splits one cluster along x.
template <int WG, int BN, int kStages, int kInFlight = 0>
void launch_wg(const GemmTcArgs& a, bool pdl, cudaStream_t st) {
  constexpr int smem = tc::kWgmmaSmem<WG, BN, kStages>;
  static bool once = [] {
    CK(cudaFuncSetAttribute(tc::gemm_wgmma_kernel<F16, WG, BN, kStages, kInFlight>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)once;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(a.n / BN * a.splits), static_cast<unsigned>((a.m + 64 * WG - 1) / (64 * WG)));
  cfg.blockDim = dim3(WG * 128);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute at[2]{};
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = static_cast<unsigned>(a.splits);
  at[0].val.clusterDim.y = at[0].val.clusterDim.z = 1;
  at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = pdl ? 2 : 1;
  CK(cudaLaunchKernelEx(&cfg, tc::gemm_wgmma_kernel<F16, WG, BN, kStages, kInFlight>, a));
}

__global__ void gelu_kernel(lf_u16* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = lf_f2h(lf_gelu(lf_h2f(y[i])));
}

// The stand-in for the row kernel before a plan's GEMM: rewrites x (the same values) after its
// PDL wait, so the GEMM after it must wait for it and the one before it must be done reading x.
__global__ void rewrite_kernel(lf_u16* x, int64_t n) {
  livefuse::cuda::pdl_wait();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = lf_f2h(lf_h2f(x[i]) * 1.0f);
}

void rewrite(lf_u16* x, int64_t n, bool pdl, cudaStream_t st) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>((n + 255) / 256));
  cfg.blockDim = dim3(256);
  cfg.stream = st;
  cudaLaunchAttribute at{};
  at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at.val.programmaticStreamSerializationAllowed = 1;
  if (pdl) cfg.attrs = &at, cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, rewrite_kernel, x, n));
}

// cuBLASLt: out[M, N] row-major = x w^T + bias, as D (N x M, column-major) = W^T-view... the
// usual row-major trick: column-major D[N, M] = op(W)[N, K] * X^T[K, M] with W stored [N, K].
struct Lt {
  cublasLtHandle_t h = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = 32 << 20;
  bool describe = false;  // print the next call's algorithm
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
    if (describe) {
      auto cfg = [&](cublasLtMatmulAlgoConfigAttributes_t attr) {
        uint32_t v = 0;
        size_t got = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&r.algo, attr, &v, sizeof v, &got);
        return v;
      };
      int32_t id = 0;
      size_t got = 0;
      cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &got);
      std::printf("      cuBLASLt algo %d: tile id %u, stages id %u, split-K %u, reduction %u, swizzle %u, "
                  "cluster id %u, workspace %zu\n",
                  id, cfg(CUBLASLT_ALGO_CONFIG_TILE_ID), cfg(CUBLASLT_ALGO_CONFIG_STAGES_ID),
                  cfg(CUBLASLT_ALGO_CONFIG_SPLITK_NUM), cfg(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                  cfg(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), cfg(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                  r.workspaceSize);
      describe = false;
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

// The kernel's tile shapes (rows x 64 columns, ring stages) and K splits: livefuse takes
// 32 x 64 x 4 where 64-row tiles are fewer than the SMs, else 64 x 64 x 3, and the splits of
// gemm_tc_splits (kernels/cuda/gemm_tc.cu, gemm_tc_host.cpp).
using Launch = void (*)(const GemmTcArgs&, bool, cudaStream_t);
struct Variant {
  const char* name;
  Launch run;
  int splits;
};
const Variant kVariants[] = {
    {"32x64x4 s1", launch<32, 4>, 1}, {"32x64x4 s4", launch<32, 4>, 4}, {"64x64x3 s1", launch<64, 3>, 1},
    {"wg1x32x4 s1", launch_wg<1, 32, 4>, 1},      {"wg1x32x5o s1", launch_wg<1, 32, 5, 1>, 1},
    {"wg1x64x4 s1", launch_wg<1, 64, 4>, 1},      {"wg1x64x5o s1", launch_wg<1, 64, 5, 1>, 1},
    {"wg1x64x4 s2", launch_wg<1, 64, 4>, 2},      {"wg1x64x4 s4", launch_wg<1, 64, 4>, 4},
    {"wg1x64x5o s4", launch_wg<1, 64, 5, 1>, 4},  {"wg1x32x4 s2", launch_wg<1, 32, 4>, 2},
    {"wg1x32x4 s4", launch_wg<1, 32, 4>, 4},      {"wg1x32x5o s4", launch_wg<1, 32, 5, 1>, 4},
    {"wg2x64x4 s1", launch_wg<2, 64, 4>, 1},      {"wg2x64x5o s1", launch_wg<2, 64, 5, 1>, 1},
    {"wg2x64x4 s4", launch_wg<2, 64, 4>, 4},      {"wg2x64x4 s8", launch_wg<2, 64, 4>, 8},
    {"wg2x64x5o s8", launch_wg<2, 64, 5, 1>, 8},  {"wg2x32x4 s4", launch_wg<2, 32, 4>, 4},
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
  // The K splits' partial products and per-tile counters (zero between launches).
  constexpr size_t kPartialBytes = size_t{32} << 20;
  float* partial;
  unsigned* counters;
  CK(cudaMalloc(&partial, kPartialBytes));
  CK(cudaMalloc(&counters, 4096 * sizeof(unsigned)));
  CK(cudaMemset(counters, 0, 4096 * sizeof(unsigned)));
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
    lt.describe = true;
    lt_run();
    CK(cudaStreamSynchronize(st));
    const std::vector<float> r = host(ref, outs);
    const int64_t xn = static_cast<int64_t>(c.m) * c.k;
    const double t_lt = lab_time_graph_us(st, reps, [&] { for (int i = 0; i < kLaunches; ++i) lt_run(); }) / kLaunches;
    const double t_lt_pair = lab_time_graph_us(st, reps, [&] {
      for (int i = 0; i < kLaunches; ++i) rewrite(x, xn, false, st), lt_run();
    }) / kLaunches;
    std::printf("%-5s %5dx%-5d->%-5d parts %d  cuBLASLt%s %7.2f us; after a rewrite of x %7.2f us\n", c.name, c.m,
                c.k, c.n, c.parts, c.act == kGeluErf ? "+gelu" : "     ", t_lt, t_lt_pair);
    GemmTcArgs a;
    a.m = c.m, a.n = c.n, a.k = c.k, a.x = x, a.ldx = c.k, a.w = w, a.bias = b;
    a.act = c.act == kGeluErf ? TcAct::gelu : TcAct::none;
    a.parts = c.parts, a.width = c.n / c.parts;
    a.partial = partial;
    a.counters = counters;
    for (int p = 0; p < c.parts; ++p) a.out[p] = got + static_cast<size_t>(p) * c.m * a.width;
    for (const Variant& v : kVariants) {
      a.splits = v.splits;
      if (static_cast<size_t>(v.splits) * outs * 4 > kPartialBytes || c.k / tc::kGemmBK < v.splits) continue;
      double err = 0, peak = 0;
      bool same = true;
      std::vector<float> first_run;
      for (int pdl = 0; pdl < 2; ++pdl) {
        a.early_weights = pdl == 1;
        CK(cudaMemset(got, 0xff, outs * 2));
        v.run(a, pdl == 1, st);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(st));
        const std::vector<float> o = host(got, outs);
        for (size_t i = 0; i < outs; ++i) {
          err = std::fmax(err, std::fabs(double(o[i]) - r[i]));
          peak = std::fmax(peak, std::fabs(double(r[i])));
        }
        if (pdl == 0) first_run = o;
        else same = std::memcmp(o.data(), first_run.data(), outs * sizeof(float)) == 0;
      }
      const bool ok = err <= 4e-3 * std::fmax(peak, 1.0) && same;  // (NaN fails too)
      if (!ok) bad = true;
      double t[2], t_pair = 0;
      for (int pdl = 0; pdl < 2; ++pdl) {
        a.early_weights = pdl == 1;
        t[pdl] = lab_time_graph_us(st, reps, [&] { for (int i = 0; i < kLaunches; ++i) v.run(a, pdl == 1, st); }) / kLaunches;
      }
      a.early_weights = true;
      t_pair = lab_time_graph_us(st, reps, [&] {
        for (int i = 0; i < kLaunches; ++i) rewrite(x, xn, true, st), v.run(a, true, st);
      }) / kLaunches;
      std::printf("      %-13s %7.2f us, pdl %7.2f  (%.2fx cuBLASLt); after a rewrite, pdl %7.2f (%.2fx)  max |diff| "
                  "%.2e of peak %.2f%s\n",
                  v.name, t[0], t[1], t_lt / t[1], t_pair, t_lt_pair / t_pair, err, peak,
                  ok ? "" : same ? "  FAIL" : "  FAIL (bits differ with PDL)");
      if (jf)
        std::fprintf(jf, "%s{\"case\": \"%s\", \"m\": %d, \"k\": %d, \"n\": %d, \"variant\": \"%s\", \"us\": %.3f, "
                         "\"pdl_us\": %.3f, \"pair_pdl_us\": %.3f, \"cublaslt_us\": %.3f, \"cublaslt_pair_us\": %.3f, "
                         "\"max_diff\": %.3e}",
                     first ? "" : ",\n", c.name, c.m, c.k, c.n, v.name, t[0], t[1], t_pair, t_lt, t_lt_pair, err),
            first = false;
    }
    for (lf_u16* p : {x, w, b, ref, got}) CK(cudaFree(p));
  }
  if (jf) std::fprintf(jf, "\n]\n"), std::fclose(jf);
  return bad ? 1 : 0;
}
