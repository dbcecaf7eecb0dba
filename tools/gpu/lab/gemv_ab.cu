// A/B driver for kernels/cuda/gemv.cu (not part of the meson build; tools/gpu/lab/gemv_ab.sh
// builds it twice on the GPU machine, against the tree's gemv.cu and an earlier one): times a
// decode layer's GEMVs as bench/gemv_chain.cpp does, dumps a layer's outputs for a bitwise
// comparison between the two builds, and (-DGATED, a gemv.cu with GemvArgs::gated) checks the
// gated GEMV against the pair's outputs then eager's silu and mul.
// Usage: gemv_ab TAG [DUMP_PREFIX] [ROWS]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/device/lf_math.cuh"
#include "tools/gpu/lab/lab_timing.cuh"

namespace livefuse::cuda {
bool pdl_enabled() { return false; }
// The facts a gemv.cu may ask of the device (device_info.cpp brings the library's error type).
int current_device() {
  int d = 0;
  cudaGetDevice(&d);
  return d;
}
const DeviceInfo& device_info(int device) {
  static DeviceInfo info = [device] {
    DeviceInfo i;
    cudaDeviceGetAttribute(&i.sm_count, cudaDevAttrMultiProcessorCount, device);
    cudaDeviceGetAttribute(&i.max_threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device);
    cudaDeviceGetAttribute(&i.cc_major, cudaDevAttrComputeCapabilityMajor, device);
    return i;
  }();
  return info;
}
namespace detail {
void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  std::fprintf(stderr, "%s:%d %s: %s\n", file, line, call, cudaGetErrorString(err));
  std::exit(2);
}
}  // namespace detail
}  // namespace livefuse::cuda

namespace cu = livefuse::cuda;
using livefuse::DType;
#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) cu::detail::throw_cuda_error(e_, #x, __FILE__, __LINE__);          \
  } while (0)

void* dev_random(size_t elems, float a, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-a, a);
  std::vector<uint16_t> h(elems);
  for (auto& v : h) {
    float f = u(g);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    v = static_cast<uint16_t>(b >> 16) & 0xbfff;
  }
  void* p;
  CK(cudaMalloc(&p, elems * 2));
  CK(cudaMemcpy(p, h.data(), elems * 2, cudaMemcpyHostToDevice));
  return p;
}

// act(gate) * up as eager's silu then mul kernels give it (bf16 storage), for the check.
__global__ void silu_mul_ref(const uint16_t* g, const uint16_t* u, uint16_t* o, int64_t n) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float s = lf_bf2f(lf_f2bf(lf_silu(lf_bf2f(g[i]))));
  o[i] = lf_f2bf(s * lf_bf2f(u[i]));
}

struct Prod {
  const char* name;
  int64_t n, k;
  cu::GemvNorm norm;
  cu::GemvAct act;
  bool residual, gated;
};

double time_graph(const std::vector<cu::GemvArgs>& steps, cudaStream_t s, int reps) {
  return lab_time_graph_us(s, reps, [&] {
    for (const auto& a : steps) cu::launch_gemv(a, s);
  });
}

int main(int argc, char** argv) {
  const char* tag = argc > 1 ? argv[1] : "build";
  const char* dump = argc > 2 ? argv[2] : nullptr;
  const int rows = argc > 3 ? std::atoi(argv[3]) : 1;
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  using N = cu::GemvNorm;
  using A = cu::GemvAct;
  struct Model {
    const char* name;
    DType dt;
    int layers;
    std::vector<Prod> p;
  };
  std::vector<Model> models = {
      {"gpt2", DType::f16, 12,
       {{"qkv", 2304, 768, N::layer, A::none, false, false}, {"out", 768, 768, N::none, A::none, true, false},
        {"ffn1", 3072, 768, N::layer, A::gelu_tanh, false, false},
        {"ffn2", 768, 3072, N::none, A::none, true, false}}},
      {"llama", DType::bf16, 16,
       {{"qkv", 3072, 2048, N::rms, A::none, false, false}, {"out", 2048, 2048, N::none, A::none, true, false},
        {"gate_up", 16384, 2048, N::rms, A::none, false, false},
#ifdef GATED
        {"gated", 16384, 2048, N::rms, A::silu, false, true},
#endif
        {"down", 2048, 8192, N::none, A::none, true, false}}},
  };
  for (const Model& m : models) {
    void* x = dev_random(16384 * 8, 1.0f, 1);
    void* y = dev_random(16384 * 8, 1.0f, 2);
    void* res = dev_random(16384 * 8, 1.0f, 3);
    void* gamma = dev_random(16384, 1.0f, 4);
    void* beta = dev_random(16384, 1.0f, 5);
    void* parts = dev_random(16384 * 8, 1.0f, 6);
    std::vector<std::vector<cu::GemvArgs>> per(m.p.size());
    std::vector<cu::GemvArgs> layer_chain, gated_chain;
    for (int l = 0; l < m.layers; ++l)
      for (size_t i = 0; i < m.p.size(); ++i) {
        const Prod& p = m.p[i];
        cu::GemvArgs a;
        a.dtype = m.dt;
        a.rows = rows;
        a.n = p.n;
        a.k = p.k;
        a.x = x;
        a.ldx = p.k;
        // Seeded by the product's place without the gated one, so both builds' weights agree.
        size_t place = i;
        for (size_t j = 0; j < i; ++j) place -= m.p[j].gated ? 1 : 0;
        a.w = dev_random(static_cast<size_t>(p.n * p.k), 0.03f, 100 + l * 10 + place);
        a.ldw = p.k;
        a.out = y;
        a.ldo = p.gated ? p.n / 2 : p.n;
        a.act = p.act;
        a.norm = p.norm;
        if (p.norm != N::none) {
          a.norm_w = gamma;
          a.norm_b = p.norm == N::layer ? beta : nullptr;
          a.eps = 1e-5f;
        }
        if (p.residual) a.residual = res;
        if (std::string(p.name) == "gate_up") {  // as the plan runs it: two sibling outputs
          a.parts = 2;
          a.part_out[0] = parts;
          a.part_out[1] = static_cast<char*>(parts) + rows * p.n;  // n / 2 elements x 2 bytes x rows
          a.begin[1] = p.n / 2;
          a.begin[2] = p.n;
        }
#ifdef GATED
        a.gated = p.gated;
#endif
        if (!cu::gemv_supported(a)) {
          std::fprintf(stderr, "not supported: %s %s\n", m.name, p.name);
          return 2;
        }
        per[i].push_back(a);
        if (!p.gated) layer_chain.push_back(a);
        if (std::string(p.name) != "gate_up") gated_chain.push_back(a);
      }
    // A layer's outputs, for the comparison between builds: each product of layer 0 once.
    if (dump) {
      std::string path = std::string(dump) + "_" + m.name + ".bin";
      FILE* f = std::fopen(path.c_str(), "wb");
      for (size_t i = 0; i < m.p.size(); ++i) {
        if (m.p[i].gated) continue;
        const cu::GemvArgs& a = per[i][0];
        CK(cudaMemsetAsync(y, 0, 16384 * 8 * 2, st));
        cu::launch_gemv(a, st);
        CK(cudaStreamSynchronize(st));
        std::vector<uint16_t> h(rows * a.n);
        CK(cudaMemcpy(h.data(), a.parts ? parts : y, h.size() * 2, cudaMemcpyDeviceToHost));
        std::fwrite(h.data(), 2, h.size(), f);
      }
      std::fclose(f);
#ifdef GATED
      if (std::string(m.name) == "llama") {
        // gated against the parts then eager's silu and mul, same weights
        size_t gi = 0, pi = 0;
        for (size_t i = 0; i < m.p.size(); ++i) {
          if (m.p[i].gated) gi = i;
          if (std::string(m.p[i].name) == "gate_up") pi = i;
        }
        cu::GemvArgs pa = per[pi][0], ga = per[gi][0];
        ga.w = pa.w;
        cu::launch_gemv(pa, st);
        void* ref;
        CK(cudaMalloc(&ref, rows * 8192 * 2));
        const int64_t half = 8192;
        for (int r = 0; r < rows; ++r)
          silu_mul_ref<<<32, 256, 0, st>>>(static_cast<uint16_t*>(parts) + r * half,
                                           static_cast<uint16_t*>(parts) + rows * half + r * half,
                                           static_cast<uint16_t*>(ref) + r * half, half);
        CK(cudaMemsetAsync(y, 0, 16384 * 8 * 2, st));
        cu::launch_gemv(ga, st);
        CK(cudaStreamSynchronize(st));
        std::vector<uint16_t> h1(rows * half), h2(rows * half);
        CK(cudaMemcpy(h1.data(), ref, h1.size() * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(h2.data(), y, h2.size() * 2, cudaMemcpyDeviceToHost));
        size_t diff = 0;
        for (size_t i = 0; i < h1.size(); ++i) diff += h1[i] != h2[i];
        std::printf("%s gated vs gate_up parts + silu + mul: %zu of %zu elements differ\n", tag, diff, h1.size());
      }
#endif
    }
    for (int round = 0; round < 2; ++round) {
      for (size_t i = 0; i < m.p.size(); ++i) {
        const double us = time_graph(per[i], st, 30);
        std::printf("%s %-6s %-8s rows %d %8.1f us for %d (%.2f each)\n", tag, m.name, m.p[i].name, rows, us,
                    m.layers, us / m.layers);
      }
      std::printf("%s %-6s %-8s rows %d %8.1f us\n", tag, m.name, "LAYERS", rows, time_graph(layer_chain, st, 30));
#ifdef GATED
      if (std::string(m.name) == "llama")
        std::printf("%s %-6s %-8s rows %d %8.1f us\n", tag, m.name, "LAYERS_G", rows, time_graph(gated_chain, st, 30));
#endif
    }
  }
  return 0;
}
