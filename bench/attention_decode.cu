// livefuse-bench-attention-decode: the decode attention kernels -- on tensor cores
// (kernels/cuda/attention_mma_decode.cu, f16/bf16 at d 64 / 128), the FMA one
// (attention_decode.cu) and the streaming one (attention_decode_stream.cu) -- against the CPU
// kernel (the reference) and the general CUDA kernel (attention.cu, or the prefill tensor-core
// kernel where it fits), over the
// decoders' decode shapes: GPT-2 small (12 heads, d 64, one row) and Llama-3.2-1B (8 K/V heads of
// 4 query heads each, d 64), plus views, masks and the odd shapes that take the slower paths.
//
// Usage: livefuse-bench-attention-decode [--json PATH] [--iters N] [--max-splits N] [--max-rows N] [--wide]
//        [--no-workspace] [--split-keys N] [--case TEXT] [--append] [--stream-warps 4|8|12|16]
//        [--stream-cluster N]
// (--stream-warps: the streaming kernel's blocks of 4, 8, 12 or 16 warps for every case, not its choice;
// --stream-cluster N: its splits meet in a cluster of at most N (<= 8; 0: the workspace only);
// --append: also the FMA decode kernel appending the step's rows to the cache itself, against
// the concat's copy launch followed by the kernel -- LIVEFUSE_ATTENTION_APPEND's two ways;)
// (--max-splits: cap the blocks a head's keys are split over, to compare cluster sizes;
// --max-rows 1 | 2 | 4: query rows a block takes at most, 0 the launch's own choice; --wide: the
// kernel built for one block an SM, as before the lean build; --no-workspace: splits meet in a
// cluster only (at most 8), as before the workspace; --split-keys: the fewest keys a split
// meeting in the workspace takes; --case: only the cases whose "name dtype sk" contains TEXT,
// e.g. "gpt2 f16 4096", for a profiler.)
// Exit status 1 when any case differs from the reference beyond its dtype's tolerance.
//
// Timing: each launch is timed alone with CUDA events, after a short spin kernel so that the
// host's enqueueing is hidden (the events then bracket the kernel only); median of --iters
// (default 200) after warm-up. "cold": each launch reads another copy of K and V, the copies
// spanning 256 MB so the cache comes from HBM as in a real decode step (the weights in between
// evict it); "hot": one copy, from L2 where it fits. GB/s counts the K and V bytes read. Then
// each kernel inside a CUDA graph of 20 cold launches (graph_us): its time in a decode step; the
// FMA kernel there once more with its first keys loaded before its PDL wait (early_kv), the
// streaming one with its splits meeting in the workspace only (where it takes a cluster).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_graph.hpp"
#include "bench/bench_record.hpp"
#include "kernels/attention_args.hpp"
#include "kernels/cuda/attention_decode.hpp"
#include "kernels/cuda/attention_kernels.hpp"
#include "kernels/device/lf_math.cuh"

using livefuse::AttentionArgs;
using livefuse::DType;

namespace {

#define CHECK_CUDA(call)                                                                       \
  do {                                                                                         \
    const cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__, \
                   __LINE__);                                                                  \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

constexpr size_t kColdBytes = size_t{256} << 20;
constexpr int kMaxCopies = 1024;
constexpr float kInf = std::numeric_limits<float>::infinity();

enum class MaskKind {
  none,
  per_key,       // [1, 1, 1, sk]: the first keys and every third one -inf
  fully_masked,  // [1, query heads, t, sk]: some keys -inf, one query head's row all -inf
};

struct Case {
  std::string name;
  DType dt;
  int64_t batch, kv_heads, groups, t, sk, d;
  int64_t capacity = 0;  // rows of the KV buffer, >= sk (the cache is a view of the first sk)
  MaskKind mask = MaskKind::none;
};

std::string name_of(DType dt) { return std::string(livefuse::dtype_name(dt)); }
double tolerance(DType dt) { return dt == DType::f32 ? 2e-5 : dt == DType::f16 ? 2e-3 : 1.6e-2; }

// Host storage of floats in a dtype (as the device holds them).
std::vector<unsigned char> encode(const std::vector<float>& x, DType dt) {
  std::vector<unsigned char> out(x.size() * livefuse::dtype_size(dt));
  for (size_t i = 0; i < x.size(); ++i) {
    if (dt == DType::f32) {
      std::memcpy(&out[i * 4], &x[i], 4);
    } else {
      const lf_u16 h = dt == DType::f16 ? lf_f2h(x[i]) : lf_f2bf(x[i]);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

std::vector<float> decode(const std::vector<unsigned char>& b, DType dt) {
  std::vector<float> x(b.size() / livefuse::dtype_size(dt));
  for (size_t i = 0; i < x.size(); ++i) {
    if (dt == DType::f32) {
      std::memcpy(&x[i], &b[i * 4], 4);
    } else {
      lf_u16 h;
      std::memcpy(&h, &b[i * 2], 2);
      x[i] = dt == DType::f16 ? lf_h2f(h) : lf_bf2f(h);
    }
  }
  return x;
}

std::vector<float> uniform(size_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> x(n);
  for (float& v : x) v = u(rng);
  return x;
}

// Operands as the planner binds a decode step: q [b, query heads, t, d] (a K/V head's G query
// heads are its rows), K and V [b, kv heads, capacity, d] read as their first sk rows, the
// result [b, t, query heads, d] (heads inner).
struct Layout {
  int64_t hq, rows, kv_elems, q_elems, out_elems, mask_elems;
};

Layout layout(const Case& c) {
  Layout l;
  l.hq = c.kv_heads * c.groups;
  l.rows = c.groups * c.t;
  l.kv_elems = c.batch * c.kv_heads * c.capacity * c.d;
  l.q_elems = c.batch * l.hq * c.t * c.d;
  l.out_elems = l.q_elems;
  l.mask_elems = c.mask == MaskKind::none      ? 0
                 : c.mask == MaskKind::per_key ? c.sk
                                               : l.hq * c.t * c.sk;
  return l;
}

AttentionArgs make_args(const Case& c, const Layout& l, const void* q, const void* k, const void* v,
                        const void* mask, void* out) {
  AttentionArgs a;
  a.q = q, a.k = k, a.v = v, a.mask = mask, a.out = out;
  a.dtype = c.dt;
  a.batch = c.batch, a.heads = c.kv_heads, a.sq = l.rows, a.sk = c.sk, a.d = c.d, a.dv = c.d;
  const int64_t qs[4] = {l.hq * c.t * c.d, l.rows * c.d, c.d, 1};
  const int64_t ks[4] = {c.kv_heads * c.capacity * c.d, c.capacity * c.d, c.d, 1};
  const int64_t os[4] = {c.t * l.hq * c.d, c.groups * c.d, l.hq * c.d, 1};
  for (int i = 0; i < 4; ++i)
    a.q_st[i] = qs[i], a.k_st[i] = ks[i], a.v_st[i] = ks[i], a.out_st[i] = os[i];
  a.rows_t = c.t;
  a.out_st_g = c.d;
  if (c.mask == MaskKind::per_key) {
    const int64_t ms[4] = {0, 0, 0, 1};
    for (int i = 0; i < 4; ++i) a.mask_st[i] = ms[i];
  } else if (c.mask == MaskKind::fully_masked) {
    const int64_t ms[4] = {0, c.groups * c.t * c.sk, c.sk, 1};
    for (int i = 0; i < 4; ++i) a.mask_st[i] = ms[i];
    a.mask_st_g = c.t * c.sk;
  }
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  return a;
}

std::vector<float> make_mask(const Case& c, const Layout& l) {
  std::vector<float> m(static_cast<size_t>(l.mask_elems), 0.0f);
  if (c.mask == MaskKind::per_key) {
    for (int64_t j = 0; j < c.sk; ++j)
      if (j < c.sk / 4 || j % 3 == 0) m[j] = -kInf;
  } else if (c.mask == MaskKind::fully_masked) {
    for (int64_t r = 0; r < l.hq * c.t; ++r)
      for (int64_t j = 0; j < c.sk; ++j)
        if (r == l.hq * c.t / 2 + 1 || (j + r) % 5 == 0) m[r * c.sk + j] = -kInf;
  }
  return m;
}

struct Diff {
  double max_abs = 0;
  bool pass = true;
};

// got vs want: |got - want| <= tol * (1 + |want|), NaN exactly where the reference has NaN.
Diff compare(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  Diff e;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) || std::isnan(got[i])) {
      if (std::isnan(want[i]) != std::isnan(got[i])) e.pass = false;
      continue;
    }
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    e.max_abs = std::max(e.max_abs, d);
    if (d > tol * (1.0 + std::fabs(want[i]))) e.pass = false;
  }
  return e;
}

__global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// Median microseconds of one launch(i) (i: the launch's index), each after a spin kernel.
template <class Launch>
double time_us(Launch launch, int iters, cudaStream_t s) {
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < 20; ++i) launch(i);
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    spin<<<1, 1, 0, s>>>(50000);  // ~25 us: longer than enqueueing the rest
    CHECK_CUDA(cudaEventRecord(e0, s));
    launch(i);
    CHECK_CUDA(cudaEventRecord(e1, s));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    us.push_back(ms * 1e3);
  }
  CHECK_CUDA(cudaEventDestroy(e0));
  CHECK_CUDA(cudaEventDestroy(e1));
  return lfbench::median(us);
}

// A launch's microseconds inside one CUDA graph of kGraphLaunches launches (launch(i), i its
// index), after a spin kernel: a decode step's context (the launch-by-launch columns above sit on
// a ~5 us floor, which hides the short caches' differences).
constexpr int kGraphLaunches = 20;
template <class Launch>
double graph_us(Launch launch, int reps, cudaStream_t s) {
  return lfbench::graph_median_us(
      s, reps, kGraphLaunches, [&] { for (int i = 0; i < kGraphLaunches; ++i) launch(i); },
      [&] { spin<<<1, 1, 0, s>>>(50000); });
}

// The kernels compared: tensor-core decode (where it takes the shape; else as launch_attention
// chooses), the FMA decode kernel, and launch_attention with both decode kernels off.
enum Mode { kTc, kFma, kGeneral, kStream, kModes };
const char* const kModeNames[kModes] = {"tc", "decode", "general", "stream"};

struct Result {
  Diff err[kModes];
  double cold[kModes], hot[kModes], graph[kModes], kv_bytes;
  bool tc_took = false;      // the tensor-core kernel took the shape
  bool stream_took = false;  // the streaming kernel did
  // --append: the FMA decode kernel appending the step's t rows itself (AttentionArgs::
  // first_new, the cache grown in place), against the copy launch of the concat it replaces
  // followed by the kernel as above; cold us.
  Diff append_err, stream_append_err;
  double append_cold = 0, copy_then_decode_cold = 0, stream_append_cold = 0;
  // The FMA and streaming decode kernels in the graph again, their first keys loaded before
  // their PDL wait (AttentionArgs::early_kv: no launch writes K or V here), and their results.
  double graph_early[kModes] = {};
  Diff early_err[kModes];
  // The streaming kernel in the graph once more with its splits meeting in the workspace only
  // (set_attention_decode_stream_cluster(0)), where the default meets them in a cluster.
  double graph_workspace = 0;
  Diff workspace_err;
};

int g_stream_cluster = -1;  // --stream-cluster

bool g_append = false;  // --append

Result run_case(const Case& c, int iters, cudaStream_t s) {
  const Layout l = layout(c);
  const size_t es = livefuse::dtype_size(c.dt);
  std::mt19937 rng(1234);
  const auto q = encode(uniform(l.q_elems, -2, 2, rng), c.dt);
  const auto kv = encode(uniform(2 * l.kv_elems, -1, 1, rng), c.dt);  // K then V
  const auto mask = encode(make_mask(c, l), c.dt);
  const size_t copy_bytes = kv.size();
  const int copies = static_cast<int>(
      std::clamp<size_t>((kColdBytes + copy_bytes - 1) / copy_bytes, 2, kMaxCopies));

  unsigned char *dq, *dkv, *dmask = nullptr, *dout;
  CHECK_CUDA(cudaMalloc(&dq, q.size()));
  CHECK_CUDA(cudaMalloc(&dkv, copy_bytes * copies));
  CHECK_CUDA(cudaMalloc(&dout, l.out_elems * es));
  if (!mask.empty()) CHECK_CUDA(cudaMalloc(&dmask, mask.size()));
  CHECK_CUDA(cudaMemcpy(dq, q.data(), q.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dkv, kv.data(), copy_bytes, cudaMemcpyHostToDevice));
  for (int i = 1; i < copies; ++i)
    CHECK_CUDA(cudaMemcpy(dkv + i * copy_bytes, dkv, copy_bytes, cudaMemcpyDeviceToDevice));
  if (dmask) CHECK_CUDA(cudaMemcpy(dmask, mask.data(), mask.size(), cudaMemcpyHostToDevice));
  auto args = [&](int copy) {
    unsigned char* k = dkv + static_cast<size_t>(copy) * copy_bytes;
    return make_args(c, l, dq, k, k + l.kv_elems * es, dmask, dout);
  };

  // The reference: the CPU kernel on host copies of the same bits.
  std::vector<unsigned char> want_bits(l.out_elems * es);
  livefuse::cpu::run_attention(make_args(c, l, q.data(), kv.data(), kv.data() + l.kv_elems * es,
                                         mask.empty() ? nullptr : mask.data(), want_bits.data()));
  const std::vector<float> want = decode(want_bits, c.dt);
  // Each column's kernel wherever it applies (launch_attention takes the FMA decode kernel only
  // from its crossover on); the general column is launch_attention with both switched off.
  Mode mode = kTc;
  auto launch = [&](const livefuse::AttentionArgs& x) {
    if (mode == kTc && livefuse::cuda::launch_attention_decode_tc(x, s)) return;
    if (mode == kFma && livefuse::cuda::launch_attention_decode(x, s)) return;
    if (mode == kStream && livefuse::cuda::launch_attention_decode_stream(x, s)) return;
    livefuse::cuda::launch_attention(x, s);
  };
  // What `enqueue` writes over an output of NaNs (in every dtype), against the reference.
  auto check = [&](auto&& enqueue) {
    std::vector<unsigned char> got(l.out_elems * es);
    CHECK_CUDA(cudaMemsetAsync(dout, 0xff, got.size(), s));
    enqueue();
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUDA(cudaMemcpy(got.data(), dout, got.size(), cudaMemcpyDeviceToHost));
    return compare(decode(got, c.dt), want, tolerance(c.dt));
  };

  Result r;
  r.kv_bytes = 2.0 * c.batch * c.kv_heads * c.sk * c.d * es;
  livefuse::cuda::force_attention_decode_tc(1);
  r.tc_took = livefuse::cuda::launch_attention_decode_tc(args(0), s);
  livefuse::cuda::force_attention_decode_stream(1);
  r.stream_took = livefuse::cuda::launch_attention_decode_stream(args(0), s);
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int m = 0; m < kModes; ++m) {
    mode = static_cast<Mode>(m);
    livefuse::cuda::force_attention_decode_tc(mode == kTc ? 1 : 0);
    livefuse::cuda::force_attention_decode_stream(mode == kStream ? 1 : 0);
    livefuse::cuda::set_attention_decode_enabled(mode != kGeneral);
    r.err[m] = check([&] { launch(args(0)); });
    r.cold[m] = time_us([&](int i) { launch(args(i % copies)); }, iters, s);
    r.hot[m] = time_us([&](int) { launch(args(0)); }, iters, s);
    r.graph[m] = graph_us([&](int i) { launch(args(i % copies)); }, std::max(5, iters / 10), s);
  }
  livefuse::cuda::force_attention_decode_tc(-1);
  livefuse::cuda::set_attention_decode_enabled(true);
  for (const Mode m : {kFma, kStream}) {
    if (m == kStream && !r.stream_took) continue;
    mode = m;
    livefuse::cuda::force_attention_decode_stream(mode == kStream ? 1 : 0);
    const auto early = [&](int copy) {
      AttentionArgs a = args(copy);
      a.early_kv = true;
      return a;
    };
    r.early_err[m] = check([&] { launch(early(0)); });
    r.graph_early[m] = graph_us([&](int i) { launch(early(i % copies)); }, std::max(5, iters / 10), s);
  }
  if (r.stream_took) {
    mode = kStream;
    livefuse::cuda::force_attention_decode_stream(1);
    livefuse::cuda::set_attention_decode_stream_cluster(0);
    r.workspace_err = check([&] { launch(args(0)); });
    r.graph_workspace = graph_us([&](int i) { launch(args(i % copies)); }, std::max(5, iters / 10), s);
    livefuse::cuda::set_attention_decode_stream_cluster(g_stream_cluster);
  }
  livefuse::cuda::force_attention_decode_stream(0);  // the append's FMA arm below
  if (g_append) {
    // The step's rows: each head's last t rows of the cache, [b, kv heads, t, d] on their own;
    // the kernel writes them back where they already are (in place), so every launch reads the
    // same keys.
    const int64_t first = c.sk - c.t, rows = c.batch * c.kv_heads * c.t * c.d;
    std::vector<unsigned char> kn(rows * es), vn(rows * es);
    for (int64_t bh = 0; bh < c.batch * c.kv_heads; ++bh)
      for (int64_t r = 0; r < c.t; ++r) {
        const size_t src = ((bh * c.capacity + first + r) * c.d) * es, dst = ((bh * c.t + r) * c.d) * es;
        std::memcpy(&kn[dst], &kv[src], c.d * es);
        std::memcpy(&vn[dst], &kv[l.kv_elems * es + src], c.d * es);
      }
    unsigned char *dkn, *dvn;
    CHECK_CUDA(cudaMalloc(&dkn, kn.size()));
    CHECK_CUDA(cudaMalloc(&dvn, vn.size()));
    CHECK_CUDA(cudaMemcpy(dkn, kn.data(), kn.size(), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dvn, vn.data(), vn.size(), cudaMemcpyHostToDevice));
    auto appending = [&](int copy) {
      AttentionArgs a = args(copy);
      a.first_new = first;
      a.k_new = dkn, a.v_new = dvn;
      const int64_t ns[4] = {c.kv_heads * c.t * c.d, c.t * c.d, c.d, 1};
      for (int i = 0; i < 4; ++i)
        a.k_new_st[i] = a.v_new_st[i] = ns[i], a.k_dst_st[i] = a.k_st[i], a.v_dst_st[i] = a.v_st[i];
      a.k_dst = const_cast<void*>(a.k), a.v_dst = const_cast<void*>(a.v);
      return a;
    };
    mode = kFma;
    const auto append_launch = [&](const AttentionArgs& x) {
      if (!livefuse::cuda::launch_attention_decode(x, s)) livefuse::cuda::launch_attention(x, s);
    };
    r.append_err = check([&] { append_launch(appending(0)); });
    r.append_cold = time_us([&](int i) { append_launch(appending(i % copies)); }, iters, s);
    r.copy_then_decode_cold = time_us(
        [&](int i) {
          const AttentionArgs x = appending(i % copies);
          livefuse::cuda::launch_append_copies(x, s);
          launch(livefuse::after_append(x));
        },
        iters, s);
    // The same on the streaming kernel, where it takes the shape.
    livefuse::cuda::force_attention_decode_stream(1);
    if (r.stream_took) {
      r.stream_append_err = check([&] {
        if (!livefuse::cuda::launch_attention_decode_stream(appending(0), s)) std::abort();
      });
      r.stream_append_cold = time_us(
          [&](int i) {
            if (!livefuse::cuda::launch_attention_decode_stream(appending(i % copies), s)) std::abort();
          },
          iters, s);
    }
    CHECK_CUDA(cudaFree(dkn));
    CHECK_CUDA(cudaFree(dvn));
  }
  livefuse::cuda::force_attention_decode_stream(-1);
  CHECK_CUDA(cudaFree(dq));
  CHECK_CUDA(cudaFree(dkv));
  CHECK_CUDA(cudaFree(dout));
  if (dmask) CHECK_CUDA(cudaFree(dmask));
  return r;
}

std::vector<Case> cases() {
  std::vector<Case> cs;
  for (DType dt : {DType::f16, DType::f32})
    for (int64_t sk : {32, 128, 160, 256, 512, 1024, 4096})
      cs.push_back({"gpt2", dt, 1, 12, 1, 1, sk, 64, sk});
  for (int64_t sk : {32, 128, 300, 1024, 2048, 4096, 4160, 5120, 6100, 8192})
    cs.push_back({"llama-gqa", DType::bf16, 1, 8, 4, 1, sk, 64, sk});
  for (int64_t sk : {300, 4096}) cs.push_back({"gqa d 128 (8B-shaped)", DType::bf16, 1, 8, 4, 1, sk, 128, sk});
  cs.push_back({"gpt2 kv view (capacity 4096)", DType::f16, 1, 12, 1, 1, 1000, 64, 4096});
  cs.push_back(
      {"gpt2 mask [1,1,1,sk] -inf", DType::f16, 1, 12, 1, 1, 1024, 64, 1024, MaskKind::per_key});
  cs.push_back({"llama-gqa fully masked row", DType::bf16, 1, 8, 4, 1, 777, 64, 777,
                MaskKind::fully_masked});
  cs.push_back({"gpt2 batch 4", DType::f16, 4, 12, 1, 1, 1024, 64, 1024});
  cs.push_back({"llama-gqa t 4 (16 rows)", DType::bf16, 1, 8, 4, 4, 512, 64, 512});
  cs.push_back({"gqa 3 rows d 100 (strided path)", DType::f16, 2, 4, 3, 1, 300, 100, 300});
  cs.push_back({"f32 d 128", DType::f32, 1, 2, 1, 1, 4100, 128, 4100});
  return cs;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json, only;
  int iters = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json" && i + 1 < argc)
      json = argv[++i];
    else if (arg == "--iters" && i + 1 < argc)
      iters = std::max(1, std::atoi(argv[++i]));
    else if (arg == "--max-splits" && i + 1 < argc)
      livefuse::cuda::set_attention_decode_max_splits(std::max(0, std::atoi(argv[++i])));
    else if (arg == "--max-rows" && i + 1 < argc)
      livefuse::cuda::set_attention_decode_max_rows(std::max(0, std::atoi(argv[++i])));
    else if (arg == "--wide")
      livefuse::cuda::set_attention_decode_lean(false);
    else if (arg == "--no-workspace")
      livefuse::cuda::set_attention_decode_workspace(false);
    else if (arg == "--split-keys" && i + 1 < argc)
      livefuse::cuda::set_attention_decode_split_keys(std::max(0, std::atoi(argv[++i])));
    else if (arg == "--case" && i + 1 < argc)
      only = argv[++i];
    else if (arg == "--append")
      g_append = true;
    else if (arg == "--stream-warps" && i + 1 < argc)
      livefuse::cuda::set_attention_decode_stream_warps(std::atoi(argv[++i]));
    else if (arg == "--stream-cluster" && i + 1 < argc)
      livefuse::cuda::set_attention_decode_stream_cluster(g_stream_cluster = std::atoi(argv[++i]));
    else {
      std::fprintf(stderr,
                   "usage: %s [--json PATH] [--iters N] [--max-splits N] [--max-rows 0|1|2|4] [--wide] "
                   "[--no-workspace] [--split-keys N] [--case TEXT] [--append] [--stream-warps 4|8|12|16] "
                   "[--stream-cluster N]\n",
                   argv[0]);
      return 2;
    }
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; median of %d launches\n", prop.name, prop.multiProcessorCount, iters);
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<lfbench::Record> recs;
  bool all_pass = true;
  std::printf("%-34s %5s %3s %5s %5s | %9s %8s %6s %7s | %9s %8s %6s %7s | %9s %8s %6s %7s | %9s %8s %7s\n",
              "case", "dtype", "b", "rows", "sk", "tc err", "cold us", "GB/s", "hot us", "fma err", "cold us",
              "GB/s", "hot us", "strm err", "cold us", "GB/s", "hot us", "gen. err", "cold us", "hot us");
  for (const Case& c : cases()) {
    if ((c.name + " " + name_of(c.dt) + " " + std::to_string(c.sk)).find(only) == std::string::npos) continue;
    const Result r = run_case(c, iters, s);
    std::string failed;
    for (int m = 0; m < kModes; ++m)
      if (!r.err[m].pass) failed += std::string(failed.empty() ? "" : ", ") + kModeNames[m];
    for (const Mode m : {kFma, kStream})
      if (!r.early_err[m].pass) failed += std::string(failed.empty() ? "" : ", ") + kModeNames[m] + " early";
    if (r.stream_took && !r.workspace_err.pass) failed += std::string(failed.empty() ? "" : ", ") + "stream workspace";
    if (g_append && !r.append_err.pass) failed += std::string(failed.empty() ? "" : ", ") + "append";
    if (g_append && !r.stream_append_err.pass) failed += std::string(failed.empty() ? "" : ", ") + "stream append";
    all_pass = all_pass && failed.empty();
    const auto gbs = [&](int m) { return r.kv_bytes / r.cold[m] * 1e-3; };
    std::printf(
        "%-34s %5s %3lld %5lld %5lld | %9.2e %8.2f %6.0f %7.2f | %9.2e %8.2f %6.0f %7.2f | %9.2e %8.2f %6.0f "
        "%7.2f | %9.2e %8.2f %7.2f  %s%s%s\n",
        c.name.c_str(), name_of(c.dt).c_str(), static_cast<long long>(c.batch),
        static_cast<long long>(c.groups * c.t), static_cast<long long>(c.sk), r.err[kTc].max_abs,
        r.cold[kTc], gbs(kTc), r.hot[kTc], r.err[kFma].max_abs, r.cold[kFma], gbs(kFma), r.hot[kFma],
        r.err[kStream].max_abs, r.cold[kStream], gbs(kStream), r.hot[kStream], r.err[kGeneral].max_abs,
        r.cold[kGeneral], r.hot[kGeneral], failed.empty() ? "PASS" : ("FAIL (" + failed + ")").c_str(),
        r.tc_took ? "" : "  (tc declined)", r.stream_took ? "" : "  (stream declined)");
    std::printf("%-34s   in a graph of %d (cold copies), us a launch: tc %.2f | fma %.2f"
                " | stream %.2f | general %.2f | first keys before the wait: fma %.2f, stream %.2f"
                " | stream, splits meeting in the workspace only %.2f\n",
                "", kGraphLaunches, r.graph[kTc], r.graph[kFma], r.graph[kStream],
                r.graph[kGeneral], r.graph_early[kFma], r.graph_early[kStream], r.graph_workspace);
    if (g_append)
      std::printf("%-34s   appending in the kernel %8.2f us (err %.2e) | copy launch, then the kernel %8.2f us"
                  " | streaming kernel appending %8.2f us (err %.2e)\n",
                  "", r.append_cold, r.append_err.max_abs, r.copy_then_decode_cold, r.stream_append_cold,
                  r.stream_append_err.max_abs);
    const std::string size = "b" + std::to_string(c.batch) + " kvh" + std::to_string(c.kv_heads) +
                             " rows" + std::to_string(c.groups * c.t) + " sk" +
                             std::to_string(c.sk) + " d" + std::to_string(c.d) + " " +
                             name_of(c.dt);
    for (int m = 0; m < kModes; ++m) {
      if ((m == kTc && !r.tc_took) || (m == kStream && !r.stream_took)) continue;
      recs.push_back({c.name,
                      kModeNames[m],
                      size,
                      r.cold[m],
                      {{"gb_per_s", gbs(m)},
                       {"hot_us", r.hot[m]},
                       {"graph_us", r.graph[m]},
                       {"max_err", r.err[m].max_abs},
                       {"kv_bytes", r.kv_bytes}},
                      {{"check", r.err[m].pass ? "PASS" : "FAIL"}}});
    }
    for (const Mode m : {kFma, kStream})
      if (m == kFma || r.stream_took)
        recs.push_back({c.name, std::string(kModeNames[m]) + "_early_kv", size, r.graph_early[m],
                        {{"graph_us", r.graph_early[m]}, {"max_err", r.early_err[m].max_abs}},
                        {{"check", r.early_err[m].pass ? "PASS" : "FAIL"}}});
    if (r.stream_took)
      recs.push_back({c.name, "stream_workspace", size, r.graph_workspace,
                      {{"graph_us", r.graph_workspace}, {"max_err", r.workspace_err.max_abs}},
                      {{"check", r.workspace_err.pass ? "PASS" : "FAIL"}}});
    if (g_append) {
      recs.push_back({c.name, "append", size, r.append_cold, {{"max_err", r.append_err.max_abs}},
                      {{"check", r.append_err.pass ? "PASS" : "FAIL"}}});
      recs.push_back({c.name, "copy+decode", size, r.copy_then_decode_cold, {}, {}});
      if (r.stream_took)
        recs.push_back({c.name, "stream append", size, r.stream_append_cold, {{"max_err", r.stream_append_err.max_abs}},
                        {{"check", r.stream_append_err.pass ? "PASS" : "FAIL"}}});
    }
  }
  if (!json.empty()) lfbench::write_json(json, recs);
  CHECK_CUDA(cudaStreamDestroy(s));
  std::printf("%s\n", all_pass ? "all PASS" : "FAIL");
  return all_pass ? 0 : 1;
}
