// livefuse-bench-attention: the CUDA fused-attention kernels alone, checked and timed.
// Each case fills random q, k, v (and a mask) on the host, copies them to the device, runs
//   fused    launch_attention (the tensor-core kernel where attention_mma_fits, the f32 FMA kernel
//            where attention_f32_fits, else general)
//   1group / 2groups  the tensor-core kernel with its keys forced into one group / split in two
//            (attention_mma.cu), where it applies: "kernel" names the blocks' row warps x groups
//   general  launch_attention_general (the f32 FMA kernel every case can run)
// and compares both outputs with the CPU kernel (livefuse::cpu::run_attention) on the same
// host data: max abs / rel error and PASS or FAIL per case (NaN must meet NaN). Times are
// CUDA events around single launches, median of --reps (>= 200) after a warm-up; `pipelined`
// is the mean per launch of --reps back-to-back launches; `graph_us` the time a launch takes inside
// a CUDA graph of 20 (graph_us), as in a plan. Variants "2g 1rw" / "2g 2rw": the keys split in two
// with blocks of 1 / 2 row warps (force_attention_row_warps). Variants "2 rows" / "4 rows":
// the f32 kernel with that many rows a warp (set_attention_f32_rows).
// Usage: livefuse-bench-attention [--json PATH] [--reps N]   exit status 1 on any FAIL
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_cuda.hpp"
#include "bench/bench_graph.hpp"
#include "bench/bench_record.hpp"
#include "kernels/attention_args.hpp"
#include "kernels/cuda/attention_kernels.hpp"
#include "kernels/device/lf_math.cuh"

namespace {

using livefuse::AttentionArgs;
using livefuse::DType;

constexpr float kInf = std::numeric_limits<float>::infinity();

size_t elem_size(DType dt) { return dt == DType::f32 ? 4 : 2; }

float to_float(const std::vector<uint8_t>& b, DType dt, size_t i) {
  if (dt == DType::f32) {
    float f;
    std::memcpy(&f, &b[i * 4], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &b[i * 2], 2);
  return dt == DType::f16 ? lf_h2f(h) : lf_bf2f(h);
}

void from_float(std::vector<uint8_t>& b, DType dt, size_t i, float f) {
  if (dt == DType::f32) {
    std::memcpy(&b[i * 4], &f, 4);
    return;
  }
  const uint16_t h = dt == DType::f16 ? lf_f2h(f) : lf_f2bf(f);
  std::memcpy(&b[i * 2], &h, 2);
}

// One device allocation with its host copy.
struct Buffer {
  size_t elems = 0;
  std::vector<uint8_t> host;
  void* dev = nullptr;
};

// q, k, v, mask and out name a buffer and an element offset into it, so views of one
// allocation (a fused QKV projection) are described as they are in a model.
struct Operand {
  int buf = -1;  // -1: absent (no mask)
  int64_t off = 0;
};

struct Case {
  std::string name;
  AttentionArgs a;              // shapes, strides, dtype, scale; pointers set from the operands
  std::vector<size_t> buffers;  // element counts
  Operand q, k, v, mask, out;
  // The mask at (row, key) of sq rows (rows_t for grouped rows) and sk keys, the same for
  // every batch and head; called once per element the mask's strides reach.
  float (*mask_value)(int64_t row, int64_t key, int64_t sq, int64_t sk, std::mt19937&) = nullptr;
};

void dense(int64_t (&st)[4], int64_t h, int64_t r, int64_t c) {
  st[0] = h * r * c, st[1] = r * c, st[2] = c, st[3] = 1;
}
// [b, s, h, d] memory seen as [b, h, s, d]: the layout before (q/k/v) and after (out) the
// head permutes.
void bshd(int64_t (&st)[4], int64_t h, int64_t s, int64_t d) {
  st[0] = s * h * d, st[1] = d, st[2] = h * d, st[3] = 1;
}

// BERT's padding mask: the last eighth of the keys at -10000 for every row.
float bert_padding(int64_t, int64_t key, int64_t, int64_t sk, std::mt19937&) {
  return key >= sk - sk / 8 ? -10000.0f : 0.0f;
}
float random_small(int64_t, int64_t, int64_t, int64_t, std::mt19937& rng) {
  return std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
}
// Rows 0 to 3 entirely -inf (NaN out); rows 4 to 7 -inf over the first key tile (64 keys)
// only, so their first finite max comes in a later tile; the others causal (-inf past the
// diagonal) with random values.
float masked_rows(int64_t row, int64_t key, int64_t sq, int64_t sk, std::mt19937& rng) {
  if (row < 4 || (row < 8 && key < 64) || (row >= 8 && key > row + (sk - sq))) return -kInf;
  return std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
}
// Causal over the last sq keys (decoder prefill of `sq` new tokens onto a cache).
float causal(int64_t row, int64_t key, int64_t sq, int64_t sk, std::mt19937&) {
  return key > row + (sk - sq) ? -kInf : 0.0f;
}

// Plain [b, h, s, d] q/k/v, out as [b, s, h, d], a [b, 1, 1, sk] mask (or none).
Case standard(std::string name, DType dt, int64_t b, int64_t h, int64_t sq, int64_t sk, int64_t d,
              bool with_mask) {
  Case c;
  c.name = std::move(name);
  AttentionArgs& a = c.a;
  a.dtype = dt, a.batch = b, a.heads = h, a.sq = sq, a.sk = sk, a.d = d, a.dv = d;
  a.rows_t = sq, a.scale = 1.0f / std::sqrt(static_cast<float>(d));
  dense(a.q_st, h, sq, d);
  dense(a.k_st, h, sk, d);
  dense(a.v_st, h, sk, d);
  bshd(a.out_st, h, sq, d);
  c.buffers = {size_t(b * h * sq * d), size_t(b * h * sk * d), size_t(b * h * sk * d),
               size_t(b * h * sq * d)};
  c.q = {0}, c.k = {1}, c.v = {2}, c.out = {3};
  if (with_mask) {
    a.mask_st[0] = sk, a.mask_st[3] = 1;  // [b, 1, 1, sk]: stride 0 over heads and rows
    c.buffers.push_back(size_t(b * sk));
    c.mask = {4};
    c.mask_value = bert_padding;
  }
  return c;
}

// q, k, v as head-split views of one [b, s, 3 * h * d] projection.
Case qkv_views(DType dt, int64_t b, int64_t h, int64_t s, int64_t d) {
  Case c = standard("qkv_view_b" + std::to_string(b) + "_s" + std::to_string(s), dt, b, h, s, s, d,
                    true);
  for (int64_t* st : {c.a.q_st, c.a.k_st, c.a.v_st})
    st[0] = s * 3 * h * d, st[1] = d, st[2] = 3 * h * d, st[3] = 1;
  c.buffers = {size_t(b * s * 3 * h * d), size_t(b * h * s * d), size_t(b * s)};
  c.q = {0, 0}, c.k = {0, h * d}, c.v = {0, 2 * h * d}, c.out = {1}, c.mask = {2};
  return c;
}

// Every score has its own mask value ([b, 1, sq, sk], broadcast over heads).
Case row_masked(std::string name, DType dt, int64_t b, int64_t h, int64_t sq, int64_t sk, int64_t d,
                float (*value)(int64_t, int64_t, int64_t, int64_t, std::mt19937&)) {
  Case c = standard(std::move(name), dt, b, h, sq, sk, d, false);
  c.a.mask_st[0] = sq * sk, c.a.mask_st[1] = 0, c.a.mask_st[2] = sk, c.a.mask_st[3] = 1;
  c.buffers.push_back(size_t(b * sq * sk));
  c.mask = {4};
  c.mask_value = value;
  return c;
}

// The decoder's grouped-query form: hkv K/V heads of a cache (capacity 2 sk), each with G query
// heads of T new rows stacked as G * T rows; q and out are [b, T, hkv * G, d] in memory, the
// mask [b, 1, T, sk] causal over the new rows, broadcast over heads and groups.
Case gqa(DType dt, int64_t b, int64_t hkv, int64_t g, int64_t t, int64_t sk, int64_t d) {
  Case c;
  c.name = "gqa_hkv" + std::to_string(hkv) + "_g" + std::to_string(g) + "_t" + std::to_string(t) +
           "_sk" + std::to_string(sk);
  AttentionArgs& a = c.a;
  const int64_t hq = hkv * g, cap = 2 * sk;
  a.dtype = dt, a.batch = b, a.heads = hkv, a.sq = g * t, a.sk = sk, a.d = d, a.dv = d;
  a.rows_t = t, a.scale = 1.0f / std::sqrt(static_cast<float>(d));
  // q as the planner views it: [b, hkv, G*T, d] over q heads stored [b, hq, T, d].
  a.q_st[0] = hq * t * d, a.q_st[1] = g * t * d, a.q_st[2] = d, a.q_st[3] = 1;
  dense(a.k_st, hkv, cap, d);
  dense(a.v_st, hkv, cap, d);
  a.out_st[0] = t * hq * d, a.out_st[1] = g * d, a.out_st[2] = hq * d, a.out_st[3] = 1;
  a.out_st_g = d;
  a.mask_st[0] = t * sk, a.mask_st[2] = sk, a.mask_st[3] = 1;
  c.buffers = {size_t(b * hq * t * d), size_t(b * hkv * cap * d), size_t(b * hkv * cap * d),
               size_t(b * t * hq * d), size_t(b * t * sk)};
  c.q = {0}, c.k = {1}, c.v = {2}, c.out = {3}, c.mask = {4};
  c.mask_value = causal;
  return c;
}

std::vector<Case> all_cases() {
  std::vector<Case> cs;
  cs.push_back(standard("bert_b1_s128", DType::f16, 1, 12, 128, 128, 64, true));
  cs.push_back(standard("bert_b1_s128", DType::bf16, 1, 12, 128, 128, 64, true));
  cs.push_back(standard("bert_b8_s128", DType::f16, 8, 12, 128, 128, 64, true));
  cs.push_back(standard("bert_b1_s384", DType::f16, 1, 12, 384, 384, 64, true));
  cs.push_back(standard("bert_b8_s384", DType::f16, 8, 12, 384, 384, 64, true));
  cs.push_back(qkv_views(DType::f16, 2, 12, 128, 64));
  cs.push_back(standard("d128_b1_h16_s256", DType::f16, 1, 16, 256, 256, 128, true));
  cs.push_back(row_masked("d128_rowmask_s200", DType::bf16, 2, 4, 200, 200, 128, random_small));
  cs.push_back(gqa(DType::f16, 1, 8, 4, 16, 512, 64));
  cs.push_back(gqa(DType::bf16, 1, 8, 4, 16, 512, 128));
  cs.push_back(row_masked("masked_rows_s100_sk130", DType::f16, 1, 3, 100, 130, 64, masked_rows));
  cs.push_back(standard("nomask_s77", DType::f16, 2, 3, 77, 77, 64, false));
  cs.push_back(standard("bert_b2_s200", DType::bf16, 2, 12, 200, 200, 64, true));
  cs.push_back(standard("d80_general", DType::f16, 1, 4, 96, 96, 80, true));  // not for mma
  cs.push_back(standard("bert_b1_s128", DType::f32, 1, 12, 128, 128, 64, true));
  cs.push_back(standard("bert_b8_s128", DType::f32, 8, 12, 128, 128, 64, true));
  cs.push_back(row_masked("masked_rows_s100_sk130", DType::f32, 1, 3, 100, 130, 64, masked_rows));
  cs.push_back(standard("d128_b1_h16_s256", DType::f32, 1, 16, 256, 256, 128, true));
  return cs;
}

// Fills the inputs (uniform [-1, 1], the mask from the case) and copies them to the device.
void prepare(Case& c, std::vector<Buffer>& bufs, std::mt19937& rng) {
  const DType dt = c.a.dtype;
  bufs.assign(c.buffers.size(), Buffer{});
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t i = 0; i < bufs.size(); ++i) {
    Buffer& b = bufs[i];
    b.elems = c.buffers[i];
    b.host.assign(b.elems * elem_size(dt), 0);
    if (static_cast<int>(i) != c.out.buf && static_cast<int>(i) != c.mask.buf)
      for (size_t e = 0; e < b.elems; ++e) from_float(b.host, dt, e, u(rng));
  }
  if (c.mask.buf >= 0) {
    const AttentionArgs& a = c.a;
    Buffer& m = bufs[c.mask.buf];
    const int64_t rows = a.mask_st[2] == 0 ? 1 : a.rows_t;  // the rows the layout holds
    for (int64_t b = 0; b < a.batch; ++b)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < a.sk; ++j)
          from_float(m.host, dt, size_t(b * a.mask_st[0] + r * a.mask_st[2] + j * a.mask_st[3]),
                     c.mask_value(r, j, a.rows_t, a.sk, rng));
  }
  for (Buffer& b : bufs) {
    BENCH_CUDA(cudaMalloc(&b.dev, b.host.size()));
    BENCH_CUDA(cudaMemcpy(b.dev, b.host.data(), b.host.size(), cudaMemcpyHostToDevice));
  }
}

// The case's arguments over device (or host) copies.
AttentionArgs bind(const Case& c, const std::vector<Buffer>& bufs, bool host,
                   std::vector<std::vector<uint8_t>>* host_copies = nullptr) {
  AttentionArgs a = c.a;
  const size_t es = elem_size(a.dtype);
  auto at = [&](const Operand& o) -> void* {
    if (o.buf < 0) return nullptr;
    auto* base = host ? (*host_copies)[o.buf].data() : static_cast<uint8_t*>(bufs[o.buf].dev);
    return base + o.off * es;
  };
  a.q = at(c.q), a.k = at(c.k), a.v = at(c.v), a.mask = at(c.mask), a.out = at(c.out);
  return a;
}

struct Check {
  double max_abs = 0, max_rel = 0;
  int64_t bad = 0, nan_rows = 0;
};

// Every output element against the reference: |got - ref| <= atol + rtol |ref|, NaN only
// where the reference is NaN.
Check compare(const Case& c, const std::vector<uint8_t>& got, const std::vector<uint8_t>& ref) {
  const AttentionArgs& a = c.a;
  const double atol = a.dtype == DType::f32 ? 1e-5 : a.dtype == DType::f16 ? 2e-3 : 1.5e-2;
  const double rtol = a.dtype == DType::f32 ? 1e-4 : a.dtype == DType::f16 ? 1e-2 : 4e-2;
  Check k;
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h)
      for (int64_t r = 0; r < a.sq; ++r) {
        const int64_t row = b * a.out_st[0] + h * a.out_st[1] +
                            livefuse::row_offset(r, a.rows_t, a.out_st[2], a.out_st_g);
        bool nan_row = false;
        for (int64_t col = 0; col < a.dv; ++col) {
          const size_t i = size_t(c.out.off + row + col * a.out_st[3]);
          const double g = to_float(got, a.dtype, i), e = to_float(ref, a.dtype, i);
          if (std::isnan(e) || std::isnan(g)) {
            nan_row = nan_row || std::isnan(e);
            k.bad += std::isnan(e) != std::isnan(g);
            continue;
          }
          const double err = std::fabs(g - e);
          k.max_abs = std::max(k.max_abs, err);
          k.max_rel = std::max(k.max_rel, err / std::max(std::fabs(e), 1e-3));
          k.bad += err > atol + rtol * std::fabs(e);
        }
        k.nan_rows += nan_row;
      }
  return k;
}

struct Timing {
  double median_us = 0, pipelined_us = 0, graph_us = 0;
};

// A launch's microseconds inside one CUDA graph of 20 launches on `s`: a plan's context, where a
// kernel's time is its own and the gap to the next node (the single launches above carry an
// event's and a launch's ~5 us).
template <class Launch>
double graph_us(Launch&& launch, int reps, cudaStream_t s) {
  constexpr int kLaunches = 20;
  return lfbench::graph_median_us(s, reps, kLaunches, [&] {
    for (int i = 0; i < kLaunches; ++i) launch(s);
  });
}

template <class Launch>
Timing time_launches(Launch&& launch, int reps) {
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < 20; ++i) launch();
  BENCH_CUDA(cudaDeviceSynchronize());
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    BENCH_CUDA(cudaEventRecord(e0, nullptr));
    launch();
    BENCH_CUDA(cudaEventRecord(e1, nullptr));
    BENCH_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    us.push_back(ms * 1e3);
  }
  BENCH_CUDA(cudaEventRecord(e0, nullptr));
  for (int i = 0; i < reps; ++i) launch();
  BENCH_CUDA(cudaEventRecord(e1, nullptr));
  BENCH_CUDA(cudaEventSynchronize(e1));
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  BENCH_CUDA(cudaEventDestroy(e0));
  BENCH_CUDA(cudaEventDestroy(e1));
  return {lfbench::median(us), ms * 1e3 / reps};
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  int reps = 200;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json = argv[++i];
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::max(200, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--json PATH] [--reps N (>= 200)]\n", argv[0]);
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "livefuse-bench-attention: no CUDA device\n");
    return 2;
  }
  std::mt19937 rng(1234);
  std::vector<lfbench::Record> records;
  bool all_pass = true;
  std::printf("%-24s %-5s %-8s %-8s %10s %10s %9s %11s %11s %6s %s\n", "case", "dtype", "variant",
              "kernel", "median_us", "pipe_us", "graph_us", "max_abs", "max_rel", "nan", "check");
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (Case& c : all_cases()) {
    std::vector<Buffer> bufs;
    prepare(c, bufs, rng);
    std::vector<std::vector<uint8_t>> host_copies;
    for (const Buffer& b : bufs) host_copies.push_back(b.host);
    livefuse::cpu::run_attention(bind(c, bufs, true, &host_copies));
    const std::vector<uint8_t>& ref = host_copies[c.out.buf];
    const AttentionArgs dev_args = bind(c, bufs, false);
    const bool mma = livefuse::cuda::attention_mma_fits(dev_args);
    const std::string dt(livefuse::dtype_name(c.a.dtype));
    const double flops = 4.0 * c.a.batch * c.a.heads * c.a.sq * c.a.sk * c.a.d;
    // The tensor-core kernel as launched (its key split chosen by the grid), then forced to one
    // key group and to two (attention_kernels.hpp); the general kernel last.
    struct Variant {
      const char* name;
      int key_groups;     // -1: the general kernel
      int row_warps = 0;  // with the keys split in two: 1 or 2 row warps a block, 0 the grid's
      int f32_rows = 0;   // the f32 kernel: rows a warp forced (set_attention_f32_rows), 0 its rule's
    };
    std::vector<Variant> variants{{"fused", 0}};
    if (mma) variants.insert(variants.end(), {{"1group", 1}, {"2g 1rw", 2, 1}, {"2g 2rw", 2, 2}});
    if (livefuse::cuda::attention_f32_fits(dev_args))
      variants.insert(variants.end(), {{"2 rows", 0, 0, 2}, {"4 rows", 0, 0, 4}});
    variants.push_back({"general", -1});
    for (const Variant& var : variants) {
      const bool fused = var.key_groups >= 0;
      livefuse::cuda::force_attention_key_groups(fused ? var.key_groups : 0);
      livefuse::cuda::force_attention_row_warps(var.row_warps);
      livefuse::cuda::set_attention_f32_rows(var.f32_rows);
      Buffer& out = bufs[c.out.buf];
      BENCH_CUDA(cudaMemset(out.dev, 0xff, out.host.size()));  // NaN where nothing is written
      auto launch = [&] {
        if (fused)
          livefuse::cuda::launch_attention(dev_args, nullptr);
        else
          livefuse::cuda::launch_attention_general(dev_args, nullptr);
      };
      launch();
      BENCH_CUDA(cudaDeviceSynchronize());
      std::vector<uint8_t> got(out.host.size());
      BENCH_CUDA(cudaMemcpy(got.data(), out.dev, got.size(), cudaMemcpyDeviceToHost));
      const Check k = compare(c, got, ref);
      Timing t = time_launches(launch, reps);
      t.graph_us = graph_us(
          [&](cudaStream_t s) {
            if (fused)
              livefuse::cuda::launch_attention(dev_args, s);
            else
              livefuse::cuda::launch_attention_general(dev_args, s);
          },
          std::max(20, reps / 10), stream);
      livefuse::cuda::force_attention_key_groups(0);
      livefuse::cuda::set_attention_f32_rows(0);
      const bool pass = k.bad == 0;
      all_pass = all_pass && pass;
      std::string kernel = fused && mma                                           ? "mma"
                           : fused && livefuse::cuda::attention_f32_fits(dev_args) ? "f32"
                                                                                   : "general";
      if (fused && mma) {
        livefuse::cuda::force_attention_key_groups(var.key_groups);
        const livefuse::cuda::AttentionMmaConfig mc = livefuse::cuda::attention_mma_config(dev_args);
        livefuse::cuda::force_attention_key_groups(0);
        livefuse::cuda::force_attention_row_warps(0);
        kernel += std::to_string(mc.row_warps) + "x" + std::to_string(mc.key_groups);
      }
      std::printf("%-24s %-5s %-8s %-8s %10.2f %10.2f %9.2f %11.3g %11.3g %6lld %s\n",
                  c.name.c_str(), dt.c_str(), var.name, kernel.c_str(), t.median_us, t.pipelined_us,
                  t.graph_us, k.max_abs, k.max_rel, static_cast<long long>(k.nan_rows),
                  pass ? "PASS" : ("FAIL (" + std::to_string(k.bad) + " bad)").c_str());
      records.push_back({"attention_kernel",
                         var.name,
                         c.name + "_" + dt,
                         t.median_us,
                         {{"pipelined_us", t.pipelined_us},
                          {"graph_us", t.graph_us},
                          {"tflops", flops / (t.median_us * 1e-6) / 1e12},
                          {"max_abs_err", k.max_abs},
                          {"max_rel_err", k.max_rel},
                          {"pass", pass ? 1.0 : 0.0}},
                         {{"dtype", dt}, {"kernel", kernel}}});
    }
    for (Buffer& b : bufs) BENCH_CUDA(cudaFree(b.dev));
  }
  if (!json.empty()) lfbench::write_json(json, records);
  std::printf("%s\n", all_pass ? "all PASS" : "some cases FAILED");
  return all_pass ? 0 : 1;
}
