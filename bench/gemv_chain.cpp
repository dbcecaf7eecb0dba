// livefuse-bench-gemv-chain: a decode step's products as one CUDA graph of back-to-back GEMVs
// (kernels/cuda/gemv.hpp), with and without programmatic dependent launch (kernels/cuda/pdl.cuh),
// with two weight rows a warp never or always (LIVEFUSE_GEMV_PAIR), and with a norm's loads
// after its statistics (set_gemv_norm_early):
// what a chain of short dependent kernels costs per kernel, and what launching each while the
// one before runs (its weights prefetched into L2) saves; then each product of a layer alone,
// chained over the layers. Per layer, as the plans run them:
//   gpt2 f16 (12 layers):  QKV 2304x768 (layer_norm inside), out 768x768 (+ residual),
//                          FFN1 3072x768 (layer_norm inside, gelu_tanh), FFN2 768x3072 (+ residual)
//   llama bf16 (16 layers): QKV 3072x2048, out 2048x2048 (+ residual), gate/up 16384x2048
//                          (gated: silu(gate) * up written), down 2048x8192 (+ residual); with
//                          --norm-chain, QKV and gate/up take the rms_norm inside as the plans
//                          do under LIVEFUSE_GEMV_NORM=2 (by default Llama's norms are kernels)
// Every layer has its own weights (nothing stays in L2 from one layer to the next), and each
// product reads the one before's output. The floor is the weights' bytes at --bw GB/s. The whole
// step also as one graph a layer launched back to back ("/layers"), as a layer's plan replays it.
// Then the L2 experiment, for models whose layer fits the L2 a few times (GPT-2: 14 MB): the
// step cold, hot (every layer reads layer 0's weights), and cold with a graph branch at each
// layer's start asking L2 for weights (bench/l2_prefetch.hpp) -- the layer's own after its first
// product (what a layer's plan knows) or the next layer's (what a plan of the whole step would).
// Usage: livefuse-bench-gemv-chain [--json PATH] [--reps N] [--bw GBPS] [--rows 1..8] [--norm-chain]
//        [--l2-only]   (exit 2 on a CUDA error)
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_cuda.hpp"
#include "bench/bench_graph.hpp"
#include "bench/bench_record.hpp"
#include "bench/l2_prefetch.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/gpu_delay.hpp"
#include "kernels/cuda/pdl.hpp"
#include "livefuse/config.hpp"

namespace {

namespace cu = livefuse::cuda;
using livefuse::DType;

struct Product {
  const char* name;
  int64_t n, k;
  cu::GemvNorm norm;
  cu::GemvAct act;
  bool residual;
  bool gated = false;  // act(first half) * second half written (GemvArgs::gated)
};

struct Model {
  const char* name;
  DType dtype;
  int layers;
  std::vector<Product> layer;
};

std::vector<Model> models(bool norm_chain) {
  using N = cu::GemvNorm;
  using A = cu::GemvAct;
  const N ln = norm_chain ? N::rms : N::none;
  return {
      {"gpt2", DType::f16, 12,
       {{"qkv", 2304, 768, N::layer, A::none, false}, {"out", 768, 768, N::none, A::none, true},
        {"ffn1", 3072, 768, N::layer, A::gelu_tanh, false}, {"ffn2", 768, 3072, N::none, A::none, true}}},
      {"llama-1b", DType::bf16, 16,
       {{"qkv", 3072, 2048, ln, A::none, false}, {"out", 2048, 2048, N::none, A::none, true},
        {"gate_up", 16384, 2048, ln, A::silu, false, true}, {"down", 2048, 8192, N::none, A::none, true}}},
  };
}

void* device_random(size_t elems, float a, uint64_t seed) {
  // Small values as 16-bit floats (f16 and bf16 both read 0x3c00-ish patterns sensibly enough
  // for timing); the sums never overflow: weights are +-a with a ~ 1 / sqrt(k).
  std::mt19937 g(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(-a, a);
  std::vector<uint16_t> h(elems);
  for (auto& v : h) {
    const float f = u(g);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    v = static_cast<uint16_t>(bits >> 16);  // bf16 truncation; as f16 bits: some value, finite
    v &= 0xbfff;                            // never an all-ones exponent (inf / NaN) as f16
  }
  void* p = nullptr;
  BENCH_CUDA(cudaMalloc(&p, elems * 2));
  BENCH_CUDA(cudaMemcpy(p, h.data(), elems * 2, cudaMemcpyHostToDevice));
  return p;
}

struct Chain {
  std::vector<cu::GemvArgs> steps;
  std::vector<int> layer_of;  // steps[i]'s layer
  std::vector<void*> owned;
  double weight_bytes = 0;

  // Every product of every layer, or (only >= 0) that one product of every layer; `rows` rows.
  // `hot`: every layer reads layer 0's weights.
  Chain(const Model& m, int only, int rows, bool hot = false) {
    int64_t widest = 0;
    for (const Product& p : m.layer) widest = std::max({widest, p.n, p.k});
    widest *= rows;
    void* act[2] = {device_random(widest, 1.0f, 1), device_random(widest, 1.0f, 2)};
    void* res = device_random(widest, 1.0f, 3);
    void* gamma = device_random(widest, 1.0f, 4);
    owned = {act[0], act[1], res, gamma};
    int cur = 0;
    for (int l = 0; l < m.layers; ++l) {
      for (size_t pi = 0; pi < m.layer.size(); ++pi) {
        if (only >= 0 && static_cast<int>(pi) != only) continue;
        const Product& p = m.layer[pi];
        cu::GemvArgs g;
        g.dtype = m.dtype;
        g.rows = rows;
        g.n = p.n;
        g.k = p.k;
        g.x = act[cur];
        g.ldx = p.k;
        if (hot && l > 0) {
          g.w = steps[steps.size() - (only < 0 ? m.layer.size() : 1)].w;
        } else {
          g.w = device_random(static_cast<size_t>(p.n * p.k), 0.03f, 100 + steps.size());
          owned.push_back(const_cast<void*>(g.w));
        }
        g.ldw = p.k;
        g.out = act[1 - cur];
        g.ldo = p.gated ? p.n / 2 : p.n;
        g.gated = p.gated;
        g.act = p.act;
        g.norm = p.norm;
        if (p.norm != cu::GemvNorm::none) {
          g.norm_w = gamma;
          g.eps = 1e-5f;
        }
        if (p.residual) g.residual = res;
        if (!cu::gemv_supported(g)) {
          std::fprintf(stderr, "gemv does not take %s %lldx%lld\n", m.name, static_cast<long long>(p.n),
                       static_cast<long long>(p.k));
          std::exit(2);
        }
        steps.push_back(g);
        layer_of.push_back(l);
        weight_bytes += static_cast<double>(p.n * p.k * 2);
        cur = 1 - cur;
      }
    }
  }
  ~Chain() {
    for (void* p : owned) cudaFree(p);
  }
};

// The variants compared: no PDL; PDL with the weights prefetched into L2 before the wait; PDL
// alone; then no PDL with one-row products two weight rows a warp never (LIVEFUSE_GEMV_PAIR=0)
// and always (2), where the others take them as by default (1); then no PDL with a norm's
// chunks loaded after its statistics (set_gemv_norm_early(false)), where the others load them
// before. pdl_early / pdl_pf_early: PDL with each GEMV's first weight loads made before its wait
// (an EarlyWeightsScope around the capture), without and with the L2 prefetch; early_nopair /
// early_pairall: pdl_early with two weight rows a warp never / always (pdl_early's default, 1,
// pairs a norm's product only past a wave of blocks: GPT-2's FFN1).
struct Variant {
  const char* name;
  bool pdl, prefetch;
  int pair;
  bool norm_early = true;
  bool early_weights = false;
};
constexpr Variant kVariants[] = {{"off", false, false, 1},
                                 {"pdl", true, true, 1},
                                 {"pdl_nopf", true, false, 1},
                                 {"pdl_early", true, false, 1, true, true},
                                 {"pdl_pf_early", true, true, 1, true, true},
                                 {"no_pair", false, false, 0},
                                 {"pair_all", false, false, 2},
                                 {"norm_late", false, false, 1, false},
                                 {"early_nopair", true, false, 0, true, true},
                                 {"early_pairall", true, false, 2, true, true}};

void set_variant(const Variant& v) {
  livefuse::Config c = livefuse::config();
  c.pdl = v.pdl;
  c.gemv_pair = v.pair;
  livefuse::set_config_for_testing(c);
  cu::set_gemv_prefetch(v.prefetch);
  cu::set_gemv_norm_early(v.norm_early);
}

// Median microseconds of one replay of the chain captured as one graph (its weights are written
// by no kernel: each GEMV may load its first ones before its PDL wait where `early_weights`).
double time_chain(const Chain& c, cudaStream_t s, int reps, bool early_weights = false) {
  const cu::EarlyWeightsScope early(early_weights);
  return lfbench::graph_median_us(s, reps, 1, [&] {
    for (const cu::GemvArgs& a : c.steps) cu::launch_gemv(a, s);
  });
}

// The chain as one graph a layer, launched back to back behind a GPU delay (the host's launches
// all queued before the first graph runs), median microseconds of the step: what it costs when
// each layer is a plan's graph -- every graph's first GEMV waits for the graph before to end,
// where inside one graph it overlaps the GEMV before (PDL).
double time_chain_by_layer(const Chain& c, cudaStream_t s, int reps, bool early_weights) {
  const cu::EarlyWeightsScope early(early_weights);
  std::vector<cudaGraphExec_t> layers;
  for (size_t i = 0, j = 0; i < c.steps.size(); i = j) {
    while (j < c.steps.size() && c.layer_of[j] == c.layer_of[i]) ++j;
    cudaGraph_t g = nullptr;
    cudaGraphExec_t e = nullptr;
    BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (size_t k = i; k < j; ++k) cu::launch_gemv(c.steps[k], s);
    BENCH_CUDA(cudaStreamEndCapture(s, &g));
    BENCH_CUDA(cudaGraphInstantiate(&e, g, 0));
    BENCH_CUDA(cudaGraphDestroy(g));
    layers.push_back(e);
  }
  const double us = lfbench::events_median_us(
      s, reps, 3, 1.0, [&] { for (cudaGraphExec_t e : layers) BENCH_CUDA(cudaGraphLaunch(e, s)); },
      [&] { cu::gpu_delay(s, 20 * 1000 * static_cast<uint32_t>(layers.size())); });
  for (cudaGraphExec_t e : layers) BENCH_CUDA(cudaGraphExecDestroy(e));
  return us;
}

// The L2 experiment's variants (the header): which weights the branch at a layer's start asks
// for, and how -- TMA bulk prefetches of `chunk` bytes a block, line by line from `line_blocks`
// blocks, or read by `load_blocks` blocks.
enum class Ask { none, own_later, next };
struct L2Variant {
  const char* name;
  bool hot;
  Ask ask;
  int64_t chunk;
  int line_blocks;
  int load_blocks = 0;
};
constexpr L2Variant kL2Variants[] = {
    {"cold", false, Ask::none, 0, 0},
    {"hot", true, Ask::none, 0, 0},
    {"own_1m", false, Ask::own_later, int64_t{1} << 20, 0},
    {"own_128k", false, Ask::own_later, int64_t{128} << 10, 0},
    {"own_lines16", false, Ask::own_later, 0, 16},
    {"own_lines64", false, Ask::own_later, 0, 64},
    {"next_1m", false, Ask::next, int64_t{1} << 20, 0},
    {"next_128k", false, Ask::next, int64_t{128} << 10, 0},
    {"next_lines16", false, Ask::next, 0, 16},
    {"own_load32", false, Ask::own_later, 0, 0, 32},
    {"next_load32", false, Ask::next, 0, 0, 32},
    {"next_load64", false, Ask::next, 0, 0, 64},
    {"next_load132", false, Ask::next, 0, 0, 132},
};

double time_l2_variant(const Chain& c, const L2Variant& v, cudaStream_t s, cudaStream_t side,
                       cudaEvent_t fork, cudaEvent_t join, int reps) {
  const auto bytes = [](const cu::GemvArgs& g) { return g.n * g.k * 2; };
  return lfbench::graph_median_us(s, reps, 1, [&] {
    for (size_t i = 0; i < c.steps.size(); ++i) {
      const int l = c.layer_of[i];
      const bool first = i == 0 || c.layer_of[i - 1] != l;
      if (first && v.ask != Ask::none) {
        std::vector<lfbench::L2Range> r;
        for (size_t j = i; j < c.steps.size(); ++j) {
          const int lj = c.layer_of[j];
          const bool take = v.ask == Ask::own_later ? lj == l && j > i : lj == l + 1;
          if (take) r.push_back({c.steps[j].w, bytes(c.steps[j])});
        }
        BENCH_CUDA(cudaEventRecord(fork, s));
        BENCH_CUDA(cudaStreamWaitEvent(side, fork));
        if (v.chunk) lfbench::prefetch_to_l2(r, side, v.chunk);
        else if (v.line_blocks) lfbench::prefetch_lines_to_l2(r, side, v.line_blocks);
        else lfbench::load_to_l2(r, side, v.load_blocks);
        BENCH_CUDA(cudaEventRecord(join, side));
      }
      cu::launch_gemv(c.steps[i], s);
      const bool last = i + 1 == c.steps.size() || c.layer_of[i + 1] != l;
      if (last && v.ask != Ask::none) BENCH_CUDA(cudaStreamWaitEvent(s, join));
    }
  });
}

void l2_experiment(const Model& m, int rows, int reps, double bw, cudaStream_t s,
                   std::vector<lfbench::Record>& recs) {
  cudaStream_t side;
  cudaEvent_t fork, join;
  BENCH_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  BENCH_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  BENCH_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  set_variant(kVariants[0]);
  lfbench::prepare_load_to_l2();
  const Chain cold(m, -1, rows), hot(m, -1, rows, true);
  const double floor_us = cold.weight_bytes / (bw * 1e3);
  std::printf("\nL2 experiment, %s (%d rows): the step, us\n", m.name, rows);
  for (int round = 0; round < 2; ++round)
    for (const L2Variant& v : kL2Variants) {
      const double us = time_l2_variant(v.hot ? hot : cold, v, s, side, fork, join, reps);
      std::printf("%-16s %-14s %8.1f %9.2f us a layer\n", m.name, v.name, us, us / m.layers);
      recs.push_back({"gemv_chain/l2", v.name, m.name, us,
                      {{"us_per_layer", us / m.layers}, {"floor_us", floor_us}, {"round", round},
                       {"rows", rows}}});
    }
  BENCH_CUDA(cudaEventDestroy(fork));
  BENCH_CUDA(cudaEventDestroy(join));
  BENCH_CUDA(cudaStreamDestroy(side));
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a failed launch's abort keeps the lines before it
  std::string json;
  int reps = 50, rows = 1;
  bool norm_chain = false, l2_only = false;
  double bw = 4140;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json = argv[++i];
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--bw" && i + 1 < argc) bw = std::atof(argv[++i]);
    else if (a == "--rows" && i + 1 < argc) rows = std::atoi(argv[++i]);
    else if (a == "--norm-chain") norm_chain = true;
    else if (a == "--l2-only") l2_only = true;
  }
  if (rows < 1 || rows > cu::kGemvMaxRows) {
    std::fprintf(stderr, "--rows must be 1..%d\n", cu::kGemvMaxRows);
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("livefuse-bench-gemv-chain: no CUDA device; skipped\n");
    return 0;
  }
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<lfbench::Record> recs;
  std::printf("%-16s %-10s %7s %8s %9s %9s %7s\n", "chain", "variant", "kernels", "us", "us/kernel", "floor us",
              "of bw");
  for (const Model& m : models(norm_chain)) {
    if (l2_only) break;
    // The whole step, then each product alone (16 or 12 of it, one a layer).
    for (int only = -1; only < static_cast<int>(m.layer.size()); ++only) {
      const Chain c(m, only, rows);
      const std::string name = std::string(m.name) + (only < 0 ? "" : std::string(":") + m.layer[only].name);
      const double floor_us = c.weight_bytes / (bw * 1e3);
      // Alternating, twice each: the machine's drift shows as a spread, not as a side's gain.
      for (int round = 0; round < 2; ++round) {
        for (const Variant& v : kVariants) {
          set_variant(v);
          const double us = time_chain(c, s, reps, v.early_weights);
          const double n = static_cast<double>(c.steps.size());
          std::printf("%-16s %-10s %7zu %8.1f %9.2f %9.1f %6.0f%%\n", name.c_str(), v.name, c.steps.size(), us,
                      us / n, floor_us, 100.0 * floor_us / us);
          recs.push_back({"gemv_chain", v.name, name, us,
                          {{"kernels", n}, {"us_per_kernel", us / n}, {"floor_us", floor_us}, {"round", round},
                           {"rows", rows}}});
        }
        // The whole step once more as a graph a layer, without PDL and with the early weights.
        for (const Variant& v : {kVariants[0], kVariants[3]}) {
          if (only >= 0) break;
          set_variant(v);
          const double us = time_chain_by_layer(c, s, reps, v.early_weights);
          const std::string vname = std::string(v.name) + "/layers";
          const double n = static_cast<double>(c.steps.size());
          std::printf("%-16s %-10s %7zu %8.1f %9.2f %9.1f %6.0f%%\n", name.c_str(), vname.c_str(), c.steps.size(),
                      us, us / n, floor_us, 100.0 * floor_us / us);
          recs.push_back({"gemv_chain", vname, name, us,
                          {{"kernels", n}, {"us_per_kernel", us / n}, {"floor_us", floor_us}, {"round", round},
                           {"rows", rows}, {"graphs", static_cast<double>(m.layers)}}});
        }
      }
    }
  }
  for (const Model& m : models(norm_chain)) {
    double layer_bytes = 0;
    for (const Product& p : m.layer) layer_bytes += static_cast<double>(p.n * p.k * 2);
    if (layer_bytes <= 24e6) l2_experiment(m, rows, reps, bw, s, recs);
  }
  if (!json.empty()) lfbench::write_json(json, recs);
  cudaStreamDestroy(s);
  return 0;
}
