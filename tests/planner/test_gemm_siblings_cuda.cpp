// Merged sibling GEMMs on CUDA (planner/plan_siblings.cpp): siblings of different widths through
// cuBLASLt (BIAS epilogue over the concatenated bias) into the plan's product buffer, then one
// split kernel; siblings of one width as one strided-batched GEMM writing each output in place;
// every output as the CPU eager backend gives it.
#include "kernels/jit/kernel_compiler.hpp"
#include "planner_util.hpp"

using namespace plantest;

namespace {

const GemmStep* merged_step(const PlannedSegment& p) {
  for (const Step& s : p.steps)
    if (const auto* gs = std::get_if<GemmStep>(&s.body); gs && !gs->siblings.empty()) return gs;
  return nullptr;
}

size_t merged_siblings(const PlannedSegment& p) {
  const GemmStep* gs = merged_step(p);
  return gs ? gs->siblings.size() : 0;
}

// q, k, v over one input with grouped-query widths (`one_width`: 64 each, as in BERT); with
// `heads`, each is split into heads and attention follows (the outputs then stay inside the
// plan), else all three are observable.
Segment siblings(DType dt, bool bias, bool heads, int64_t m, bool one_width = false) {
  SegmentBuilder sb;
  const ValueRef x = sb.input({1, m, 64}, dt);
  ValueRef out[3];
  const int64_t widths[3] = {64, one_width ? 64 : 32, one_width ? 64 : 32};
  for (int i = 0; i < 3; ++i) {
    std::vector<ValueRef> in{x, sb.input({widths[i], 64}, dt)};
    if (bias) in.push_back(sb.input({widths[i]}, dt));
    out[i] = sb.add(OpId::linear, in, linear_attrs(bias));
    if (heads)
      out[i] =
          sb.add(OpId::permute, {sb.add(OpId::reshape, {out[i]}, ints({1, m, widths[i] / 16, 16}))},
                 ints({0, 2, 1, 3}));
    else
      sb.output(out[i]);
  }
  if (heads) {
    // 4 query heads over 2 KV heads: take the first two query heads (one width: 4 over 4).
    Attrs sl;
    for (int64_t v : {1, 0, 2, 1}) sl.push_int(v);
    const ValueRef q = one_width ? out[0] : sb.add(OpId::slice, {out[0]}, sl);
    const ValueRef sc =
        sb.add(OpId::matmul, {q, sb.add(OpId::permute, {out[1]}, ints({0, 1, 3, 2}))});
    sb.output(
        sb.add(OpId::matmul, {sb.add(OpId::softmax, {sc}, softmax_attrs(0.25, false)), out[2]}));
  }
  return sb.build();
}

// Where each sibling's output starts, relative to the first sibling's (bytes).
std::vector<int64_t> output_offsets(const PlannedSegment& p, const std::vector<Tensor>& values) {
  const GemmStep* gs = merged_step(p);
  const auto at = [&](int j) {
    return static_cast<const char*>(values[p.segment.value_id(ValueRef::of(j))].impl()->data());
  };
  std::vector<int64_t> out;
  for (int j : gs->siblings) out.push_back(at(j) - at(gs->siblings[0]));
  return out;
}

void check_cuda(const Segment& seg, double tol) {
  const Device gpu = Device::cuda(0);
  // The merged GEMM and its split are what is checked here against eager; the attention after
  // them stays eager's (the fused attention keeps the scores in f32 where eager rounds them:
  // its own suite, test_attention_gpu.cpp, checks it).
  PlannerOptions opts = default_planner_options(gpu);
  opts.attention = false;
  PlannedSegment p = plan_segment(seg, opts);
  INFO(p.describe());
  CHECK(compile_plan(p, jit::KernelCompiler::global(), jit::default_compile_options()) == 0);
  CHECK(merged_siblings(p) == 3);
  const std::vector<Tensor> xs_cpu = random_externals(seg, 61);
  std::vector<Tensor> xs;
  for (const Tensor& t : xs_cpu) xs.push_back(t.to(gpu));
  const std::vector<Tensor> want = eager_values(seg, xs_cpu);
  const std::vector<Tensor> got = poisoned_values(p, xs);
  for (int run = 0; run < 2; ++run) {
    run_plan(p, got, Stream::current(gpu).handle());
    synchronize(gpu);
    if (run == 0) {
      // One width: the outputs were given one run of storages, evenly spaced (the batched GEMM
      // needs that); other widths (the split, or the GEMV over few rows) a buffer each.
      const std::vector<int64_t> off = output_offsets(p, got);
      INFO("offsets " << off[1] << " " << off[2]);
      if (!planner::detail::sibling_output_runs(p).empty()) CHECK((off[1] > 0 && off[2] == 2 * off[1]));
    }
    for (const ValueRef& r : seg.outputs) {
      const int v = seg.value_id(r);
      INFO("run " << run << " output " << v);
      CHECK(got[v].is_contiguous());
      CHECK(lftest::allclose(got[v].to_doubles(), want[v].to_doubles(), tol, tol));
    }
  }
}

}  // namespace

LF_CUDA_TEST_CASE(
    "gemm siblings cuda: merged Q/K/V equal eager for f32/f16/bf16, with and without bias") {
  for (const DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const bool bias : {true, false})
      for (const bool heads : {false, true})
        for (const int64_t m : {1, 7, 300}) {
          INFO(dtype_name(dt) << " bias " << bias << " heads " << heads << " m " << m);
          check_cuda(siblings(dt, bias, heads, m), dt == DType::f32 ? 2e-3 : tol_for(dt) * 4);
        }
}

LF_CUDA_TEST_CASE("gemm siblings cuda: f32 Q/K/V on the tensor-core GEMM (LIVEFUSE_GEMM_F32X3) equal eager") {
  const lftest::ScopedConfig f32_on(&livefuse::Config::gemm_f32x3, true);
  for (const bool bias : {true, false})
    for (const bool heads : {false, true})
      for (const int64_t m : {7, 300}) {  // the GEMV, the tensor-core GEMM
        INFO("bias " << bias << " heads " << heads << " m " << m);
        check_cuda(siblings(DType::f32, bias, heads, m, true), 2e-3);
      }
}

LF_CUDA_TEST_CASE(
    "gemm siblings cuda: Q/K/V of one width as one strided-batched GEMM (f32: one product and its "
    "split) equal eager for "
    "f32/f16/bf16, with and without bias") {
  for (const DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const bool bias : {true, false})
      for (const bool heads : {false, true})
        for (const int64_t m : {7, 300}) {  // the GEMV (1 row: the case above), cuBLASLt batched
          INFO(dtype_name(dt) << " bias " << bias << " heads " << heads << " m " << m);
          check_cuda(siblings(dt, bias, heads, m, true), dt == DType::f32 ? 2e-3 : tol_for(dt) * 4);
        }
}

TEST_CASE(
    "gemm siblings: planned for CUDA, the merged GEMM and its split are two launches for three "
    "linears") {
  const Segment seg = siblings(DType::f16, true, false, 16);
  const PlannedSegment p = plan_segment(seg, default_planner_options(Device::cuda(0)));
  PlannerOptions off = default_planner_options(Device::cuda(0));
  off.gemm_siblings = false;
  const PlannedSegment before = plan_segment(seg, off);
  CHECK(p.num_kernels() == 2);
  CHECK(before.num_kernels() == 3);
}

TEST_CASE(
    "gemm siblings: planned for CUDA, siblings of one width are one launch (no split) at any "
    "size") {
  for (const int64_t m : {16, 4096}) {
    const Segment seg = siblings(DType::f16, true, false, m, true);
    const PlannedSegment p = plan_segment(seg, default_planner_options(Device::cuda(0)));
    INFO("m " << m << "\n" << p.describe());
    CHECK(merged_siblings(p) == 3);
    CHECK(p.num_kernels() == 1);
    REQUIRE(merged_step(p));
    CHECK_FALSE(merged_step(p)->split_kernel);
  }
}

TEST_CASE("gemm siblings: planned for CUDA, f32 siblings of one width are one GEMM and a split") {
  // cuBLASLt's strided-batched f32 GEMM is the slow one (strategy_gemm.cpp, splits).
  const Segment seg = siblings(DType::f32, true, false, 128, true);
  const PlannedSegment p = plan_segment(seg, default_planner_options(Device::cuda(0)));
  INFO(p.describe());
  CHECK(merged_siblings(p) == 3);
  CHECK(p.num_kernels() == 2);
  REQUIRE(merged_step(p));
  CHECK(merged_step(p)->split_kernel);
  CHECK(planner::detail::sibling_output_runs(p).empty());
}

TEST_CASE("gemm siblings: planned for CUDA with LIVEFUSE_GEMM_F32X3, f32 siblings of one width are one launch") {
  // livefuse's tensor-core GEMM (three TF32 products) writes each sibling's dense output: no
  // split -- where its shape rules hold (K in steps of 32, columns in tiles of 64).
  PlannerOptions o = default_planner_options(Device::cuda(0));
  o.gemm_f32x3 = true;
  const PlannedSegment p = plan_segment(siblings(DType::f32, true, false, 128, true), o);
  INFO(p.describe());
  CHECK(merged_siblings(p) == 3);
  CHECK(p.num_kernels() == 1);
  REQUIRE(merged_step(p));
  CHECK_FALSE(merged_step(p)->split_kernel);
  CHECK(planner::detail::sibling_output_runs(p).size() == 1);
  // K of 48: not the kernel's; the wide GEMM and the split, as without the switch.
  SegmentBuilder sb;
  const ValueRef x = sb.input({1, 128, 48}, DType::f32);
  for (int i = 0; i < 3; ++i) sb.output(sb.add(OpId::linear, {x, sb.input({64, 48}, DType::f32)}, linear_attrs(false)));
  const PlannedSegment odd = plan_segment(sb.build(), o);
  REQUIRE(merged_step(odd));
  CHECK(merged_step(odd)->split_kernel);
}

TEST_CASE(
    "gemm siblings: planned for CUDA, only outputs of one width are allocated back to back") {
  // Few rows run as the GEMV (no split) at any widths; a run of storages is sized by its first
  // output, so grouped-query widths with a narrow first sibling must not get one (the wider
  // outputs after it would overrun their storage).
  SegmentBuilder sb;
  const ValueRef x = sb.input({1, 64}, DType::f16);
  for (int64_t n : {16, 64, 64})
    sb.output(sb.add(OpId::linear, {x, sb.input({n, 64}, DType::f16)}, linear_attrs(false)));
  const PlannedSegment gqa = plan_segment(sb.build(), default_planner_options(Device::cuda(0)));
  INFO(gqa.describe());
  REQUIRE(merged_step(gqa));
  CHECK_FALSE(merged_step(gqa)->split_kernel);
  CHECK(planner::detail::sibling_output_runs(gqa).empty());
  const PlannedSegment one = plan_segment(siblings(DType::f16, true, false, 1, true),
                                          default_planner_options(Device::cuda(0)));
  const auto runs = planner::detail::sibling_output_runs(one);
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].size() == 3);
}

TEST_CASE("gemm siblings: the grouped-query segments of the CUDA cases, on the CPU") {
  // The merge alone, held to 1e-5: the attention step after it (its online softmax sums in
  // another order; tests/planner/test_attention_cpu.cpp) moved f32 values by 4e-5 under ASan.
  PlannerOptions no_attention = default_planner_options(Device::cpu());
  no_attention.attention = false;
  for (const bool heads : {false, true})
    for (const int64_t m : {1, 7}) {
      const PlannedSegment p = check_against_eager(siblings(DType::f32, true, heads, m), 63, 1e-5,
                                                   1e-5, &no_attention);
      CHECK(merged_siblings(p) == 3);
    }
}

TEST_CASE(
    "gemm siblings: planned for CUDA, a merge whose split costs more than it saves is undone") {
  // Prefill-sized grouped-query Q/K/V, all observable: the split would write and read
  // 24 + 2 x 12 MiB more. (Of one width they would run as one batched GEMM: no split.)
  SegmentBuilder sb;
  const ValueRef x = sb.input({16384, 768}, DType::f16);
  for (int64_t n : {768, 384, 384})
    sb.output(sb.add(OpId::linear,
                     {x, sb.input({n, 768}, DType::f16), sb.input({n}, DType::f16)},
                     linear_attrs(true)));
  const Segment seg = sb.build();
  const PlannedSegment cuda = plan_segment(seg, default_planner_options(Device::cuda(0)));
  CHECK(merged_siblings(cuda) == 0);
  CHECK(cuda.num_kernels() == 3);
  bool said = false;
  for (const Decision& d : cuda.decisions)
    said |= d.reason.find("costs more than it saves") != std::string::npos;
  CHECK(said);
  // The CPU GEMM stores the columns in place: merged there.
  CHECK(merged_siblings(plan_segment(seg, default_planner_options(Device::cpu()))) == 3);
}
