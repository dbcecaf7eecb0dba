// Timed cuBLASLt algorithm choice (planner/gemm_tuning.hpp, kernels/cuda/gemm_lt.cpp): the
// planner's scratch runs tune the plan's GEMM shapes, the plan's own launches find them in the
// tuned table (the keys match: layouts and alignments mirrored), and results stay eager's.
// Skipped without a GPU; compiled to nothing in CPU-only builds.
#include <cmath>
#include <thread>

#include "kernels/jit/kernel_compiler.hpp"
#include "planner/gemm_tuning.hpp"
#include "planner_util.hpp"
#include "runtime/inspect_registry.hpp"
#if LIVEFUSE_HAS_CUDA
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/gemv.hpp"
#endif

using namespace plantest;

#if LIVEFUSE_HAS_CUDA
namespace {

// A BERT-like layer in small: Q/K/V over one input (merged siblings), an FFN with GELU-tanh
// (bias epilogue) and a projection back with the residual added (bias + residual epilogue).
Segment layer(int64_t m) {
  const DType dt = DType::f16;
  SegmentBuilder sb;
  const ValueRef x = sb.input({1, m, 256}, dt);
  for (int i = 0; i < 3; ++i)
    sb.output(sb.add(OpId::linear, {x, sb.input({256, 256}, dt), sb.input({256}, dt)},
                     linear_attrs(true)));
  const ValueRef up = sb.add(OpId::gelu_tanh, {sb.add(OpId::linear,
                                                     {x, sb.input({512, 256}, dt), sb.input({512}, dt)},
                                                     linear_attrs(true))});
  const ValueRef down =
      sb.add(OpId::linear, {up, sb.input({256, 512}, dt), sb.input({256}, dt)}, linear_attrs(true));
  sb.output(sb.add(OpId::add, {down, x}));
  return sb.build();
}

// LIVEFUSE_GEMM_TUNE=1 for a case (off by default: config.hpp says why); the tuned table is
// forgotten and the configuration restored at its end.
struct TuningOn {
  const Config saved = config();
  explicit TuningOn(bool gemv = true) {
    Config on = saved;
    on.gemm_tune = true;
    on.gemv = gemv;  // products of <= 8 rows: livefuse's GEMV (nothing to tune) unless off
    set_config_for_testing(on);
  }
  ~TuningOn() {
    cuda::reset_gemm_tuning();
    set_config_for_testing(saved);
  }
};

}  // namespace

LF_CUDA_TEST_CASE("gemm tuning: a plan's GEMMs are tuned off its thread and its launches use them") {
  const TuningOn tuning;
  const Device gpu = Device::cuda(0);
  const Segment seg = layer(128);
  PlannedSegment p = plan_segment(seg, default_planner_options(gpu));
  INFO(p.describe());
  CHECK(compile_plan(p, jit::KernelCompiler::global(), jit::default_compile_options()) == 0);
  cuda::reset_gemm_tuning();
  const cuda::GemmTuneCounters before = cuda::gemm_tune_counters();
  tune_plan_gemms(p, gpu);  // as the planner thread does; here on the test's thread
  const cuda::GemmTuneCounters tuned = cuda::gemm_tune_counters();
  CHECK(tuned.tuned > before.tuned);
  const std::vector<cuda::GemmTuneRecord> recs = cuda::gemm_tune_records();
  REQUIRE(!recs.empty());
  for (const cuda::GemmTuneRecord& r : recs) {
    INFO("m " << r.m << " n " << r.n << " k " << r.k << " chosen " << r.chosen);
    CHECK(r.timed >= 1);
    CHECK(r.chosen_us > 0);
    if (r.top1_us >= 0) CHECK(r.chosen_us <= r.top1_us);
    CHECK(r.split_k >= 1);
    CHECK(r.wrong == 0);  // the check against the top-1's result allows for rounding
    CHECK(r.reduction != CUBLASLT_REDUCTION_SCHEME_INPLACE);  // f16: never summed in f16
    CHECK(r.reduction != CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE);
  }

  const std::vector<Tensor> xs_cpu = random_externals(seg, 71, -1.0, 1.0);
  std::vector<Tensor> xs;
  for (const Tensor& t : xs_cpu) xs.push_back(t.to(gpu));
  const std::vector<Tensor> want = eager_values(seg, xs_cpu);
  const std::vector<Tensor> got = poisoned_values(p, xs);
  const uint64_t hits_before = cuda::gemm_tune_counters().table_hits;
  // A fresh thread has no GEMM plans of its own: each of the plan's GEMMs is a miss there, and
  // a miss whose key the scratch runs tuned takes the table's algorithm (counted).
  std::thread([&] {
    run_plan(p, got, Stream::current(gpu).handle());
    synchronize(gpu);
  }).join();
  CHECK(cuda::gemm_tune_counters().table_hits > hits_before);
  for (const ValueRef& r : seg.outputs) {
    const int v = seg.value_id(r);
    INFO("output " << v);
    CHECK(lftest::allclose(got[v].to_doubles(), want[v].to_doubles(), 2e-2, 2e-2));
  }
}

// Long dot products over few rows are where cuBLASLt offers split-K algorithms, some of which add
// the K parts in the output type. Each row of x is [u, -u] and each row of w is [v, v]: the exact
// result is 0, and a GEMM that sums in f32 and rounds once gives ~0, while bf16 parts (each a
// sum of ~1,000 products, rounded to 8 bits) leave an error near 0.1. (Fuzz seed 100059 met
// another inexact algorithm: the result check in gemm_lt.cpp tune() is what rejects that one.)
LF_CUDA_TEST_CASE("gemm tuning: a tuned bf16 GEMM over a long K still sums in f32") {
  const Device gpu = Device::cuda(0);
  // cuBLASLt at every row count (LIVEFUSE_GEMV=0), then the default: the GEMV for 1 and 4 rows.
  for (const bool gemv : {false, true})
  for (const int64_t m : {1, 4, 16}) {
    const TuningOn tuning(gemv);
    CAPTURE(gemv);
    CAPTURE(m);
    const int64_t k = 16384, half = k / 2, n = 64;
    SegmentBuilder sb;
    const ValueRef x = sb.input({m, k}, DType::bf16);
    sb.output(sb.add(OpId::linear, {x, sb.input({n, k}, DType::bf16)}, linear_attrs(false)));
    const Segment seg = sb.build();
    PlannedSegment p = plan_segment(seg, default_planner_options(gpu));
    CHECK(compile_plan(p, jit::KernelCompiler::global(), jit::default_compile_options()) == 0);
    std::vector<Tensor> xs_cpu = random_externals(seg, 7 + static_cast<uint64_t>(m), -1.0, 1.0);
    std::vector<std::vector<float>> vals;
    for (const Tensor& t : xs_cpu) {
      const std::vector<double> d = t.to_doubles();
      vals.emplace_back(d.begin(), d.end());
    }
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < half; ++c) vals[0][r * k + half + c] = -vals[0][r * k + c];
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < half; ++c) vals[1][r * k + half + c] = vals[1][r * k + c];
    std::vector<Tensor> xs;
    for (size_t i = 0; i < xs_cpu.size(); ++i)
      xs.push_back(from_floats(vals[i], xs_cpu[i].shape(), DType::bf16, gpu));
    cuda::reset_gemm_tuning();
    tune_plan_gemms(p, gpu);
    if (gemv && m <= cuda::kGemvMaxRows) CHECK(cuda::gemm_tune_counters().tuned == 0);
    else REQUIRE(cuda::gemm_tune_counters().tuned >= 1);
    const std::vector<cuda::GemmTuneRecord> recs = cuda::gemm_tune_records();
    for (const cuda::GemmTuneRecord& r : recs) {
      INFO("chosen " << r.chosen << " of " << r.offered << ", split_k " << r.split_k
                     << ", reduction " << r.reduction);
      CHECK(r.reduction != CUBLASLT_REDUCTION_SCHEME_INPLACE);
      CHECK(r.reduction != CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE);
    }
    const std::vector<Tensor> got = poisoned_values(p, xs);
    run_plan(p, got, Stream::current(gpu).handle());
    synchronize(gpu);
    const std::vector<double> out = got[seg.value_id(seg.outputs[0])].to_doubles();
    double worst = 0;
    for (double v : out) worst = std::max(worst, std::abs(v));
    INFO("largest |result| " << worst << " (exact: 0)");
    CHECK(worst < 1e-2);
  }
}

LF_CUDA_TEST_CASE("gemm tuning: LIVEFUSE_GEMM_TUNE=0 tunes nothing") {
  Config c = config();
  c.gemm_tune = false;
  const Config saved = config();
  set_config_for_testing(c);
  cuda::reset_gemm_tuning();
  PlannedSegment p = plan_segment(layer(16), default_planner_options(Device::cuda(0)));
  CHECK(compile_plan(p, jit::KernelCompiler::global(), jit::default_compile_options()) == 0);
  tune_plan_gemms(p, Device::cuda(0));
  CHECK(cuda::gemm_tune_counters().tuned == 0);
  set_config_for_testing(saved);
}
#endif

TEST_CASE("gemm tuning: a CPU plan is left alone") {
  const PlannedSegment p = plan_segment(
      [] {
        SegmentBuilder sb;
        const ValueRef x = sb.input({4, 8});
        sb.output(sb.add(OpId::linear, {x, sb.input({8, 8})}, linear_attrs(false)));
        return sb.build();
      }(),
      default_planner_options(Device::cpu()));
  const auto decisions = [] {
    std::vector<livefuse::Decision> d;
    uint64_t dropped = 0;
    livefuse::inspect_detail::copy_decisions(d, &dropped);
    return d.size() + dropped;
  };
  const size_t before = decisions();
  CHECK_NOTHROW(tune_plan_gemms(p, Device::cpu()));  // no GPU work, nothing recorded
  CHECK(decisions() == before);
}
