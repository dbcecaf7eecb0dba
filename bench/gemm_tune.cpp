// livefuse-bench-gemm-tune: cuBLASLt's heuristic top-1 algorithm against the timed choice
// (kernels/cuda/gemm_lt.cpp, [ Note -- tuned algorithms ]) on the GEMMs of BERT-base (128 and
// 1024 rows) and GPT-2 decode (1 row), f16 or f32 (--dtype), each through the path a plan's GEMM
// step takes (cuda::run_gemm_epilogue: bias, GELU-tanh).
// Per case and variant: one run outside any capture builds the thread's plan (top-1: the
// tuned table emptied first; tuned: under cuda::GemmTuning, which times the candidates), then a
// CUDA graph of --launches back-to-back GEMMs is captured and replayed; the time is per GEMM,
// the median over --reps replays, so launch overhead does not dominate. The two variants'
// outputs are compared (different algorithms round differently: a loose bound, FAIL past it).
// Last columns: the same call on livefuse's tensor-core GEMM (kernels/cuda/gemm_tc.hpp), which
// plans run with LIVEFUSE_GEMM_TC=1 for merged siblings and erf-GELU / SiLU epilogues (switched
// on here); "nan" where it does not take the call.
// Then a BERT layer's four GEMMs over 12 layers with weights of their own, as a forward reads
// them (cold: 170 MB through a 50 MB L2), with and without a graph branch at each layer's start
// that asks L2 for the layer's weights (bench/l2_prefetch.hpp), and over one layer's weights
// every time (hot): us a layer.
// Usage: livefuse-bench-gemm-tune [--json PATH] [--reps N] [--launches N] [--dtype f16|f32]
//   exit status 1 on a FAIL, 2 on a CUDA or livefuse error.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
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
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/device/lf_math.cuh"
#include "livefuse/config.hpp"
#include "livefuse/stream.hpp"
#include "livefuse/tensor.hpp"
#include "runtime/op_call.hpp"

namespace {

using livefuse::Device;
using livefuse::DType;
using livefuse::Shape;
using livefuse::Tensor;
namespace cuda = livefuse::cuda;

struct Case {
  const char* model;
  const char* name;
  int64_t m, k, n;
  bool bias;
  cuda::LtAct act;
  int parts = 1;  // > 1: `parts` sibling linears of width n / parts as one strided-batched GEMM
};

std::vector<Case> cases() {
  std::vector<Case> v;
  for (int64_t m : {128, 1024}) {
    v.push_back({"bert", "qkv", m, 768, 2304, true, cuda::LtAct::none});
    // The plan's merged Q/K/V (planner/plan_siblings.cpp): the same FLOPs and bytes as "qkv",
    // written as three dense outputs.
    v.push_back({"bert", "qkv_batched", m, 768, 2304, true, cuda::LtAct::none, 3});
    v.push_back({"bert", "attn_out", m, 768, 768, true, cuda::LtAct::none});
    v.push_back({"bert", "ffn1_gelu", m, 768, 3072, true, cuda::LtAct::gelu_tanh});
    // FFN2 as f16 plans run it: bias only (cuBLASLt's C would add the residual before rounding
    // the product, which eager does not: the add stays in the row kernel after it).
    v.push_back({"bert", "ffn2", m, 3072, 768, true, cuda::LtAct::none});
  }
  v.push_back({"gpt2", "qkv", 1, 768, 2304, true, cuda::LtAct::none});
  v.push_back({"gpt2", "attn_out", 1, 768, 768, true, cuda::LtAct::none});
  v.push_back({"gpt2", "mlp_up", 1, 768, 3072, true, cuda::LtAct::gelu_tanh});
  v.push_back({"gpt2", "mlp_down", 1, 3072, 768, true, cuda::LtAct::none});
  v.push_back({"gpt2", "lm_head", 1, 768, 50257, false, cuda::LtAct::none});
  return v;
}

DType g_dtype = DType::f16;  // --dtype

// A dense tensor of --dtype on `d` with values uniform in [-scale, scale].
Tensor random_tensor(const Shape& s, float scale, Device d, std::mt19937& rng, cudaStream_t st) {
  Tensor t = livefuse::empty(s, g_dtype, d);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> f(static_cast<size_t>(s.numel()));
  for (float& x : f) x = u(rng);
  std::vector<uint16_t> h;
  const void* src = f.data();
  if (g_dtype == DType::f16) {
    for (float x : f) h.push_back(lf_f2h(x));
    src = h.data();
  }
  BENCH_CUDA(cudaMemcpyAsync(t.impl()->data(), src, t.nbytes(), cudaMemcpyHostToDevice, st));
  BENCH_CUDA(cudaStreamSynchronize(st));
  return t;
}

std::vector<float> to_host(const Tensor& t, cudaStream_t st) {
  std::vector<float> f(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::f32) {
    BENCH_CUDA(cudaMemcpyAsync(f.data(), t.impl()->data(), t.nbytes(), cudaMemcpyDeviceToHost, st));
    BENCH_CUDA(cudaStreamSynchronize(st));
    return f;
  }
  std::vector<uint16_t> h(f.size());
  BENCH_CUDA(cudaMemcpyAsync(h.data(), t.impl()->data(), h.size() * 2, cudaMemcpyDeviceToHost, st));
  BENCH_CUDA(cudaStreamSynchronize(st));
  for (size_t i = 0; i < h.size(); ++i) f[i] = lf_h2f(h[i]);
  return f;
}

struct Operands {
  livefuse::OpCall call;
  Tensor bias, out;
  std::vector<Tensor> parts;  // the siblings' outputs: row ranges of `out` viewed [m, n / parts]
};

// The tensor-core GEMM on the case: false when it does not take it (its shape rules).
bool run_tc(const Case& c, const Operands& o, cudaStream_t st) {
  const cuda::TcAct act = c.act == cuda::LtAct::gelu_tanh ? cuda::TcAct::gelu_tanh
                          : c.act == cuda::LtAct::relu    ? cuda::TcAct::relu
                                                          : cuda::TcAct::none;
  if (c.parts > 1) return cuda::run_linear_tc(o.call, act, o.parts, st);
  return cuda::run_linear_tc(o.call, act, std::span<const Tensor>(&o.out, 1), st);
}

void run_once(const Case& c, const Operands& o, cudaStream_t st) {
  if (c.parts > 1) {
    if (!cuda::run_sibling_linears(o.call, o.parts, st))
      throw livefuse::Error("[bench] the strided-batched sibling GEMM refused the case");
    return;
  }
  if (!cuda::run_gemm_epilogue(o.call, static_cast<uint8_t>(c.act), c.bias ? &o.bias : nullptr,
                               nullptr, o.out, st))
    throw livefuse::Error("[bench] the cuBLASLt epilogue refused the case");
}

// Per-GEMM microseconds: median over `reps` replays of a graph of `launches` GEMMs (the
// tensor-core GEMM's with `tc`).
double time_graph(const Case& c, const Operands& o, cudaStream_t st, int launches, int reps, bool tc = false) {
  return lfbench::graph_median_us(st, reps, launches, [&] {
    for (int i = 0; i < launches; ++i) tc ? (void)run_tc(c, o, st) : run_once(c, o, st);
  });
}

// One BERT layer's GEMMs, in a plan's order: Q/K/V, output, FFN1 + GELU, FFN2.
struct LayerGemms {
  Case c[4];
  Operands o[4];
};

// us a layer over `layers` layers of `m` rows (see the header): weights of each layer's own or
// layer 0's every time (`hot`), with or without the prefetch branch.
// prefetch: 0 none, else the chunk in bytes; skip_first: not the layer's first GEMM's weights
// (it starts with the branch).
double time_layers(std::vector<LayerGemms>& ls, bool hot, int64_t prefetch, bool skip_first,
                   cudaStream_t st, cudaStream_t side, int reps) {
  cudaEvent_t fork, join;
  BENCH_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  BENCH_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  const double us = lfbench::graph_median_us(st, reps, static_cast<double>(ls.size()), [&] {
    for (size_t l = 0; l < ls.size(); ++l) {
      LayerGemms& L = ls[hot ? 0 : l];
      if (prefetch) {
        std::vector<lfbench::L2Range> r;
        for (int i = skip_first ? 1 : 0; i < 4; ++i) {
          const Tensor& w = L.o[i].call.inputs[1];
          r.push_back({w.impl()->data(), static_cast<int64_t>(w.nbytes())});
        }
        BENCH_CUDA(cudaEventRecord(fork, st));
        BENCH_CUDA(cudaStreamWaitEvent(side, fork));
        lfbench::prefetch_to_l2(r, side, prefetch);
        BENCH_CUDA(cudaEventRecord(join, side));
      }
      for (int i = 0; i < 4; ++i) run_once(L.c[i], L.o[i], st);
      if (prefetch) BENCH_CUDA(cudaStreamWaitEvent(st, join));
    }
  });
  BENCH_CUDA(cudaEventDestroy(fork));
  BENCH_CUDA(cudaEventDestroy(join));
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  int reps = 50, launches = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json = argv[++i];
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::max(5, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--launches") && i + 1 < argc) {
      launches = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--dtype") && i + 1 < argc &&
               (!std::strcmp(argv[i + 1], "f16") || !std::strcmp(argv[i + 1], "f32"))) {
      g_dtype = !std::strcmp(argv[++i], "f32") ? DType::f32 : DType::f16;
    } else {
      std::fprintf(stderr, "usage: %s [--json PATH] [--reps N] [--launches N] [--dtype f16|f32]\n", argv[0]);
      return 2;
    }
  }
  try {
    if (!livefuse::cuda_available()) {
      std::fprintf(stderr, "livefuse-bench-gemm-tune: no GPU\n");
      return 2;
    }
    const Device d = Device::cuda(0);
    BENCH_CUDA(cudaSetDevice(0));
    livefuse::Config cfg = livefuse::config();
    cfg.gemm_tc = true;  // the tensor-core GEMM's columns (off by default in plans)
    livefuse::set_config_for_testing(cfg);
    const livefuse::Stream stream = livefuse::Stream::create(d);
    const livefuse::StreamGuard on(stream);
    const auto st = static_cast<cudaStream_t>(stream.handle());
    cudaDeviceProp prop{};
    BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
    const char* dt = g_dtype == DType::f32 ? "f32" : "f16";
    std::printf("livefuse-bench-gemm-tune on %s: %s, per GEMM in a graph of %d, median of %d\n",
                prop.name, dt, launches, reps);
    std::printf("%-5s %-14s %-18s %9s %9s %7s %6s %5s %6s %8s %8s %8s\n", "model", "gemm",
                "shape (MxK->N)", "top1_us", "tuned_us", "ratio", "chosen", "timed", "splitk",
                "max_err", "tc_us", "tc_err");
    std::mt19937 rng(1234);
    std::vector<lfbench::Record> recs;
    bool fail = false;
    double sum_top1 = 0, sum_tuned = 0;
    for (const Case& c : cases()) {
      Operands o;
      o.call.op = livefuse::OpId::linear;
      o.call.attrs.push_int(c.bias ? 1 : 0);
      o.call.attrs.push_int(0);  // no tf32
      const float ws = 1.0f / std::sqrt(static_cast<float>(c.k));
      o.call.inputs.push_back(random_tensor(Shape{c.m, c.k}, 1.0f, d, rng, st));
      o.call.inputs.push_back(random_tensor(Shape{c.n, c.k}, ws, d, rng, st));
      if (c.bias) {
        o.bias = random_tensor(Shape{c.n}, 0.1f, d, rng, st);
        o.call.inputs.push_back(o.bias);
      }
      o.out = livefuse::empty(Shape{c.m, c.n}, g_dtype, d);
      if (c.parts > 1) {
        // Back to back as the plan lays them out: [parts * m, n / parts], part i its rows i m ...
        const Tensor run = o.out.reshape(Shape{c.parts * c.m, c.n / c.parts});
        for (int i = 0; i < c.parts; ++i) o.parts.push_back(run.slice(0, i * c.m, (i + 1) * c.m));
      }

      // Top-1: nothing tuned, the heuristic's choice in this thread's plan.
      cuda::reset_gemm_tuning();
      run_once(c, o, st);
      BENCH_CUDA(cudaStreamSynchronize(st));
      const std::vector<float> ref = to_host(o.out, st);
      const double top1 = time_graph(c, o, st, launches, reps);

      // Tuned: a fresh plan made under the guard (times the candidates), then the same graph.
      cuda::reset_gemm_tuning();
      {
        const cuda::GemmTuning tuning;
        run_once(c, o, st);
      }
      BENCH_CUDA(cudaStreamSynchronize(st));
      const std::vector<float> got = to_host(o.out, st);
      const double tuned = time_graph(c, o, st, launches, reps);
      const std::vector<cuda::GemmTuneRecord> tr = cuda::gemm_tune_records();
      cuda::GemmTuneRecord r;
      if (!tr.empty()) r = tr.back();

      const auto rel_err = [&](const std::vector<float>& v) {
        double err = 0, peak = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
          err = std::max(err, static_cast<double>(std::fabs(ref[i] - v[i])));
          peak = std::max(peak, static_cast<double>(std::fabs(ref[i])));
        }
        return err / std::max(peak, 1e-6);
      };
      const double rel = rel_err(got);
      // The tensor-core GEMM, where it takes the case (NaN: it does not).
      double tc = std::nan(""), tc_rel = std::nan("");
      if (run_tc(c, o, st)) {
        BENCH_CUDA(cudaStreamSynchronize(st));
        tc_rel = rel_err(to_host(o.out, st));
        tc = time_graph(c, o, st, launches, reps, true);
      }
      const bool ok = std::isfinite(rel) && rel < 2e-2 && !(tc_rel >= 2e-2);
      fail |= !ok;
      sum_top1 += top1, sum_tuned += tuned;
      char shape[64];
      std::snprintf(shape, sizeof shape, "%lldx%lld->%lld", static_cast<long long>(c.m),
                    static_cast<long long>(c.k), static_cast<long long>(c.n));
      std::printf("%-5s %-14s %-18s %9.2f %9.2f %7.2f %6d %5d %6u %8.1e %8.2f %8.1e%s\n", c.model,
                  c.name, shape, top1, tuned, top1 / tuned, r.chosen, r.timed, r.split_k, rel, tc,
                  tc_rel, ok ? "" : "  FAIL");
      const std::string name = std::string("gemm_tune/") + c.model + "/" + c.name;
      std::vector<std::pair<std::string, double>> dims = {
          {"m", static_cast<double>(c.m)}, {"k", static_cast<double>(c.k)},
          {"n", static_cast<double>(c.n)}};
      recs.push_back({name, "top1", shape, top1, dims, {{"dtype", dt}}});
      auto derived = dims;
      derived.push_back({"ratio_vs_top1", top1 / tuned});
      derived.push_back({"split_k", static_cast<double>(r.split_k)});
      derived.push_back({"chosen_index", static_cast<double>(r.chosen)});
      derived.push_back({"candidates_timed", static_cast<double>(r.timed)});
      derived.push_back({"tuning_top1_us", r.top1_us});
      derived.push_back({"tuning_chosen_us", r.chosen_us});
      derived.push_back({"max_rel_err", rel});
      recs.push_back({name, "tuned", shape, tuned, derived, {{"dtype", dt}, {"ok", ok ? "1" : "0"}}});
      if (std::isfinite(tc)) {
        auto tcd = dims;
        tcd.push_back({"ratio_vs_top1", top1 / tc});
        tcd.push_back({"max_rel_err", tc_rel});
        recs.push_back({name, "tensor_core", shape, tc, tcd, {{"dtype", dt}}});
      }
    }
    std::printf("sum of per-GEMM medians: top-1 %.2f us, tuned %.2f us (%.2fx)\n", sum_top1,
                sum_tuned, sum_top1 / sum_tuned);

    // The layer experiment (the header): 12 layers, each GEMM's input and output shared (the
    // activations are hot in a forward too), the weights the layer's own.
    cudaStream_t side;
    BENCH_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    std::printf("\nBERT layer GEMMs (Q/K/V, output, FFN1 + GELU, FFN2), 12 layers, us a layer:\n");
    std::printf("%6s %10s %14s %14s %14s %10s\n", "rows", "cold", "+prefetch 64K", "+prefetch 1M",
                "1M, not QKV", "hot");
    cuda::reset_gemm_tuning();
    for (int64_t m : {128, 1024}) {
      std::vector<Case> lc;
      for (const Case& c : cases())
        if (std::string(c.model) == "bert" && c.m == m && c.parts == 1) lc.push_back(c);
      if (lc.size() != 4) continue;
      Operands shared[4];
      for (int i = 0; i < 4; ++i) {
        shared[i].call.inputs.push_back(random_tensor(Shape{m, lc[i].k}, 1.0f, d, rng, st));
        shared[i].out = livefuse::empty(Shape{m, lc[i].n}, g_dtype, d);
      }
      std::vector<LayerGemms> ls(12);
      for (LayerGemms& L : ls)
        for (int i = 0; i < 4; ++i) {
          L.c[i] = lc[i];
          Operands& o = L.o[i];
          o.call.op = livefuse::OpId::linear;
          o.call.attrs.push_int(1);
          o.call.attrs.push_int(0);
          o.call.inputs.push_back(shared[i].call.inputs[0]);
          const float ws = 1.0f / std::sqrt(static_cast<float>(lc[i].k));
          o.call.inputs.push_back(random_tensor(Shape{lc[i].n, lc[i].k}, ws, d, rng, st));
          o.bias = random_tensor(Shape{lc[i].n}, 0.1f, d, rng, st);
          o.call.inputs.push_back(o.bias);
          o.out = shared[i].out;
          run_once(L.c[i], o, st);  // the plan's algorithm, outside any capture
        }
      BENCH_CUDA(cudaStreamSynchronize(st));
      const double cold = time_layers(ls, false, 0, false, st, side, reps);
      const double pre = time_layers(ls, false, int64_t{64} << 10, false, st, side, reps);
      const double pre1m = time_layers(ls, false, int64_t{1} << 20, false, st, side, reps);
      const double later = time_layers(ls, false, int64_t{1} << 20, true, st, side, reps);
      const double hot = time_layers(ls, true, 0, false, st, side, reps);
      std::printf("%6lld %10.2f %14.2f %14.2f %14.2f %10.2f\n", static_cast<long long>(m), cold,
                  pre, pre1m, later, hot);
      const std::string shape = std::to_string(m) + " rows";
      const std::pair<const char*, double> variants[] = {{"cold", cold},
                                                         {"cold_prefetch_64k", pre},
                                                         {"cold_prefetch_1m", pre1m},
                                                         {"cold_prefetch_1m_not_first", later},
                                                         {"hot", hot}};
      for (const auto& [variant, us] : variants)
        recs.push_back({"gemm_tune/bert_layer", variant, shape, us, {}, {{"dtype", dt}}});
    }
    BENCH_CUDA(cudaStreamDestroy(side));
    if (!json.empty()) lfbench::write_json(json, recs);
    return fail ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "livefuse-bench-gemm-tune: %s\n", e.what());
    return 2;
  }
}
