// livefuse-bench-fusion: what fusion buys.
//   cpu_fused_chain   a 10-op pointwise chain on 16M f32 elements: the tiled interpreter running
//                     the fused kernel against eager CPU ops (which write and re-read every
//                     intermediate); field `speedup`.
//   copy_bw           device-to-device copy (read + write bytes / s): the bandwidth reference.
//   fused_chain_bw    the same chain on 64M f32 elements as one generated kernel on the GPU;
//                     `fraction_of_copy_bw`, and `speedup` over the eager GPU chain.
//   fused_layer_norm / fused_softmax   row kernels at large sizes, bandwidth and fraction of a
//                     copy of the same bytes (`fraction_of_64m_f32_copy`: of copy_bw's copy).
//   fused_softmax_mask / fused_rms_norm   the same for a masked softmax and rms_norm.
//   nvrtc_compile     compile time per generated kernel (12 distinct kernels, 8 pointwise and 4
//                     layer_norm rows with a pointwise epilogue, no cache) through the default
//                     route (LIVEFUSE_JIT: pointwise kernels linked from the op library, rows
//                     compiled by NVRTC), each compiled alone (one program each) in 3 passes after
//                     the route's one-time costs (`nvrtc_init_ms`, NVRTC's first use, and
//                     `lto_library_ms`, the op library's compile: paid once per process, as the
//                     compile service pays them before its first kernel): `median_ms` is the median
//                     over kernels of each kernel's median pass (`first_pass_median_ms`: of the
//                     first pass alone), `pointwise_median_ms` / `row_median_ms` by kind,
//                     `mean_ms`, `max_ms`; every kernel through NVRTC (LIVEFUSE_JIT=nvrtc):
//                     `nvrtc_median_ms`; linked where the IR renderer covers it: `lto_median_ms`;
//                     at NVRTC's full optimisation (LIVEFUSE_FAST_COMPILE=0), one pass:
//                     `full_opt_median_ms`;
//                     the same kernels submitted together, as the planner submits a plan's
//                     kernels (one program per up to 16 kernels): `batched_ms_per_kernel` (wall
//                     time / kernels; NVRTC alone: `nvrtc_batched_ms_per_kernel`);
//                     `empty_kernel_ms`, an empty kernel's, is NVRTC's fixed cost per program.
//                     NVRTC needs no GPU: --nvrtc-only runs just this (CUDA build, any machine).
// Usage: livefuse-bench-fusion [--device cpu|cuda|all] [--json PATH] [--quick] [--nvrtc-only]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_record.hpp"
#include "kernels/jit/cuda_launch.hpp"
#include "kernels/jit/kernel_compiler.hpp"
#include "kernels/jit/lto_compiler.hpp"
#include "kernels/jit/render.hpp"
#include "livefuse/livefuse.hpp"
#include "planner/planner.hpp"
#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;
using namespace livefuse;
using namespace livefuse::planner;

using lfbench::median;
using lfbench::Record;
using lfbench::write_json;

void print_record(const Record& r) {
  std::printf("%-18s %-26s %-16s %12.1f us", r.name.c_str(), r.variant.c_str(), r.size.c_str(), r.median_us);
  for (const auto& [k, v] : r.derived) std::printf("  %s=%.4g", k.c_str(), v);
  std::printf("\n");
  std::fflush(stdout);
}

// The benchmark chain: 10 cheap pointwise ops over x, y -- the memory-bound case fusion is
// for (a transcendental would measure libm on the CPU, the same in both paths).
Segment chain_segment(int64_t n) {
  SegmentBuilder b;
  const ValueRef x = b.input({n}), y = b.input({n});
  ValueRef v = b.add(OpId::add, {x, y});
  v = b.scalar_op(OpId::mul, v, 1.5);
  v = b.add(OpId::sub, {v, y});
  v = b.add(OpId::relu, {v});
  v = b.add(OpId::mul, {v, x});
  v = b.scalar_op(OpId::add, v, 0.5);
  v = b.add(OpId::maximum, {v, y});
  v = b.scalar_op(OpId::mul, v, 0.75);
  v = b.add(OpId::sub, {v, x});
  v = b.scalar_op(OpId::minimum, v, 4.0);
  b.output(v);
  return b.build();
}

Tensor eager_chain(const Tensor& x, const Tensor& y) {
  Tensor v = lf::add(x, y);
  v = lf::mul(v, 1.5);
  v = lf::sub(v, y);
  v = lf::relu(v);
  v = lf::mul(v, x);
  v = lf::add(v, 0.5);
  v = lf::maximum(v, y);
  v = lf::mul(v, 0.75);
  v = lf::sub(v, x);
  return lf::minimum(v, 4.0);
}

double time_host_us(int reps, const std::function<void()>& fn) {
  fn();  // warm-up (pool, caches)
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return median(t);
}

void bench_cpu(std::vector<Record>& out, bool quick) {
  const int64_t n = quick ? (int64_t{1} << 22) : (int64_t{16} << 20);
  const Segment seg = chain_segment(n);
  const PlannedSegment p = plan_segment(seg, default_planner_options(Device::cpu()));
  const Tensor x = rand_uniform({n}, 1, -1, 1, DType::f32, Device::cpu());
  const Tensor y = rand_uniform({n}, 2, -1, 1, DType::f32, Device::cpu());
  std::vector<Tensor> values = bind_values(p, {x, y});
  const int reps = quick ? 3 : 7;
  const double fused = time_host_us(reps, [&] { run_plan(p, values); });
  const double eager = time_host_us(reps, [&] { (void)eager_chain(x, y); });
  // Same numbers from both paths (a benchmark of a wrong kernel is worth nothing).
  const auto a = values[seg.value_id(seg.outputs[0])].to_floats();
  const auto e = eager_chain(x, y).to_floats();
  double maxdiff = 0;
  for (size_t i = 0; i < a.size(); i += 997) maxdiff = std::max(maxdiff, static_cast<double>(std::abs(a[i] - e[i])));
  Record r{"cpu_fused_chain", "10 ops f32, " + std::to_string(p.num_kernels()) + " kernel", std::to_string(n), fused, {}};
  r.derived = {{"eager_us", eager}, {"speedup", eager / fused}, {"max_abs_diff", maxdiff},
               {"fused_gbs", 3.0 * n * 4 / fused / 1e3}};
  print_record(r);
  out.push_back(r);
}

void bench_nvrtc(std::vector<Record>& out, bool quick) {
  if (!jit::nvrtc_available()) return;
  jit::CompileOptions o = jit::default_compile_options();
  // Distinct kernels, no cache: pointwise chains of gelus and products, every third one a
  // layer_norm row with that chain as its epilogue.
  std::vector<std::shared_ptr<const jit::KernelSpec>> specs;
  std::vector<bool> is_row;
  const int count = quick ? 4 : 12;
  for (int k = 0; k < count; ++k) {
    SegmentBuilder b;
    const ValueRef x = b.input({64, 512}), w = b.input({512});
    ValueRef v = b.scalar_op(OpId::add, x, 0.01 * k);  // a distinct kernel each time
    if (k % 3 == 2) {
      Attrs a;
      a.push_float(1e-5);
      a.push_int(1);
      a.push_int(0);
      v = b.add(OpId::layer_norm, {v, w}, a);
    }
    for (int i = 0; i < 4 + k % 4; ++i) v = b.add(i % 2 ? OpId::gelu : OpId::mul, i % 2 ? std::vector<ValueRef>{v} : std::vector<ValueRef>{v, x});
    b.output(v);
    const PlannedSegment p = plan_segment(b.build(), default_planner_options(Device::cuda(0)));
    for (const Step& s : p.steps)
      if (const auto* fk = std::get_if<FusedKernelStep>(&s.body)) {
        specs.push_back(fk->spec);
        is_row.push_back(k % 3 == 2);
      }
  }
  // One-time costs, paid before any kernel's time (the compile service pays them before its
  // first kernel): NVRTC's first use in a process (its libraries load and its statics are
  // built), and the op library the linked route calls (both exp flavours are used below).
  const double init_ms = jit::nvrtc_compile("extern \"C\" __global__ void lf_init() {}\n", "lf_init", o).compile_ms;
  jit::CompileOptions nvrtc_only = o, linked = o;
  nvrtc_only.lto = false;
  linked.lto = true;
  const bool can_link = jit::lto_available();
  const bool default_links = o.lto && can_link;  // else the default route is NVRTC alone
  const double lto_library_ms = can_link ? jit::lto_library(linked, false).ms + jit::lto_library(linked, true).ms : 0;
  // Each kernel alone (one program each, as a plan of one kernel compiles), in passes of fresh
  // compilers (no cache): a kernel's median pass is its time, so one slow moment of a shared
  // host does not stand for the kernel. Then all of them submitted together (as compile_plan
  // submits a plan's kernels: programs of up to kMaxProgramKernels kernels).
  auto alone_pass = [&](const jit::CompileOptions& opts) {
    std::vector<double> ms;  // per spec; -1: failed
    jit::KernelCompiler compiler(1, "");
    for (const auto& spec : specs) {
      const jit::CompileResult r = compiler.compile(spec, opts);
      ms.push_back(r.ok() ? r.kernel->compile_ms : -1);
      if (!r.ok()) std::fprintf(stderr, "[bench] compile failed: %s\n%s\n", r.error.c_str(), r.log.c_str());
    }
    return ms;
  };
  auto compiled = [](const std::vector<double>& ms) {
    std::vector<double> ok;
    for (double m : ms)
      if (m >= 0) ok.push_back(m);
    return ok;
  };
  const int passes = quick ? 1 : 3;
  auto passes_of = [&](const jit::CompileOptions& opts) {
    std::vector<std::vector<double>> runs;
    for (int p = 0; p < passes; ++p) runs.push_back(alone_pass(opts));
    return runs;
  };
  // Each kernel's median pass (-1: never compiled); median_of takes the median of those over
  // every kernel or one kind.
  auto per_kernel_medians = [&](const std::vector<std::vector<double>>& runs) {
    std::vector<double> med(specs.size(), -1);
    for (size_t k = 0; !runs.empty() && k < specs.size(); ++k) {
      std::vector<double> per;
      for (const auto& run : runs) per.push_back(run[k]);
      const std::vector<double> ok = compiled(per);
      if (!ok.empty()) med[k] = median(ok);
    }
    return med;
  };
  auto median_of = [&](const std::vector<double>& per_kernel, int kind) {  // kind: -1 all, 0 pointwise, 1 row
    std::vector<double> m;
    for (size_t k = 0; k < per_kernel.size(); ++k)
      if (per_kernel[k] >= 0 && (kind < 0 || is_row[k] == (kind == 1))) m.push_back(per_kernel[k]);
    return m.empty() ? 0.0 : median(m);
  };
  const std::vector<std::vector<double>> runs = passes_of(o);
  const std::vector<double> alone = per_kernel_medians(runs);
  const std::vector<double> nvrtc_alone = default_links ? per_kernel_medians(passes_of(nvrtc_only)) : alone;
  const std::vector<double> lto_alone = !can_link ? std::vector<double>{} : default_links ? alone : per_kernel_medians(passes_of(linked));
  jit::CompileOptions full = nvrtc_only;
  full.fast_compile = false;
  const std::vector<double> full_pass = alone_pass(full);
  // All of them submitted at once: wall time per kernel, and the programs (or links) it took.
  struct Batch {
    double ms_per_kernel = 0;
    int programs = 0;
  };
  auto batch = [&](const jit::CompileOptions& opts) {
    jit::KernelCompiler compiler(config().compile_threads, "");  // the planner's compiler has as many
    size_t done = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& f : compiler.submit_batch(specs, opts))
      if (f.get().ok()) ++done;
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return Batch{done == 0 ? 0.0 : ms / static_cast<double>(done), static_cast<int>(compiler.stats().programs)};
  };
  const Batch batched = batch(o);
  const double nvrtc_batched_ms = default_links ? batch(nvrtc_only).ms_per_kernel : batched.ms_per_kernel;
  // The floor: an empty kernel with the same options, NVRTC's fixed cost per program. Only the
  // part above it depends on what livefuse generates.
  std::vector<double> empty;
  for (int i = 0; i < 5; ++i) {
    const jit::NvrtcOutput e = jit::nvrtc_compile("extern \"C\" __global__ void lf_empty() {}\n", "lf_empty", o);
    if (e.ok) empty.push_back(e.compile_ms);
  }
  auto print_ms = [&](const char* what, const std::vector<double>& ms) {
    std::fprintf(stderr, "[bench] %s, ms per kernel (r: row):", what);
    for (size_t k = 0; k < ms.size(); ++k) std::fprintf(stderr, " %s%.1f", is_row[k] ? "r" : "", ms[k]);
    std::fprintf(stderr, "\n");
  };
  std::fprintf(stderr, "[bench] default route (%s), ms per kernel alone, pass by pass:", default_links ? "lto" : "nvrtc");
  for (size_t k = 0; k < specs.size(); ++k) {
    std::fprintf(stderr, " %s", is_row[k] ? "r" : "");
    for (size_t p = 0; p < runs.size(); ++p) std::fprintf(stderr, "%s%.1f", p ? "/" : "", runs[p][k]);
  }
  std::fprintf(stderr, "\n[bench] %zu kernels submitted together: %d programs, %.1f ms a kernel\n", specs.size(),
               batched.programs, batched.ms_per_kernel);
  print_ms("NVRTC alone (LIVEFUSE_JIT=nvrtc)", nvrtc_alone);
  if (!lto_alone.empty()) print_ms("linked from the op library where covered (LIVEFUSE_JIT=lto)", lto_alone);
  const std::vector<double> alone_ok = compiled(alone);
  double alone_sum = 0, alone_max = 0;
  for (double m : alone_ok) alone_sum += m, alone_max = std::max(alone_max, m);
  const size_t n_ok = alone_ok.size();
  const double median_ms = median_of(alone, -1);
  Record r{"nvrtc_compile", "sm_" + std::to_string(o.arch), std::to_string(n_ok) + " kernels", median_ms * 1e3, {}};
  r.derived = {{"median_ms", median_ms},
               {"first_pass_median_ms", median(compiled(runs[0]))},
               {"pointwise_median_ms", median_of(alone, 0)},
               {"row_median_ms", median_of(alone, 1)},
               {"linked", default_links ? 1.0 : 0.0},
               {"nvrtc_median_ms", median_of(nvrtc_alone, -1)},
               {"lto_median_ms", median_of(lto_alone, -1)},
               {"full_opt_median_ms", median(compiled(full_pass))},
               {"lto_library_ms", lto_library_ms},
               {"nvrtc_init_ms", init_ms},
               {"max_ms", alone_max},
               {"mean_ms", n_ok == 0 ? 0 : alone_sum / n_ok},
               {"batched_programs", static_cast<double>(batched.programs)},
               {"batched_ms_per_kernel", batched.ms_per_kernel},
               {"nvrtc_batched_ms_per_kernel", nvrtc_batched_ms},
               {"empty_kernel_ms", median(empty)}};
  print_record(r);
  out.push_back(r);
}

#if LIVEFUSE_HAS_CUDA
// Device time per call of fn (CUDA events around batches), median over reps.
double device_us(cudaStream_t s, int reps, int batch, const std::function<void()>& fn) {
  fn();
  cudaStreamSynchronize(s);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a, s);
    for (int i = 0; i < batch; ++i) fn();
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms * 1e3 / batch);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

// Device-to-device copy of the first `bytes` of `src`, counted read + write: GB/s, and the
// time per copy in *us. The bandwidth reference every fraction is taken against.
double copy_gbs(cudaStream_t s, int reps, const Tensor& src, size_t bytes, double* us = nullptr) {
  const Tensor dst = empty({static_cast<int64_t>(bytes / 4)}, DType::f32, src.device());
  void* d = dst.data_ptr();
  const void* from = src.data_ptr();
  const double t = device_us(s, reps, 5, [&] { cudaMemcpyAsync(d, from, bytes, cudaMemcpyDeviceToDevice, s); });
  if (us) *us = t;
  return 2.0 * static_cast<double>(bytes) / t / 1e3;
}

struct GpuPlan {
  PlannedSegment plan;
  std::vector<Tensor> values;
};

GpuPlan gpu_plan(const Segment& seg, const std::vector<Tensor>& xs) {
  GpuPlan g{plan_segment(seg, default_planner_options(Device::cuda(0))), {}};
  const int failed = compile_plan(g.plan, jit::KernelCompiler::global(), jit::default_compile_options());
  if (failed) std::fprintf(stderr, "[bench] %d kernels failed to compile:\n%s", failed, g.plan.describe().c_str());
  g.values = bind_values(g.plan, xs);
  return g;
}

void bench_gpu(std::vector<Record>& out, bool quick) {
  const Device dev = Device::cuda(0);
  cudaStream_t s = static_cast<cudaStream_t>(Stream::current(dev).handle());
  const int reps = quick ? 3 : 9;
  // Copy bandwidth reference (read + write).
  const int64_t n = quick ? (int64_t{16} << 20) : (int64_t{64} << 20);
  const Tensor x = rand_uniform({n}, 1, -1, 1, DType::f32, dev);
  const Tensor y = rand_uniform({n}, 2, -1, 1, DType::f32, dev);
  double copy_us = 0;
  const double copy_bw = copy_gbs(s, reps, x, static_cast<size_t>(n) * 4, &copy_us);
  out.push_back(Record{"copy_bw", "d2d f32", std::to_string(n), copy_us, {{"gbs", copy_bw}}});
  print_record(out.back());

  {  // the 10-op chain
    GpuPlan g = gpu_plan(chain_segment(n), {x, y});
    const double fused = device_us(s, reps, 5, [&] { run_plan(g.plan, g.values, s); });
    const double eager = device_us(s, reps, 2, [&] { (void)eager_chain(x, y); });
    const double gbs = 3.0 * n * 4 / fused / 1e3;
    Record r{"fused_chain_bw", "10 ops f32, " + std::to_string(g.plan.num_kernels()) + " kernel", std::to_string(n), fused, {}};
    r.derived = {{"gbs", gbs}, {"fraction_of_copy_bw", gbs / copy_bw}, {"eager_us", eager}, {"speedup", eager / fused}};
    print_record(r);
    out.push_back(r);
  }
  // Gelu-heavy chains (ALU-bound in f16), the expensive functions inline (the default) and out
  // of line (set_outline_heavy_ops): what out-of-lining costs at run time against what it saves
  // in NVRTC time.
  for (DType dt : {DType::f32, DType::f16}) {
    const Tensor gx = rand_uniform({n}, 7, -3, 3, dt, dev);
    std::vector<float> inline_out;
    for (bool outline : {false, true}) {
      jit::set_outline_heavy_ops(outline);
      SegmentBuilder b;
      const ValueRef in = b.input({n}, dt);
      ValueRef v = b.add(OpId::gelu, {b.scalar_op(OpId::mul, in, 1.5)});
      v = b.add(OpId::gelu, {b.add(OpId::mul, {v, in})});
      b.output(v);
      GpuPlan g = gpu_plan(b.build(), {gx});
      double compile_ms = 0;
      for (const Step& st : g.plan.steps)
        if (const auto* fk = std::get_if<FusedKernelStep>(&st.body); fk && fk->compiled) compile_ms += fk->compiled->compile_ms;
      const double us = device_us(s, reps, 5, [&] { run_plan(g.plan, g.values, s); });
      const double gbs = 2.0 * n * static_cast<double>(dtype_size(dt)) / us / 1e3;
      const auto got = g.values[g.plan.segment.value_id(g.plan.segment.outputs[0])].to_floats();
      double diff = 0;
      if (outline)
        for (size_t i = 0; i < got.size(); i += 997) diff = std::max(diff, static_cast<double>(std::abs(got[i] - inline_out[i])));
      else
        inline_out = got;
      Record r{"fused_gelu_chain", std::string(dtype_name(dt)) + (outline ? " out of line" : " inline"), std::to_string(n), us, {}};
      r.derived = {{"gbs", gbs}, {"fraction_of_copy_bw", gbs / copy_bw}, {"compile_ms", compile_ms}, {"max_diff_vs_inline", diff}};
      print_record(r);
      out.push_back(r);
    }
    jit::set_outline_heavy_ops(false);
  }
  struct RowCase {
    const char* name;
    int64_t rows, cols;
    DType dt;
  };
  const std::vector<RowCase> cases = {
      {"fused_layer_norm", 65536, 1024, DType::f32},  {"fused_layer_norm", 16384, 4096, DType::f32},
      {"fused_layer_norm", 65536, 1024, DType::bf16}, {"fused_layer_norm", 16384, 4096, DType::bf16},
      {"fused_layer_norm", 131072, 768, DType::f16},  {"fused_softmax", 65536, 1024, DType::f32},
      {"fused_softmax", 8192, 8192, DType::f32},      {"fused_softmax", 65536, 1024, DType::f16},
      {"fused_softmax_mask", 131072, 512, DType::f16}, {"fused_rms_norm", 65536, 1024, DType::bf16}};
  for (const RowCase& c : cases) {
    const int64_t rows = quick ? c.rows / 4 : c.rows;
    const std::string name = c.name;
    const bool softmax = name.starts_with("fused_softmax");
    std::vector<Tensor> xs = {rand_uniform({rows, c.cols}, 3, -2, 2, c.dt, dev)};
    // The case's segment; the first call also creates its extra inputs.
    auto make_segment = [&](bool add_inputs) {
      SegmentBuilder b;
      const ValueRef xi = b.input({rows, c.cols}, c.dt);
      Attrs a;
      a.push_float(softmax ? 0.125 : 1e-5);
      if (softmax) {
        const bool mask = name == "fused_softmax_mask";
        a.push_int(mask ? 1 : 0);
        if (mask) {
          if (add_inputs) xs.push_back(rand_uniform({1, c.cols}, 6, -1, 0, c.dt, dev));
          b.output(b.add(OpId::softmax, {xi, b.input({1, c.cols}, c.dt)}, a));
        } else {
          b.output(b.add(OpId::softmax, {xi}, a));
        }
      } else if (name == "fused_rms_norm") {
        const ValueRef w = b.input({c.cols}, c.dt);
        if (add_inputs) xs.push_back(rand_uniform({c.cols}, 4, 0.5, 1.5, c.dt, dev));
        a.push_int(1);
        a.push_int(0);
        b.output(b.add(OpId::rms_norm, {xi, w}, a));
      } else {
        const ValueRef w = b.input({c.cols}, c.dt), bb = b.input({c.cols}, c.dt);
        if (add_inputs) {
          xs.push_back(rand_uniform({c.cols}, 4, 0.5, 1.5, c.dt, dev));
          xs.push_back(rand_uniform({c.cols}, 5, -0.5, 0.5, c.dt, dev));
        }
        a.push_int(1);
        a.push_int(1);
        b.output(b.add(OpId::layer_norm, {xi, w, bb}, a));
      }
      return b.build();
    };
    GpuPlan g = gpu_plan(make_segment(true), xs);
    // The registers a thread may hold decide how many columns it owns (so threads per row);
    // pipelined kernels read the next row while finishing this one. The record is the built-in
    // choice; the sweep shows what the best choice would give.
    const double chosen = device_us(s, reps, 5, [&] { run_plan(g.plan, g.values, s); });
    double best = 1e30;
    int best_budget = 0, best_pipeline = 0;
    for (int budget : {16, 32, 64}) {
      for (int pipeline : {0, 1}) {
        jit::set_row_reg_budget(budget);
        jit::set_row_pipeline(pipeline);
        GpuPlan gb = gpu_plan(make_segment(false), xs);
        jit::set_row_reg_budget(0);
        jit::set_row_pipeline(-1);
        const double us = device_us(s, reps, 5, [&] { run_plan(gb.plan, gb.values, s); });
        std::printf("  %s %s %lldx%lld reg budget %d pipelined %d: %.1f us\n", c.name,
                    std::string(dtype_name(c.dt)).c_str(), static_cast<long long>(rows),
                    static_cast<long long>(c.cols), budget, pipeline, us);
        if (us < best) {
          best = us;
          best_budget = budget;
          best_pipeline = pipeline;
        }
      }
    }
    // The body the launch shape kept after timing both at its first launches (row_tuner.hpp).
    jit::CompiledKernel::RowBodyChoice tuned;
    for (const Step& st : g.plan.steps)
      if (const auto* fk = std::get_if<FusedKernelStep>(&st.body); fk && fk->compiled)
        for (const auto& rc : fk->compiled->row_body_choices()) tuned = rc;
    const double bytes = 2.0 * rows * c.cols * dtype_size(c.dt);
    const double gbs = bytes / chosen / 1e3;
    // The reference is a copy of the same bytes as the row tensor (as the eager bench does): a
    // copy's bandwidth depends on its size (a 128 MB copy runs below a 256 MB one on the H200),
    // and a 2-byte case moves half the chain's bytes. The fraction of the big f32 copy is kept.
    const double same_gbs = copy_gbs(s, reps, xs[0], static_cast<size_t>(rows * c.cols) * dtype_size(c.dt));
    Record r{c.name, std::string(dtype_name(c.dt)), std::to_string(rows) + "x" + std::to_string(c.cols), chosen, {}};
    r.derived = {{"gbs", gbs}, {"fraction_of_copy_bw", gbs / same_gbs}, {"copy_gbs", same_gbs},
                 {"fraction_of_64m_f32_copy", gbs / copy_bw},
                 {"best_swept_fraction", bytes / best / 1e3 / same_gbs},
                 {"best_reg_budget", static_cast<double>(best_budget)},
                 {"best_pipelined", static_cast<double>(best_pipeline)},
                 {"tuned_decided", tuned.decided ? 1.0 : 0.0}, {"tuned_pipelined", tuned.pipelined ? 1.0 : 0.0},
                 {"tuned_guess_pipelined", tuned.guess ? 1.0 : 0.0}, {"tuned_plain_us", tuned.plain_us},
                 {"tuned_pipelined_us", tuned.pipelined_us}};
    print_record(r);
    out.push_back(r);
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  std::string json, device = "all";
  bool quick = false, nvrtc_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!std::strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--nvrtc-only")) nvrtc_only = true;
    else {
      std::fprintf(stderr, "usage: %s [--device cpu|cuda|all] [--json PATH] [--quick] [--nvrtc-only]\n", argv[0]);
      return 2;
    }
  }
  std::vector<Record> recs;
  try {
    if (nvrtc_only) {
      if (!jit::nvrtc_available()) std::fprintf(stderr, "livefuse-bench-fusion: built without CUDA: no NVRTC\n");
      bench_nvrtc(recs, quick);
      if (!json.empty()) write_json(json, recs);
      return 0;
    }
    if (device == "cpu" || device == "all") bench_cpu(recs, quick);
    if (device != "cpu") bench_nvrtc(recs, quick);
#if LIVEFUSE_HAS_CUDA
    if ((device == "cuda" || device == "all") && cuda_available()) bench_gpu(recs, quick);
#endif
    if (!json.empty()) write_json(json, recs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "livefuse-bench-fusion: %s\n", e.what());
    return 1;
  }
  return 0;
}
