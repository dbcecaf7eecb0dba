// The tensor-core decode attention alone, shape by shape, with nothing else of livefuse running:
// each launch is followed by a bounded wait (cudaStreamQuery for up to 5 s), its error, and a
// comparison with the CPU kernel, every line flushed -- so a hang or a fault names its shape.
// Built THERE by tools/gpu/lab/decode_tc_diag.sh against .gpu/build/liblivefuse.so.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kernels/attention_args.hpp"
#include "kernels/cuda/attention_kernels.hpp"

using livefuse::AttentionArgs;
using livefuse::DType;

namespace {

struct Shape {
  const char* name;
  DType dt;
  int64_t heads, rows, sk, d;
  int mask;  // 0 none; 1 [sk] for every row (every third key -inf); 2 [rows, sk], row 1 all -inf
};

uint16_t to_bits(float x, DType dt) {
  if (dt == DType::f16) {
    const __half h = __float2half(x);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
  }
  const __nv_bfloat16 h = __float2bfloat16(x);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

float from_bits(uint16_t b, DType dt) {
  if (dt == DType::f16) {
    __half h;
    std::memcpy(&h, &b, 2);
    return __half2float(h);
  }
  __nv_bfloat16 h;
  std::memcpy(&h, &b, 2);
  return __bfloat162float(h);
}

// Waits up to 5 s for the stream; "hang" if it never drains.
const char* wait_for(cudaStream_t s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return "ok";
    if (e != cudaErrorNotReady) return cudaGetErrorString(e);
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(5)) return "HANG (5 s)";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool run(const Shape& c, cudaStream_t s) {
  std::printf("%-30s heads %2lld rows %2lld sk %5lld d %3lld mask %d: ", c.name, (long long)c.heads,
              (long long)c.rows, (long long)c.sk, (long long)c.d, c.mask);
  std::fflush(stdout);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t nq = c.heads * c.rows * c.d, nkv = c.heads * c.sk * c.d;
  const int64_t mask_rows = c.mask == 2 ? c.rows : 1;
  std::vector<uint16_t> q(nq), k(nkv), v(nkv), m(c.mask ? mask_rows * c.sk : 0), out(nq), want(nq);
  for (auto& x : q) x = to_bits(u(rng), c.dt);
  for (auto& x : k) x = to_bits(u(rng), c.dt);
  for (auto& x : v) x = to_bits(u(rng), c.dt);
  for (int64_t j = 0; j < (int64_t)m.size(); ++j) {
    const bool dead = c.mask == 2 && j / c.sk == 1;  // a row whose keys are all -inf: NaN
    m[j] = to_bits(dead || j % 3 == 0 ? -INFINITY : 0.0f, c.dt);
  }
  uint16_t *dq, *dk, *dv, *dm = nullptr, *dout;
  cudaMalloc(&dq, nq * 2), cudaMalloc(&dk, nkv * 2), cudaMalloc(&dv, nkv * 2),
      cudaMalloc(&dout, nq * 2);
  if (c.mask)
    cudaMalloc(&dm, m.size() * 2), cudaMemcpy(dm, m.data(), m.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dq, q.data(), nq * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, k.data(), nkv * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, v.data(), nkv * 2, cudaMemcpyHostToDevice);
  cudaMemset(dout, 0xff, nq * 2);
  auto args = [&](const void* aq, const void* ak, const void* av, const void* am, void* ao) {
    AttentionArgs a;
    a.q = aq, a.k = ak, a.v = av, a.mask = am, a.out = ao, a.dtype = c.dt;
    a.batch = 1, a.heads = c.heads, a.sq = c.rows, a.sk = c.sk, a.d = c.d, a.dv = c.d;
    const int64_t qs[4] = {nq, c.rows * c.d, c.d, 1}, ks[4] = {nkv, c.sk * c.d, c.d, 1},
                  ms[4] = {0, 0, c.mask == 2 ? c.sk : 0, 1};
    for (int i = 0; i < 4; ++i)
      a.q_st[i] = a.out_st[i] = qs[i], a.k_st[i] = a.v_st[i] = ks[i], a.mask_st[i] = ms[i];
    a.rows_t = c.rows, a.scale = 0.125f;
    return a;
  };
  bool taken = false;
  try {
    taken = livefuse::cuda::launch_attention_decode_tc(args(dq, dk, dv, dm, dout), s);
  } catch (const std::exception& e) {
    std::printf("launch threw: %s\n", e.what());
    return false;
  }
  const char* w = wait_for(s);
  std::printf("taken %d, %s", taken, w);
  bool pass = std::strcmp(w, "ok") == 0;
  if (pass && taken) {
    cudaMemcpy(out.data(), dout, nq * 2, cudaMemcpyDeviceToHost);
    livefuse::cpu::run_attention(
        args(q.data(), k.data(), v.data(), c.mask ? m.data() : nullptr, want.data()));
    double worst = 0;
    bool nan_match = true;  // NaN exactly where the reference has it (the dead row)
    for (int64_t i = 0; i < nq; ++i) {
      const float g = from_bits(out[i], c.dt), w = from_bits(want[i], c.dt);
      if (std::isnan(g) || std::isnan(w))
        nan_match = nan_match && std::isnan(g) && std::isnan(w);
      else
        worst = std::fmax(worst, std::fabs(g - w));
    }
    pass = nan_match && worst < (c.dt == DType::f16 ? 5e-3 : 3e-2);
    if (!nan_match) std::printf(", NaN where the reference has none (or the reverse)");
    std::printf(", max |err| %.3g %s", worst, pass ? "PASS" : "FAIL");
  }
  std::printf("\n");
  std::fflush(stdout);
  cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout);
  if (dm) cudaFree(dm);
  return pass;
}

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const Shape shapes[] = {
      {"gpt2 one row, one tile", DType::f16, 12, 1, 32, 64, 0},
      {"gpt2 one row, two tiles", DType::f16, 12, 1, 128, 64, 0},
      {"gpt2 one row, splits", DType::f16, 12, 1, 4096, 64, 0},
      {"llama gqa, one split", DType::bf16, 8, 4, 100, 64, 0},
      {"llama gqa, splits", DType::bf16, 8, 4, 300, 64, 0},
      {"llama gqa, 4096", DType::bf16, 8, 4, 4096, 64, 0},
      {"llama gqa, key mask", DType::bf16, 8, 4, 1000, 64, 1},
      {"llama gqa, a dead row, 1 split", DType::bf16, 8, 4, 100, 64, 2},
      {"llama gqa, a dead row, splits", DType::bf16, 8, 4, 1000, 64, 2},
      {"d 128, a dead row, splits", DType::bf16, 8, 4, 1000, 128, 2},
      {"16 rows", DType::bf16, 8, 16, 512, 64, 0},
      {"d 128, one split", DType::bf16, 8, 4, 64, 128, 0},
      {"d 128, splits", DType::bf16, 8, 4, 4096, 128, 0},
  };
  int failed = 0;
  for (const Shape& c : shapes) failed += !run(c, s);
  std::printf("%d of %zu shapes failed\n", failed, sizeof(shapes) / sizeof(shapes[0]));
  return failed ? 1 : 0;
}
