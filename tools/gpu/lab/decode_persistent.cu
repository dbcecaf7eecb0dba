// Persistent decode-step lab (not part of the meson build; run on the GPU machine, no livefuse
// needed): does one resident kernel with a grid barrier between products beat a graph of one
// launch a product, for a decode step's chain of GEMVs?
//   nvcc -O3 -arch=sm_90 -std=c++17 tools/gpu/lab/decode_persistent.cu -o decode_persistent
//   ./decode_persistent [reps] [--json PATH]        (or: bash tools/gpu/lab/decode_persistent.sh)
//
// The question it answers (issue 20's GPT-2 target, 0.20 ms a token): a graph of GPT-2's 48
// decode GEMVs takes ~187-204 us on the H200 where their bytes take 41 (bench/RESULTS.md,
// livefuse-bench-gemv-chain): each short kernel pays its launch, its first DRAM round trip and
// its drain. A persistent kernel pays those once; between products it pays a grid barrier, and
// before that barrier each warp already loads its first weight tile of the next product (weights
// are never written, so reading them early is safe) -- the next product's DRAM round trip
// overlaps the barrier.
//
// Chains (bf16 weights and activations, f32 accumulation; every layer its own weights, so nothing
// stays in L2 between layers; each product reads the one before's output):
//   gpt2  12 layers: QKV 2304x768, out 768x768, FFN1 3072x768, FFN2 768x3072   (48 products)
//   llama 16 layers: QKV 3072x2048, out 2048x2048, gate/up 16384x2048, down 2048x8192 (64)
// (No norms, residuals or activations: the products alone, as livefuse-bench-gemv-chain without
// its epilogues; the attention between QKV and out is left out of both forms alike.)
//
// Forms, each captured as one CUDA graph and timed by lab_time_graph_us:
//   launches     one kernel a product, a warp a weight row (gemv.cu's rounds form, 4 loads a lane
//                in flight, the next tile's loads issued before this one's math)
//   persistent   one kernel for the chain: the SMs' resident warps walk each product's rows as
//                one stream of tiles; a grid barrier between products; the next product's first
//                tile loaded before the barrier
//   persistent, no prefetch   the same, the next tile loaded only after the barrier
//   barriers     the persistent kernel with no rows: the chain's barriers alone
// Checks: the persistent forms' final output equals the launches form's bit for bit (the same
// row dot in the same order); a barrier that waits over ~2 s gives up and the run says so
// (instead of hanging the machine).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "lab_grid.cuh"
#include "lab_timing.cuh"
#define CK LAB_CK

using bf = __nv_bfloat16;

namespace {

constexpr int kU = 4;           // 16-byte chunks a lane loads per tile
constexpr int kTile = 32 * kU;  // chunks a warp loads per tile (2 KiB)
constexpr int kMaxPhases = 64;

struct Phase {
  const bf* w;  // n x k, rows contiguous
  const bf* x;  // k
  bf* y;        // n
  int n, k;
};
struct Chain {
  Phase p[kMaxPhases];
  int phases;
};

__device__ __forceinline__ float dot8(const uint4& w, const uint4& x, float acc) {
  const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 fa = __bfloat1622float2(a[j]), fb = __bfloat1622float2(b[j]);
    acc = fmaf(fa.x, fb.x, acc);
    acc = fmaf(fa.y, fb.y, acc);
  }
  return acc;
}

// A warp's walk over one product: its rows r = first, first + stride, ...; each row as tiles of
// kTile chunks. `t` counts the walk's tiles; tile_of(t) names row and tile.
struct Walk {
  int first, stride, n, tiles_a_row;
  __device__ int tiles() const {
    return first < n ? ((n - 1 - first) / stride + 1) * tiles_a_row : 0;
  }
  __device__ int row(int t) const { return first + (t / tiles_a_row) * stride; }
  __device__ int tile(int t) const { return t % tiles_a_row; }
};
__device__ __forceinline__ Walk walk_of(const Phase& p, int warp, int warps) {
  const int chunks = p.k / 8;
  return Walk{warp, warps, p.n, (chunks + kTile - 1) / kTile};
}
__device__ __forceinline__ void load_tile(const Phase& p, const Walk& wk, int t, int lane,
                                          uint4 (&w)[kU]) {
  const int chunks = p.k / 8;
  const uint4* row = reinterpret_cast<const uint4*>(p.w) + int64_t{wk.row(t)} * chunks;
  const int c0 = wk.tile(t) * kTile + lane;
#pragma unroll
  for (int u = 0; u < kU; ++u)
    if (c0 + u * 32 < chunks) w[u] = load_weight(row + c0 + u * 32);
}
// Adds the tile's products to acc; at a row's last tile writes the row. x is read through L2
// (ld.cg): another block wrote it before the barrier, and L1 is not coherent.
__device__ __forceinline__ void use_tile(const Phase& p, const Walk& wk, int t, int lane,
                                         const uint4 (&w)[kU], float& acc) {
  const int chunks = p.k / 8;
  const int c0 = wk.tile(t) * kTile + lane;
  const uint4* x = reinterpret_cast<const uint4*>(p.x);
#pragma unroll
  for (int u = 0; u < kU; ++u)
    if (c0 + u * 32 < chunks) acc = dot8(w[u], __ldcg(x + c0 + u * 32), acc);
  if (wk.tile(t) == wk.tiles_a_row - 1) {
    const float s = warp_sum(acc);
    if (lane == 0) p.y[wk.row(t)] = __float2bfloat16(s);
    acc = 0.f;
  }
}

// ---- launches: one product, a warp a row ----
__global__ void __launch_bounds__(128) gemv_launch(Phase p) {
  const int lane = threadIdx.x % 32;
  const int warp = blockIdx.x * 4 + threadIdx.x / 32;
  const Walk wk = walk_of(p, warp, gridDim.x * 4);
  const int tiles = wk.tiles();
  uint4 cur[kU], next[kU];
  float acc = 0.f;
  if (tiles > 0) load_tile(p, wk, 0, lane, cur);
  for (int t = 0; t < tiles; ++t) {
    if (t + 1 < tiles) load_tile(p, wk, t + 1, lane, next);
    use_tile(p, wk, t, lane, cur, acc);
#pragma unroll
    for (int u = 0; u < kU; ++u) cur[u] = next[u];
  }
}

// ---- persistent: the chain in one kernel ----
template <bool kPrefetch>
__global__ void __launch_bounds__(256)
    gemv_persistent(const __grid_constant__ Chain c, unsigned* bar, int rows) {
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * (blockDim.x / 32);
  const int warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  uint4 cur[kU], next[kU];
  float acc = 0.f;
  bool have = false;  // cur holds this product's first tile (loaded before the barrier)
  for (int i = 0; i < c.phases; ++i) {
    Phase p = c.p[i];
    if (!rows) p.n = 0;  // barriers only
    const Walk wk = walk_of(p, warp, warps);
    const int tiles = wk.tiles();
    if (tiles > 0 && !have) load_tile(p, wk, 0, lane, cur);
    for (int t = 0; t < tiles; ++t) {
      if (t + 1 < tiles) load_tile(p, wk, t + 1, lane, next);
      use_tile(p, wk, t, lane, cur, acc);
#pragma unroll
      for (int u = 0; u < kU; ++u) cur[u] = next[u];
    }
    have = false;
    if (i + 1 == c.phases) break;
    if (kPrefetch) {
      Phase q = c.p[i + 1];
      if (!rows) q.n = 0;
      const Walk wq = walk_of(q, warp, warps);
      if (wq.tiles() > 0) {
        load_tile(q, wq, 0, lane, cur);
        have = true;
      }
    }
    grid_barrier(bar);
  }
}

// ---- persistent, deep: more loads in flight, the barrier of flags ----
// Each warp issues a group of kG tiles (its next rows' tiles) and, while summing them, the group
// after: up to 2 * kG tiles in flight a warp, where the forms above keep two (a latency chain of
// one DRAM round trip a tile). Before a barrier the next product's first group is issued.
constexpr int kG = 4;
__device__ __forceinline__ void load_group(const Phase& p, const Walk& wk, int t0, int tiles,
                                           int lane, uint4 (&g)[kG][kU]) {
#pragma unroll
  for (int j = 0; j < kG; ++j)
    if (t0 + j < tiles) load_tile(p, wk, t0 + j, lane, g[j]);
}
__global__ void __launch_bounds__(256)
    gemv_persistent_deep(const __grid_constant__ Chain c, unsigned* words, int rows) {
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * (blockDim.x / 32);
  const int warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  unsigned gen = flag_barrier_start(words);
  uint4 cur[kG][kU], nxt[kG][kU];
  float acc = 0.f;
  bool have = false;
  for (int i = 0; i < c.phases; ++i) {
    Phase p = c.p[i];
    if (!rows) p.n = 0;
    const Walk wk = walk_of(p, warp, warps);
    const int tiles = wk.tiles();
    if (tiles > 0 && !have) load_group(p, wk, 0, tiles, lane, cur);
    for (int g0 = 0; g0 < tiles; g0 += kG) {
      if (g0 + kG < tiles) load_group(p, wk, g0 + kG, tiles, lane, nxt);
#pragma unroll
      for (int j = 0; j < kG; ++j)
        if (g0 + j < tiles) use_tile(p, wk, g0 + j, lane, cur[j], acc);
#pragma unroll
      for (int j = 0; j < kG; ++j)
#pragma unroll
        for (int u = 0; u < kU; ++u) cur[j][u] = nxt[j][u];
    }
    have = false;
    if (i + 1 == c.phases) break;
    Phase q = c.p[i + 1];
    if (!rows) q.n = 0;
    const Walk wq = walk_of(q, warp, warps);
    if (wq.tiles() > 0) {
      load_group(q, wq, 0, wq.tiles(), lane, cur);
      have = true;
    }
    flag_barrier(words, gen);
  }
}

// ---- host ----
struct Product {
  const char* name;
  int n, k;
};
struct Model {
  const char* name;
  int layers;
  std::vector<Product> layer;
};

// Uniform in [-scale, scale) from a hash of (seed, i): ~2 GB of Llama weights in a second or two.
void fill(std::vector<bf>& h, float scale, uint32_t seed) {
  uint64_t s = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (bf& v : h) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;  // xorshift64
    const float u = static_cast<float>(s >> 40) * (1.f / 16777216.f);
    v = __float2bfloat16((2.f * u - 1.f) * scale);
  }
}

struct Result {
  std::string model;
  int products = 0, grid = 0, per_sm = 0;
  double mb = 0, launches = 0, persistent = 0, no_prefetch = 0, barriers = 0;
  double deep = 0, flag_barriers = 0;  // gemv_persistent_deep, and its barriers alone
  int deep_grid = 0;
  bool same_deep = false;
  bool same = false, same_np = false, gave_up = false;
};

// One row of results per blocks-an-SM setting of the persistent forms (the launches form is the
// same in each: timed again beside them).
std::vector<Result> run_model(const Model& m, int reps, int sms, cudaStream_t st) {
  std::vector<Result> out;
  Result r;
  r.model = m.name;
  Chain chain{};
  std::vector<void*> owned;
  int64_t widest = 0, bytes = 0;
  for (const Product& p : m.layer) widest = std::max<int64_t>(widest, std::max(p.n, p.k));
  // Activations: x0, then one output per product (each product reads the one before's output,
  // its first k elements: every chain's outputs are at least as wide as the next product's k).
  bf* x0;
  CK(cudaMalloc(&x0, widest * 2));
  owned.push_back(x0);
  {
    std::vector<bf> h(widest);
    fill(h, 1.f, 7);
    CK(cudaMemcpy(x0, h.data(), widest * 2, cudaMemcpyHostToDevice));
  }
  const bf* prev = x0;
  int i = 0;
  for (int l = 0; l < m.layers; ++l)
    for (const Product& p : m.layer) {
      bf *w, *y;
      CK(cudaMalloc(&w, int64_t{p.n} * p.k * 2));
      CK(cudaMalloc(&y, widest * 2));
      CK(cudaMemset(y, 0, widest * 2));
      owned.push_back(w);
      owned.push_back(y);
      std::vector<bf> h(int64_t{p.n} * p.k);
      fill(h, 1.7f / std::sqrt(static_cast<float>(p.k)),
           1000u + i);  // keeps the chain's values O(1)
      CK(cudaMemcpy(w, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
      if (i >= kMaxPhases || p.k % 8) {
        std::fprintf(stderr, "chain too long or k not a multiple of 8\n");
        std::exit(2);
      }
      chain.p[i++] = Phase{w, prev, y, p.n, p.k};
      bytes += int64_t{p.n} * p.k * 2;
      prev = y;
    }
  chain.phases = i;
  r.products = i;
  r.mb = bytes / 1e6;
  const bf* last = chain.p[i - 1].y;
  const int last_n = chain.p[i - 1].n;

  unsigned* bar;
  CK(cudaMalloc(&bar, 16));
  CK(cudaMemset(bar, 0, 16));
  owned.push_back(bar);
  int most = 0, most_deep = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&most, gemv_persistent<true>, 256, 0));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&most_deep, gemv_persistent_deep, 256, 0));
  unsigned* words;  // the flag barrier's (lab_grid.cuh)
  CK(cudaMalloc(&words, kFlagWords * sizeof(unsigned)));
  CK(cudaMemset(words, 0, kFlagWords * sizeof(unsigned)));
  owned.push_back(words);
  r.deep_grid = most_deep * sms;

  auto launches = [&] {
    for (int j = 0; j < chain.phases; ++j) {
      const Phase& p = chain.p[j];
      gemv_launch<<<(p.n + 3) / 4, 128, 0, st>>>(p);
    }
    CK(cudaGetLastError());
  };
  auto persistent = [&](bool prefetch, int rows) {
    if (prefetch)
      gemv_persistent<true><<<r.grid, 256, 0, st>>>(chain, bar, rows);
    else
      gemv_persistent<false><<<r.grid, 256, 0, st>>>(chain, bar, rows);
    CK(cudaGetLastError());
  };
  auto deep = [&](int rows) {
    gemv_persistent_deep<<<r.deep_grid, 256, 0, st>>>(chain, words, rows);
    CK(cudaGetLastError());
  };
  auto output = [&] {
    std::vector<bf> h(last_n);
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(h.data(), last, last_n * 2, cudaMemcpyDeviceToHost));
    return h;
  };
  auto same_bits = [](const std::vector<bf>& a, const std::vector<bf>& b) {
    return std::memcmp(a.data(), b.data(), a.size() * sizeof(bf)) == 0;
  };
  // Correctness first, each form once outside a graph.
  launches();
  const std::vector<bf> want = output();
  int finite = 0;
  for (const bf& v : want) finite += std::isfinite(__bfloat162float(v)) ? 1 : 0;
  if (finite != last_n) std::printf("%s: the chain's output has non-finite values\n", m.name);
  std::vector<int> settings = {1, 2, most};
  if (most <= 2) settings.resize(static_cast<size_t>(most));
  for (int per_sm : settings) {
    r.per_sm = per_sm;
    r.grid = per_sm * sms;
    CK(cudaMemset(const_cast<bf*>(last), 0, last_n * 2));
    persistent(true, 1);
    r.same = same_bits(output(), want);
    CK(cudaMemset(const_cast<bf*>(last), 0, last_n * 2));
    persistent(false, 1);
    r.same_np = same_bits(output(), want);
    CK(cudaMemset(const_cast<bf*>(last), 0, last_n * 2));
    deep(1);
    r.same_deep = same_bits(output(), want);
    // Timings, alternating the forms twice; the second round's medians are reported.
    for (int round = 0; round < 2; ++round) {
      r.launches = lab_time_graph_us(st, reps, launches);
      r.persistent = lab_time_graph_us(st, reps, [&] { persistent(true, 1); });
      r.no_prefetch = lab_time_graph_us(st, reps, [&] { persistent(false, 1); });
      r.barriers = lab_time_graph_us(st, reps, [&] { persistent(true, 0); });
      r.deep = lab_time_graph_us(st, reps, [&] { deep(1); });
      r.flag_barriers = lab_time_graph_us(st, reps, [&] { deep(0); });
    }
    unsigned flags[3], wflags[2];
    CK(cudaMemcpy(flags, bar, sizeof flags, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(wflags, words, sizeof wflags, cudaMemcpyDeviceToHost));
    r.gave_up = flags[2] != 0 || wflags[1] != 0;
    out.push_back(r);
    if (r.gave_up) break;  // the barrier's state is no longer clean
  }
  for (void* p : owned) CK(cudaFree(p));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 50;
  const char* json = nullptr;
  lab_args(argc, argv, &reps, &json);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs, L2 %d MB; reps %d\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20, reps);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const std::vector<Model> models = {
      {"gpt2",
       12,
       {{"qkv", 2304, 768}, {"out", 768, 768}, {"ffn1", 3072, 768}, {"ffn2", 768, 3072}}},
      {"llama",
       16,
       {{"qkv", 3072, 2048}, {"out", 2048, 2048}, {"gate_up", 16384, 2048}, {"down", 2048, 8192}}},
  };
  constexpr double kGBs = 4140.0;  // the H200's measured copy bandwidth (device README)
  std::vector<Result> rs;
  std::printf("%-6s %8s %9s %11s %11s %12s %10s %12s %9s\n", "model", "products", "floor us",
              "launches", "persistent", "no prefetch", "barriers", "us a barrier", "same bits");
  for (const Model& m : models)
    for (const Result& r : run_model(m, reps, prop.multiProcessorCount, st)) {
      rs.push_back(r);
      std::printf("%-6s %8d %9.1f %11.1f %11.1f %12.1f %10.1f %12.2f %5s/%s%s\n", r.model.c_str(),
                  r.products, r.mb * 1e6 / (kGBs * 1e3), r.launches, r.persistent, r.no_prefetch,
                  r.barriers, r.barriers / std::max(1, r.products - 1), r.same ? "yes" : "NO",
                  r.same_np ? "yes" : "NO",
                  r.gave_up ? "  (a barrier gave up: not every block resident)" : "");
      std::printf(
          "       grid %d blocks of 8 warps (%d an SM); %.1f MB of weights; deep (%d blocks): "
          "%.1f us, its flag barriers alone %.1f (%.2f each), same bits %s\n",
          r.grid, r.per_sm, r.mb, r.deep_grid, r.deep, r.flag_barriers,
          r.flag_barriers / std::max(1, r.products - 1), r.same_deep ? "yes" : "NO");
    }
  if (json) {
    FILE* f = std::fopen(json, "w");
    if (!f) return 2;
    std::fprintf(f, "{\"device\": \"%s\", \"reps\": %d, \"results\": [", prop.name, reps);
    for (size_t i = 0; i < rs.size(); ++i) {
      const Result& r = rs[i];
      std::fprintf(f,
                   "%s{\"model\": \"%s\", \"products\": %d, \"mb\": %.3f, \"floor_us\": %.2f, "
                   "\"launches_us\": %.2f, "
                   "\"persistent_us\": %.2f, \"no_prefetch_us\": %.2f, \"barriers_us\": %.2f, "
                   "\"grid\": %d, \"per_sm\": %d, "
                   "\"same_bits\": %s, \"same_bits_no_prefetch\": %s, \"gave_up\": %s, "
                   "\"deep_us\": %.2f, \"flag_barriers_us\": %.2f, \"deep_grid\": %d, "
                   "\"same_bits_deep\": %s}",
                   i ? ", " : "", r.model.c_str(), r.products, r.mb, r.mb * 1e6 / (kGBs * 1e3),
                   r.launches, r.persistent, r.no_prefetch, r.barriers, r.grid, r.per_sm,
                   r.same ? "true" : "false", r.same_np ? "true" : "false",
                   r.gave_up ? "true" : "false", r.deep, r.flag_barriers, r.deep_grid,
                   r.same_deep ? "true" : "false");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  bool ok = true;
  for (const Result& r : rs) ok &= r.same && r.same_np && r.same_deep && !r.gave_up;
  return ok ? 0 : 1;
}
