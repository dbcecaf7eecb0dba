// The one-row GEMV with two adjacent weight rows a warp (kernels/cuda/gemv.cu, LIVEFUSE_GEMV_PAIR)
// computes each output column with the same loads, lanes and order of sums as the kernel with one
// row a warp: the same bits, for every split of a row over warps, an odd column count (the last
// pair has one row), and each epilogue (bias, activation, residual, parts); a norm's product paired
// where one row a warp would take more than a wave of blocks. And a norm's loads before its
// statistics give the bits of loading them after. Needs a GPU.
#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/gemv.hpp"
#include "livefuse/config.hpp"
#include "tests/test_util.hpp"

namespace cu = livefuse::cuda;
using livefuse::DType;

namespace {

#define CU_OK(call) REQUIRE((call) == cudaSuccess)

// Device bytes of `n` elements of `dt` holding small finite values (f16 / bf16: the top half of a
// float's bits, the exponent kept below the f16 maximum; f32: the float).
void* device_values(DType dt, size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const size_t es = dt == DType::f32 ? 4 : 2;
  std::vector<unsigned char> h(n * es);
  for (size_t i = 0; i < n; ++i) {
    const float f = u(g);
    if (es == 4) {
      std::memcpy(&h[i * 4], &f, 4);
    } else {
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      const uint16_t v = static_cast<uint16_t>(bits >> 16) & 0xbbffu;
      std::memcpy(&h[i * 2], &v, 2);
    }
  }
  void* p = nullptr;
  CU_OK(cudaMalloc(&p, h.size()));
  CU_OK(cudaMemcpy(p, h.data(), h.size(), cudaMemcpyHostToDevice));
  return p;
}

std::vector<unsigned char> host_bytes(const void* p, size_t bytes) {
  std::vector<unsigned char> h(bytes);
  CU_OK(cudaDeviceSynchronize());
  CU_OK(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost));
  return h;
}

// A product of `rows` dense rows of x [rows, k] by w [n, k] into the dense out [rows, n], no
// epilogue: what each case then adds to.
cu::GemvArgs dense_args(DType dt, int rows, int64_t n, int64_t k, void* x, void* w, void* out) {
  cu::GemvArgs a;
  a.dtype = dt;
  a.rows = rows;
  a.n = n;
  a.k = k;
  a.x = x;
  a.ldx = k;
  a.w = w;
  a.ldw = k;
  a.out = out;
  a.ldo = n;
  return a;
}

}  // namespace

LF_CUDA_TEST_CASE("gemv: two weight rows a warp give the bits of one row a warp") {
  struct Size {
    int64_t n, k;
  };
  // Splits of a row over 2, 4 and 1 warps (launch_gemv's choice), odd and tiny column counts.
  const Size sizes[] = {{2051, 2048}, {768, 3072}, {4097, 64}, {3, 512}};
  const char* epilogues[] = {"plain", "bias", "residual", "bias relu", "bias gelu_tanh", "parts"};
  for (const DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const size_t es = dt == DType::f32 ? 4 : 2;
    for (const Size sz : sizes) {
      void* x = device_values(dt, static_cast<size_t>(sz.k), 1);
      void* w = device_values(dt, static_cast<size_t>(sz.n * sz.k), 2);
      void* bias = device_values(dt, static_cast<size_t>(sz.n), 3);
      void* resid = device_values(dt, static_cast<size_t>(sz.n), 4);
      void* out = nullptr;
      CU_OK(cudaMalloc(&out, static_cast<size_t>(sz.n) * es));
      for (const std::string ep : epilogues) {
        CAPTURE(ep);
        CAPTURE(sz.n);
        CAPTURE(sz.k);
        CAPTURE(static_cast<int>(dt));
        cu::GemvArgs a = dense_args(dt, 1, sz.n, sz.k, x, w, out);
        if (ep.find("bias") == 0) a.bias = bias;
        if (ep == "residual") a.residual = resid;
        if (ep == "bias relu") a.act = cu::GemvAct::relu;
        if (ep == "bias gelu_tanh") a.act = cu::GemvAct::gelu_tanh;
        if (ep == "parts") {  // three parts written to their own dense outputs: here, one buffer
          a.parts = 3;
          a.begin[0] = 0;
          a.begin[1] = sz.n > 5 ? 5 : 1;
          a.begin[2] = sz.n > 5 ? sz.n - 7 : 2;
          a.begin[3] = sz.n;
          for (int p = 0; p < 3; ++p) a.part_out[p] = static_cast<unsigned char*>(out) + a.begin[p] * es;
        }
        REQUIRE(cu::gemv_supported(a));
        std::vector<unsigned char> got[2];
        for (int pair = 0; pair < 2; ++pair) {
          const lftest::ScopedConfig pairs(&livefuse::Config::gemv_pair, pair == 0 ? 0 : 2);
          CU_OK(cudaMemset(out, 0xff, static_cast<size_t>(sz.n) * es));
          cu::launch_gemv(a, nullptr);
          got[pair] = host_bytes(out, static_cast<size_t>(sz.n) * es);
        }
        CHECK(got[0] == got[1]);
        // Every column written (the 0xff fill is a NaN pattern in each dtype: none survives).
        size_t untouched = 0;
        for (int64_t i = 0; i < sz.n; ++i) {
          bool all_ff = true;
          for (size_t b = 0; b < es; ++b) all_ff = all_ff && got[1][i * es + b] == 0xff;
          untouched += all_ff;
        }
        CHECK(untouched == 0);
      }
      for (void* p : {x, w, bias, resid, out}) cudaFree(p);
    }
  }
}

LF_CUDA_TEST_CASE("gemv: a norm's chunks loaded before its statistics give the bits of loading them after") {
  // kernels/cuda/gemv.cu, set_gemv_norm_early: only where each thread's first chunk is read
  // moves. Rows of 768 (every chunk early: GPT-2) and 2048 (a thread's later chunks in the loop),
  // one to eight rows, layer_norm with weight and bias, rms_norm with a weight, Llama's rounding
  // before the scale.
  struct Case {
    int64_t k;
    int rows;
    cu::GemvNorm norm;
    bool round_first;
  };
  const Case cases[] = {{768, 1, cu::GemvNorm::layer, false}, {768, 4, cu::GemvNorm::layer, false},
                        {2048, 1, cu::GemvNorm::rms, true},    {2048, 8, cu::GemvNorm::rms, false},
                        {3072, 2, cu::GemvNorm::layer, false}};
  const int64_t n = 2304;
  for (const DType dt : {DType::f16, DType::bf16}) {
    for (const Case& c : cases) {
      CAPTURE(static_cast<int>(dt));
      CAPTURE(c.k);
      CAPTURE(c.rows);
      void* x = device_values(dt, static_cast<size_t>(c.rows * c.k), 11);
      void* w = device_values(dt, static_cast<size_t>(n * c.k), 12);
      void* g = device_values(dt, static_cast<size_t>(c.k), 13);
      void* b = device_values(dt, static_cast<size_t>(c.k), 14);
      void* out = nullptr;
      CU_OK(cudaMalloc(&out, static_cast<size_t>(c.rows * n) * 2));
      cu::GemvArgs a = dense_args(dt, c.rows, n, c.k, x, w, out);
      a.norm = c.norm;
      a.norm_w = g;
      a.norm_b = c.norm == cu::GemvNorm::layer ? b : nullptr;
      a.eps = 1e-5f;
      a.norm_round_first = c.round_first;
      REQUIRE(cu::gemv_supported(a));
      std::vector<unsigned char> got[2];
      for (int early = 0; early < 2; ++early) {
        cu::set_gemv_norm_early(early == 1);
        CU_OK(cudaMemset(out, 0xff, static_cast<size_t>(c.rows * n) * 2));
        cu::launch_gemv(a, nullptr);
        got[early] = host_bytes(out, static_cast<size_t>(c.rows * n) * 2);
      }
      cu::set_gemv_norm_early(true);
      CHECK(got[0] == got[1]);
      size_t untouched = 0;  // (0xffff is a NaN in both dtypes: none may survive)
      for (size_t i = 0; i + 1 < got[1].size(); i += 2) untouched += got[1][i] == 0xff && got[1][i + 1] == 0xff;
      CHECK(untouched == 0);
      for (void* p : {x, w, g, b, out}) cudaFree(p);
    }
  }
}

LF_CUDA_TEST_CASE("gemv: a norm's product past a wave of blocks takes two rows a warp, with the bits of one") {
  // kernels/cuda/gemv.cu, launch_rows: under LIVEFUSE_GEMV_PAIR=1 a one-row GEMV with a norm
  // inside pairs its rows where one row a warp would need more groups of columns than a wave of
  // blocks holds (then each block would take groups one after another). GPT-2's FFN1 (3072 x 768,
  // layer_norm, bias, gelu_tanh; past the wave on a 132-SM card), a vocabulary head (50257
  // columns: past the wave of any card), Llama's rms_norm with its rounding, f32; a short
  // product (256 columns: within any wave) stays one row a warp. Modes 0, 1 and 2 give the same
  // bits; the counter shows which launches paired.
  struct Case {
    DType dt;
    int64_t n, k;
    cu::GemvNorm norm;
    bool round_first, gelu;
    int paired;  // under mode 1: 1 must pair, 0 must not, -1 depends on the card
  };
  const Case cases[] = {{DType::f16, 3072, 768, cu::GemvNorm::layer, false, true, -1},
                        {DType::f16, 50257, 768, cu::GemvNorm::layer, false, false, 1},
                        {DType::bf16, 50257, 2048, cu::GemvNorm::rms, true, false, 1},
                        {DType::f32, 50257, 768, cu::GemvNorm::layer, false, true, 1},
                        {DType::f16, 256, 768, cu::GemvNorm::layer, false, true, 0}};
  for (const Case& c : cases) {
    CAPTURE(static_cast<int>(c.dt));
    CAPTURE(c.n);
    CAPTURE(c.k);
    const size_t es = c.dt == DType::f32 ? 4 : 2, bytes = static_cast<size_t>(c.n) * es;
    void* x = device_values(c.dt, static_cast<size_t>(c.k), 21);
    void* w = device_values(c.dt, static_cast<size_t>(c.n * c.k), 22);
    void* g = device_values(c.dt, static_cast<size_t>(c.k), 23);
    void* b = device_values(c.dt, static_cast<size_t>(c.k), 24);
    void* bias = device_values(c.dt, static_cast<size_t>(c.n), 25);
    void* out = nullptr;
    CU_OK(cudaMalloc(&out, bytes));
    cu::GemvArgs a = dense_args(c.dt, 1, c.n, c.k, x, w, out);
    a.norm = c.norm;
    a.norm_w = g;
    a.norm_b = c.norm == cu::GemvNorm::layer ? b : nullptr;
    a.eps = 1e-5f;
    a.norm_round_first = c.round_first;
    if (c.gelu) {
      a.bias = bias;
      a.act = cu::GemvAct::gelu_tanh;
    }
    REQUIRE(cu::gemv_supported(a));
    std::vector<unsigned char> got[3];
    uint64_t paired[3] = {};
    for (int mode = 0; mode < 3; ++mode) {
      const lftest::ScopedConfig pairs(&livefuse::Config::gemv_pair, mode);
      CU_OK(cudaMemset(out, 0xff, bytes));
      const uint64_t before = cu::gemv_launch_counts().norm_paired;
      cu::launch_gemv(a, nullptr);
      paired[mode] = cu::gemv_launch_counts().norm_paired - before;
      got[mode] = host_bytes(out, bytes);
    }
    CHECK(got[0] == got[1]);
    CHECK(got[0] == got[2]);
    CHECK(paired[0] == 0);
    CHECK(paired[2] == 0);  // mode 2 pairs every product: not counted as a choice past a wave
    if (c.paired >= 0) CHECK(paired[1] == static_cast<uint64_t>(c.paired));
    size_t untouched = 0;  // every column written: the 0xff fill is a NaN in each dtype
    for (int64_t i = 0; i < c.n; ++i) {
      bool all_ff = true;
      for (size_t e = 0; e < es; ++e) all_ff = all_ff && got[1][i * es + e] == 0xff;
      untouched += all_ff;
    }
    CHECK(untouched == 0);
    for (void* p : {x, w, g, b, bias, out}) cudaFree(p);
  }
}

#endif  // LIVEFUSE_HAS_CUDA
