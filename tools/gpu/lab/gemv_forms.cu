// GEMV forms lab (not part of the meson build; run on the GPU machine, no livefuse needed):
// Llama-1B's decode products at one row, bf16, each as a graph of 16 launches (one a layer,
// weights of their own), in the forms below, then the 64 products of the 16 layers in PDL forms.
//   nvcc -O3 -arch=sm_90 -std=c++17 tools/gpu/lab/gemv_forms.cu -o gemv_forms && ./gemv_forms [reps]
//   rounds   gemv.cu's form (a block of 4 warps, 1-4 warps a row, 4 or 8 loads a lane a round)
//   pdl ...  the same launched with programmatic dependent launch: wait first; the first weight
//            round issued, then the wait; an L2 prefetch of the block's rows, then the wait
//            (gemv.cu's LIVEFUSE_PDL form); the dependents released at the start
//   readsum  a plain grid-stride read of the weight bytes: what any kernel of this size reaches
//   bulk     a per-warp ring of slots filled by cp.async.bulk (TMA, 1D) on mbarriers, x in
//            shared memory, persistent warps each owning whole rows
// Findings (H200, session 25: bench/RESULTS.md): the rounds form is within 0.6-2.5 us of readsum
// at every size; bulk never beat it; an L2 prefetch before the PDL wait lost 11% on the chain.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "lab_timing.cuh"
#define CK LAB_CK

using bf = __nv_bfloat16;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ void widen(const uint4& v, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float2 t = __bfloat1622float2(h[j]);
    f[2 * j] = t.x;
    f[2 * j + 1] = t.y;
  }
}
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// ---- rounds (gemv.cu at one row, no norm, no epilogue) ----
__device__ __forceinline__ void gdc_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void gdc_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}
// kPdl: 0 none; 1 wait first; 2 first weight round issued, then wait; 3 L2 prefetch of the
// block's rows, then wait (gemv.cu's form); 4 as 2 but the dependents launched at the start
template <int kSplit, int kUnroll, int kPdl = 0>
__global__ void __launch_bounds__(128) rounds_kernel(const bf* x, const bf* w, bf* out, int64_t n, int64_t k) {
  constexpr int kWarps = 4, kRowsPerBlock = kWarps / kSplit;
  __shared__ float partial[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, part = warp % kSplit;
  const int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + warp / kSplit;
  const int64_t chunks = k / 8;
  const char* wrow = reinterpret_cast<const char*>(w) + row * k * 2;
  constexpr int64_t kStep = int64_t{32} * kSplit;
  float acc = 0.f;
  uint4 wv[kUnroll];
  int64_t c0 = int64_t{part} * 32 + lane;
  auto load = [&](int64_t c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (c0 + u * kStep < chunks) wv[u] = load_stream(wrow + (c0 + u * kStep) * 16);
  };
  if (kPdl == 4) gdc_launch();
  if (kPdl == 3 && threadIdx.x == 0) {
    const int64_t r0 = int64_t{blockIdx.x} * kRowsPerBlock;
    const int64_t r1 = r0 + kRowsPerBlock < n ? r0 + kRowsPerBlock : n;
    prefetch_l2(reinterpret_cast<const char*>(w) + r0 * k * 2, static_cast<uint32_t>((r1 - r0) * k * 2));
  }
  if (kPdl == 1 || kPdl == 3) { gdc_wait(); gdc_launch(); }
  if (row < n) {
    load(c0);
    if (kPdl == 2) { gdc_wait(); gdc_launch(); }
    if (kPdl == 4) gdc_wait();
    for (; c0 < chunks;) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * kStep;
        if (c >= chunks) break;
        float wf[8], xf[8];
        widen(wv[u], wf);
        widen(__ldg(reinterpret_cast<const uint4*>(x) + c), xf);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc = fmaf(wf[j], xf[j], acc);
      }
      c0 += kStep * kUnroll;
      if (c0 < chunks) load(c0);
    }
  }
  acc = warp_sum(acc);
  if (kSplit > 1) {
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (part != 0) return;
    float t = 0;
#pragma unroll
    for (int p = 0; p < kSplit; ++p) t += partial[warp + p];
    acc = t;
  }
  if (row < n && lane == 0) out[row] = __float2bfloat16(acc);
}
template <int kSplit, int kUnroll, int kPdl>
void launch_rounds(const bf* x, const bf* w, bf* out, int64_t n, int64_t k, cudaStream_t s) {
  cudaLaunchConfig_t c = {};
  c.gridDim = dim3(static_cast<unsigned>((n + 4 / kSplit - 1) / (4 / kSplit)));
  c.blockDim = dim3(128);
  c.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  c.attrs = at;
  c.numAttrs = kPdl ? 1 : 0;
  CK(cudaLaunchKernelEx(&c, rounds_kernel<kSplit, kUnroll, kPdl>, x, w, out, n, k));
}

// ---- readsum: plain read floor ----
__global__ void __launch_bounds__(256) readsum_kernel(const uint4* w, int64_t n16, unsigned* out) {
  unsigned a = 0;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 v0 = load_stream(w + i), v1 = load_stream(w + i + stride), v2 = load_stream(w + i + 2 * stride),
          v3 = load_stream(w + i + 3 * stride);
    a ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w ^ v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
  }
  for (; i < n16; i += stride) {
    uint4 v = load_stream(w + i);
    a ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (a == 0x12345678u) out[0] = a;  // never (keeps the loads)
}

// ---- bulk: per-warp TMA ring ----
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}

// Each warp: rows r = first_row(gw) ... (rows_per_warp of them, contiguous), streamed as slots of
// kSlot bytes through a ring of kS slots; lane 0 keeps kS slots in flight.
template <int kWarps, int kS, int kSlot>
__global__ void __launch_bounds__(kWarps * 32) bulk_kernel(const bf* x, const bf* w, bf* out, int64_t n, int64_t k,
                                                           int64_t rows_per_warp) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t xbytes = k * 2;
  const int64_t xpad = (xbytes + 127) / 128 * 128;
  unsigned char* xs = smem;
  unsigned char* ring = smem + xpad + int64_t{warp} * kS * kSlot;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + xpad + int64_t{kWarps} * kS * kSlot) + warp * kS;
  const int64_t gw = int64_t{blockIdx.x} * kWarps + warp;
  const int64_t r0 = gw * rows_per_warp;
  const int64_t r1 = n < r0 + rows_per_warp ? n : r0 + rows_per_warp;
  const int64_t spr = xbytes / kSlot;  // slots a row (k * 2 a multiple of kSlot)
  const int64_t total = r1 > r0 ? (r1 - r0) * spr : 0;
  const char* wbase = reinterpret_cast<const char*>(w) + r0 * xbytes;  // rows contiguous: ldw == k
  if (lane == 0) {
    for (int s = 0; s < kS; ++s) mbar_init(&bars[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  if (lane == 0)
    for (int64_t q = 0; q < kS && q < total; ++q) {
      mbar_expect_tx(&bars[q], kSlot);
      bulk_g2s(ring + q * kSlot, wbase + q * kSlot, kSlot, &bars[q]);
    }
  // x into shared memory while the first slots are in flight.
  for (int64_t i = threadIdx.x; i < xbytes / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(xs)[i] = reinterpret_cast<const uint4*>(x)[i];
  __syncthreads();
  float acc = 0.f;
  constexpr int kPerLane = kSlot / 512;  // 16-byte chunks a lane a slot
  for (int64_t q = 0; q < total; ++q) {
    const int s = static_cast<int>(q % kS);
    mbar_wait(&bars[s], static_cast<uint32_t>((q / kS) & 1));
    const int64_t col = (q % spr) * kSlot;  // byte offset in the row
    const uint4* slot = reinterpret_cast<const uint4*>(ring + s * kSlot);
    const uint4* xv = reinterpret_cast<const uint4*>(xs + col);
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) {
      float wf[8], xf[8];
      widen(slot[lane + 32 * u], wf);
      widen(xv[lane + 32 * u], xf);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc = fmaf(wf[j], xf[j], acc);
    }
    __syncwarp();
    if (lane == 0 && q + kS < total) {
      mbar_expect_tx(&bars[s], kSlot);
      bulk_g2s(ring + s * kSlot, wbase + (q + kS) * kSlot, kSlot, &bars[s]);
    }
    if (q % spr == spr - 1) {
      const float t = warp_sum(acc);
      if (lane == 0) out[r0 + q / spr] = __float2bfloat16(t);
      acc = 0.f;
    }
  }
}

// ---- host ----
struct Shape {
  const char* name;
  int64_t n, k;
};

std::vector<uint16_t> rand_bf16(size_t count, float a, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-a, a);
  std::vector<uint16_t> h(count);
  for (auto& v : h) {
    float f = u(g);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    v = static_cast<uint16_t>(b >> 16);
  }
  return h;
}
float bf2f(uint16_t v) {
  uint32_t b = uint32_t{v} << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

int g_sms = 132;

struct Variant {
  std::string name;
  // launch one product: weights w, out o
  std::function<void(const bf*, const bf*, bf*, cudaStream_t)> launch;
};

int main(int argc, char** argv) {
  const int layers = 16, reps = argc > 1 ? std::atoi(argv[1]) : 30;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  std::printf("device %s, %d SMs, L2 %d MB\n", prop.name, g_sms, prop.l2CacheSize >> 20);
  const Shape shapes[] = {{"qkv", 3072, 2048}, {"out", 2048, 2048}, {"gate_up", 16384, 2048}, {"down", 2048, 8192}};
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  unsigned* sink;
  CK(cudaMalloc(&sink, 64));
  std::printf("%-8s %-22s %9s %9s %8s %9s\n", "product", "variant", "us/kernel", "GB/s", "of 4140", "max err");
  for (const Shape& sh : shapes) {
    const int64_t n = sh.n, k = sh.k;
    const size_t wbytes = static_cast<size_t>(n * k * 2);
    std::vector<bf*> ws(layers);
    std::vector<uint16_t> hw0;
    for (int l = 0; l < layers; ++l) {
      auto h = rand_bf16(static_cast<size_t>(n * k), 0.03f, 100 + l);
      if (l == 0) hw0 = h;
      CK(cudaMalloc(&ws[l], wbytes));
      CK(cudaMemcpy(ws[l], h.data(), wbytes, cudaMemcpyHostToDevice));
    }
    auto hx = rand_bf16(static_cast<size_t>(k), 1.0f, 7);
    bf *x, *o;
    CK(cudaMalloc(&x, k * 2));
    CK(cudaMalloc(&o, n * 2 * layers));
    CK(cudaMemcpy(x, hx.data(), k * 2, cudaMemcpyHostToDevice));
    std::vector<double> ref(n);
    for (int64_t r = 0; r < n; ++r) {
      double s = 0;
      for (int64_t c = 0; c < k; ++c) s += double(bf2f(hw0[r * k + c])) * bf2f(hx[c]);
      ref[r] = s;
    }
    std::vector<Variant> vs;
    // rounds: the split rule of launch_gemv ("*" marks it), and with LAB_SWEEP=1 every split
    // (warps a row) and unroll (loads in flight a lane)
    {
      const int64_t runs = k / 8 / 32;
      int rule = 1;
      while (rule < 4 && n * rule < 8192 && runs > 4 * rule) rule *= 2;
      const bool sweep = std::getenv("LAB_SWEEP") != nullptr;
      for (int split : {1, 2, 4})
        for (int unroll : {2, 4, 8}) {
          if (!sweep && (split != rule || unroll == 2)) continue;
          vs.push_back({"rounds s" + std::to_string(split) + " u" + std::to_string(unroll) + (split == rule ? "*" : ""),
                        [=](const bf* xx, const bf* w, bf* out, cudaStream_t s) {
                          const unsigned g = static_cast<unsigned>((n + 4 / split - 1) / (4 / split));
                          auto go = [&](auto kern) { kern<<<g, 128, 0, s>>>(xx, w, out, n, k); };
                          if (split == 1) unroll == 2 ? go(rounds_kernel<1, 2>) : unroll == 4 ? go(rounds_kernel<1, 4>) : go(rounds_kernel<1, 8>);
                          else if (split == 2) unroll == 2 ? go(rounds_kernel<2, 2>) : unroll == 4 ? go(rounds_kernel<2, 4>) : go(rounds_kernel<2, 8>);
                          else unroll == 2 ? go(rounds_kernel<4, 2>) : unroll == 4 ? go(rounds_kernel<4, 4>) : go(rounds_kernel<4, 8>);
                        }});
        }
    }
    {
      const int64_t runs = k / 8 / 32;
      int split = 1;
      while (split < 4 && n * split < 8192 && runs > 4 * split) split *= 2;
      const char* names[] = {"", "pdl wait-first", "pdl loads-then-wait", "pdl prefetch-L2", "pdl early+loads"};
      for (int mode = 1; mode <= 4; ++mode) {
        vs.push_back({std::string(names[mode]), [=](const bf* xx, const bf* w, bf* out, cudaStream_t s) {
          auto go = [&](auto sp) {
            constexpr int S = decltype(sp)::value;
            switch (mode) {
              case 1: launch_rounds<S, 4, 1>(xx, w, out, n, k, s); break;
              case 2: launch_rounds<S, 4, 2>(xx, w, out, n, k, s); break;
              case 3: launch_rounds<S, 4, 3>(xx, w, out, n, k, s); break;
              default: launch_rounds<S, 4, 4>(xx, w, out, n, k, s); break;
            }
          };
          if (split == 1) go(std::integral_constant<int, 1>{});
          else if (split == 2) go(std::integral_constant<int, 2>{});
          else go(std::integral_constant<int, 4>{});
        }});
      }
    }
    vs.push_back({"readsum", [=](const bf*, const bf* w, bf*, cudaStream_t s) {
                    readsum_kernel<<<g_sms * 8, 256, 0, s>>>(reinterpret_cast<const uint4*>(w),
                                                             static_cast<int64_t>(wbytes / 16), sink);
                  }});
    // bulk: (warps a block, slots, slot bytes)
    auto add_bulk = [&](auto kern, int warps, int S, int slot, const char* tag) {
      const int64_t xpad = (k * 2 + 127) / 128 * 128;
      const size_t sm = static_cast<size_t>(xpad + int64_t{warps} * S * slot + warps * S * 8);
      CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sm)));
      int per_sm = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, warps * 32, sm));
      if (per_sm < 1 || (k * 2) % slot != 0) return;
      const int64_t max_warps = int64_t{per_sm} * g_sms * warps;
      const int64_t rpw = (n + max_warps - 1) / max_warps;
      const int64_t nw = (n + rpw - 1) / rpw;
      const unsigned grid = static_cast<unsigned>((nw + warps - 1) / warps);
      char name[64];
      std::snprintf(name, sizeof name, "bulk %s w%d S%d %dB %d/SM", tag, warps, S, slot, per_sm);
      vs.push_back({name, [=](const bf* xx, const bf* w, bf* out, cudaStream_t s) {
                      kern<<<grid, warps * 32, sm, s>>>(xx, w, out, n, k, rpw);
                    }});
    };
    add_bulk(bulk_kernel<8, 4, 2048>, 8, 4, 2048, "");
    for (const Variant& v : vs) {
      // correctness on layer 0
      CK(cudaMemset(o, 0, n * 2));
      v.launch(x, ws[0], o, st);
      CK(cudaStreamSynchronize(st));
      CK(cudaGetLastError());
      double err = 0;
      if (v.name != "readsum") {
        std::vector<uint16_t> ho(n);
        CK(cudaMemcpy(ho.data(), o, n * 2, cudaMemcpyDeviceToHost));
        for (int64_t r = 0; r < n; ++r) err = std::max(err, std::fabs(bf2f(ho[r]) - ref[r]) / (std::fabs(ref[r]) + 0.05));
      }
      const double med =
          lab_time_graph_us(st, reps, [&] { for (int l = 0; l < layers; ++l) v.launch(x, ws[l], o + n * l, st); }) / layers;
      const double gbs = wbytes / (med * 1e3);
      std::printf("%-8s %-22s %9.2f %9.0f %7.0f%% %9.2e\n", sh.name, v.name.c_str(), med, gbs, 100.0 * gbs / 4140,
                  err);
    }
    for (bf* p : ws) CK(cudaFree(p));
    CK(cudaFree(x));
    CK(cudaFree(o));
  }
  // The layer chain: qkv, out, gate_up, down x 16 layers, each kernel in the same PDL mode.
  {
    std::vector<std::vector<bf*>> W(4);
    bf *x, *o;
    CK(cudaMalloc(&x, 16384 * 2));
    CK(cudaMalloc(&o, 16384 * 2));
    CK(cudaMemset(x, 0, 16384 * 2));
    double bytes = 0;
    for (int p = 0; p < 4; ++p)
      for (int l = 0; l < layers; ++l) {
        bf* w;
        const size_t b = static_cast<size_t>(shapes[p].n * shapes[p].k * 2);
        CK(cudaMalloc(&w, b));
        CK(cudaMemset(w, 0, b));
        W[p].push_back(w);
        bytes += b;
      }
    for (int round = 0; round < 2; ++round)
      for (int mode = 0; mode <= 4; ++mode) {
        auto one = [&](int p, int l) {
          const int64_t n = shapes[p].n, k = shapes[p].k;
          const int64_t runs = k / 8 / 32;
          int split = 1;
          while (split < 4 && n * split < 8192 && runs > 4 * split) split *= 2;
          auto go = [&](auto sp) {
            constexpr int S = decltype(sp)::value;
            switch (mode) {
              case 0: launch_rounds<S, 4, 0>(x, W[p][l], o, n, k, st); break;
              case 1: launch_rounds<S, 4, 1>(x, W[p][l], o, n, k, st); break;
              case 2: launch_rounds<S, 4, 2>(x, W[p][l], o, n, k, st); break;
              case 3: launch_rounds<S, 4, 3>(x, W[p][l], o, n, k, st); break;
              default: launch_rounds<S, 4, 4>(x, W[p][l], o, n, k, st); break;
            }
          };
          if (split == 1) go(std::integral_constant<int, 1>{});
          else if (split == 2) go(std::integral_constant<int, 2>{});
          else go(std::integral_constant<int, 4>{});
        };
        const double med = lab_time_graph_us(st, reps, [&] {
          for (int l = 0; l < layers; ++l)
            for (int p = 0; p < 4; ++p) one(p, l);
        });
        const char* names[] = {"plain", "pdl wait-first", "pdl loads-then-wait", "pdl prefetch-L2", "pdl early+loads"};
        std::printf("layer chain (64 GEMVs) %-20s %8.1f us  (floor %.1f)\n", names[mode], med,
                    bytes / 4140e3);
      }
  }
  return 0;
}
