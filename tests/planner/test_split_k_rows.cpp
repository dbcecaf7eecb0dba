// Pass split_k_rows (planner/split_k_rows.hpp): a linear that cuBLASLt would split over K writes
// its f32 partial products and the row kernel that alone reads it adds them up with the bias.
// On the CPU: the rewritten row program (through the interpreter) against the original one fed
// the partials' rounded sum, and the pass's choices; on CUDA: the plan against eager execution.
#include <cstring>

#include "kernels/jit/cpu_interp.hpp"
#include "kernels/jit/kernel_compiler.hpp"
#include "kernels/jit/render.hpp"
#include "kernels/jit/tensor_arg.hpp"
#include "planner/split_k_rows.hpp"
#include "tests/planner/planner_util.hpp"

using namespace plantest;

namespace {

// y (the product) + a residual -> layer_norm, with the row kernel's program and operands.
struct RowCase {
  Segment seg;
  PlannedSegment plan;
  const FusedKernelStep* step = nullptr;
  int y_input = -1;  // index of the product among the step's inputs
};

RowCase residual_norm(int64_t rows, int64_t cols, DType dt) {
  SegmentBuilder b;
  const ValueRef y = b.input({rows, cols}, dt), r = b.input({rows, cols}, dt);
  const ValueRef g = b.input({cols}, dt), beta = b.input({cols}, dt);
  b.output(b.add(OpId::layer_norm, {b.add(OpId::add, {y, r}), g, beta}, norm_attrs(1e-5, true, true)));
  RowCase c;
  c.seg = b.build();
  c.plan = plan_segment(c.seg, default_planner_options(Device::cpu()));
  for (const Step& s : c.plan.steps)
    if (const auto* fk = std::get_if<FusedKernelStep>(&s.body)) c.step = fk;
  REQUIRE(c.step != nullptr);
  REQUIRE(c.step->spec->kind == jit::SpecKind::Row);
  const auto& in = c.step->parts[0].inputs;
  c.y_input = static_cast<int>(std::find(in.begin(), in.end(), c.seg.value_id(y)) - in.begin());
  REQUIRE(c.y_input < static_cast<int>(in.size()));
  return c;
}

// Round-to-nearest of an f32 to the dtype and back, as the row program holds a value.
float round_to(DType dt, float x) {
  const Tensor t = cast(from_floats({x}, {1}, DType::f32, Device::cpu()), dt);
  return static_cast<float>(t.to_doubles()[0]);
}

}  // namespace

TEST_CASE("split-K rows: the row program adding partial products equals it reading their rounded sum") {
  const int64_t rows = 6, cols = 40;
  for (DType dt : {DType::f16, DType::bf16}) {
    for (int slices : {2, 3, 5}) {
      for (bool bias : {true, false}) {
        INFO(dtype_name(dt) << " slices " << slices << (bias ? " with bias" : " without bias"));
        RowCase c = residual_norm(rows, cols, dt);
        const std::vector<Tensor> xs = random_externals(c.seg, 77 + slices);
        const Tensor partials = rand_uniform({slices, rows, cols}, 5 + slices, -3.0, 3.0, DType::f32, Device::cpu());
        const Tensor b = rand_uniform({cols}, 9, -1.0, 1.0, dt, Device::cpu());
        // y as the rewritten program computes it: the partials summed in order, then + bias, rounded.
        const std::vector<double> p = partials.to_doubles(), bv = b.to_doubles();
        std::vector<float> y(static_cast<size_t>(rows * cols));
        for (size_t e = 0; e < y.size(); ++e) {
          float s = static_cast<float>(p[e]);
          for (int k = 1; k < slices; ++k) s = s + static_cast<float>(p[k * y.size() + e]);
          if (bias) s = s + static_cast<float>(bv[e % cols]);
          y[e] = round_to(dt, s);
        }
        std::vector<Tensor> inputs;
        for (int v : c.step->parts[0].inputs) inputs.push_back(xs[static_cast<size_t>(v)]);
        inputs[static_cast<size_t>(c.y_input)] = from_floats(y, {rows, cols}, dt, Device::cpu());
        const Tensor want = empty({rows, cols}, dt, Device::cpu()), got = empty({rows, cols}, dt, Device::cpu());
        jit::PartBinding original{{rows, cols}, {}, {jit::tensor_arg(want)}};
        for (const Tensor& t : inputs) original.inputs.push_back(jit::tensor_arg(t));
        jit::run_spec_cpu(*c.step->spec, std::span<const jit::PartBinding>(&original, 1));

        jit::KernelSpec rewritten = *c.step->spec;
        rewritten.parts[0] = read_as_partials(rewritten.parts[0], c.y_input, slices, bias);
        jit::validate(rewritten);
        CHECK(rewritten.parts[0].inputs.size() == inputs.size() + slices - 1 + (bias ? 1 : 0));
        jit::PartBinding split{{rows, cols}, {}, {jit::tensor_arg(got)}};
        auto* base = static_cast<float*>(const_cast<void*>(partials.impl()->data()));
        for (size_t k = 0; k < inputs.size(); ++k) {
          if (static_cast<int>(k) != c.y_input) {
            split.inputs.push_back(jit::tensor_arg(inputs[k]));
            continue;
          }
          for (int s = 0; s < slices; ++s)
            split.inputs.push_back(jit::TensorArg{base + s * rows * cols, DType::f32, Shape{rows, cols},
                                                  contiguous_strides(Shape{rows, cols})});
        }
        if (bias) split.inputs.push_back(jit::tensor_arg(b));
        jit::run_spec_cpu(rewritten, std::span<const jit::PartBinding>(&split, 1));
        const auto w = want.to_doubles(), g = got.to_doubles();
        CHECK(w == g);  // the same arithmetic in the same order: bit for bit
      }
    }
  }
}

TEST_CASE("split-K rows: a pipelined row with a 4-byte first-loop load stages it in registers, not 16-byte copies") {
  // One f32 partial product beside the f16 residual: 8-column packs, 32 bytes of the f32 load a
  // pack. Staged through shared memory (one 16-byte cp.async a pack and load) half of it came
  // through; such rows stage in registers (render_row.cpp, smem_staged_rows).
  RowCase c = residual_norm(128, 768, DType::f16);
  jit::KernelSpec f16 = *c.step->spec;
  f16.variants = 0;  // every entry point: the pipelined body too
  jit::KernelSpec mixed = f16;
  mixed.parts[0] = read_as_partials(mixed.parts[0], c.y_input, 1, false);
  const std::string staged_copy = "lf_cp_async16((lf_stage";
  const std::string a = jit::render_cuda(f16).source, b = jit::render_cuda(mixed).source;
  REQUIRE(a.find("lf_row_cache_vp") != std::string::npos);  // the pipelined body is there
  CHECK(a.find(staged_copy) != std::string::npos);            // 2-byte rows: through shared memory
  REQUIRE(b.find("lf_row_cache_vp") != std::string::npos);
  CHECK(b.find(staged_copy) == std::string::npos);            // a 4-byte load: in registers
}

namespace {

// FFN2 of a layer: linear (+ bias) -> + residual -> layer_norm; `output_product` also returns
// the product itself (then it may not be folded: the program sees it).
Segment ffn2_segment(int64_t rows, int64_t n, int64_t k, DType dt, bool bias, bool output_product) {
  SegmentBuilder b;
  const ValueRef x = b.input({rows, k}, dt), w = b.input({n, k}, dt);
  std::vector<ValueRef> in{x, w};
  if (bias) in.push_back(b.input({n}, dt));
  const ValueRef r = b.input({rows, n}, dt), g = b.input({n}, dt), beta = b.input({n}, dt);
  const ValueRef y = b.add(OpId::linear, in, linear_attrs(bias));
  b.output(b.add(OpId::layer_norm, {b.add(OpId::add, {r, y}), g, beta}, norm_attrs(1e-12, true, true)));
  if (output_product) b.output(y);
  return b.build();
}

PlannerOptions cuda_options_split(int slices) {
  PlannerOptions o = default_planner_options(Device::cpu());
  o.cuda = true;
  o.gemv_prologue = false;
  o.split_k = [slices](int64_t, int64_t, int64_t, DType, bool) { return slices; };
  return o;
}

const GemmStep* gemm_of(const PlannedSegment& p) {
  for (const Step& s : p.steps)
    if (const auto* g = std::get_if<GemmStep>(&s.body)) return g;
  return nullptr;
}

}  // namespace

TEST_CASE("split-K rows: the pass folds a linear that only a row kernel reads, and no other") {
  {
    const Segment seg = ffn2_segment(128, 64, 256, DType::f16, true, false);
    const PlannedSegment p = plan_segment(seg, cuda_options_split(4));
    INFO(p.describe());
    const GemmStep* g = gemm_of(p);
    REQUIRE(g != nullptr);
    CHECK(g->partials == 4);
    const int y = seg.value_id(ValueRef::of(g->node));
    REQUIRE(p.partials.size() == p.values.size());
    CHECK(p.partials[static_cast<size_t>(y)] == 4);
    const FusedKernelStep* row = nullptr;
    for (const Step& s : p.steps)
      if (const auto* fk = std::get_if<FusedKernelStep>(&s.body)) row = fk;
    REQUIRE(row != nullptr);
    const PartIo& io = row->parts[0];
    REQUIRE(io.slice.size() == io.inputs.size());
    int slices = 0;
    for (size_t k = 0; k < io.inputs.size(); ++k)
      if (io.slice[k] >= 0) {
        CHECK(io.inputs[k] == y);
        CHECK(io.slice[k] == slices++);
      }
    CHECK(slices == 4);
    CHECK(io.inputs.back() == seg.value_id(seg.nodes[static_cast<size_t>(g->node)].inputs[2]));  // the bias, last
    CHECK(row->spec->parts[0].inputs.size() == io.inputs.size());
    bool decided = false;
    for (const Decision& d : p.decisions) decided = decided || d.what.find("partial products") != std::string::npos;
    CHECK(decided);
  }
  SUBCASE("not when the program sees the product") {
    const PlannedSegment p = plan_segment(ffn2_segment(128, 64, 256, DType::f16, true, true), cuda_options_split(4));
    REQUIRE(gemm_of(p) != nullptr);
    CHECK(gemm_of(p)->partials == 0);
  }
  SUBCASE("not when cuBLASLt would not split it, nor for a few rows (the GEMV's), nor in f32, nor for the CPU") {
    CHECK(gemm_of(plan_segment(ffn2_segment(4, 64, 256, DType::f16, true, false), cuda_options_split(4)))->partials == 0);
    CHECK(gemm_of(plan_segment(ffn2_segment(128, 64, 256, DType::f16, true, false), cuda_options_split(1)))->partials == 0);
    CHECK(gemm_of(plan_segment(ffn2_segment(128, 64, 256, DType::f32, true, false), cuda_options_split(4)))->partials == 0);
    PlannerOptions cpu = default_planner_options(Device::cpu());
    cpu.split_k = [](int64_t, int64_t, int64_t, DType, bool) { return 4; };
    CHECK(gemm_of(plan_segment(ffn2_segment(128, 64, 256, DType::f16, true, false), cpu))->partials == 0);
  }
}

namespace {

// One FFN2 segment planned for CUDA (split `forced` ways, or as cuBLASLt splits it when 0), run,
// and compared with eager execution on the GPU.
void check_ffn2_cuda(int64_t rows, int64_t n, int64_t k, DType dt, bool bias, int forced) {
  INFO(rows << " x " << n << " x " << k << " " << dtype_name(dt) << " split " << forced);
  const Segment seg = ffn2_segment(rows, n, k, dt, bias, false);
  PlannerOptions o = default_planner_options(Device::cuda(0));
  if (forced) o.split_k = [forced](int64_t, int64_t, int64_t, DType, bool) { return forced; };
  PlannedSegment p = plan_segment(seg, o);
  INFO(p.describe());
  const GemmStep* g = gemm_of(p);
  REQUIRE(g != nullptr);
  if (forced) CHECK(g->partials == forced);
  MESSAGE("split " << forced << ": the plan's GEMM writes " << g->partials << " partial products");
  CHECK(compile_plan(p, jit::KernelCompiler::global(), jit::default_compile_options()) == 0);
  const std::vector<Tensor> xs = random_externals(seg, 31, -1.0, 1.0);
  std::vector<Tensor> dx;
  for (const Tensor& t : xs) dx.push_back(t.to(Device::cuda(0)));
  const std::vector<Tensor> want = eager_values(seg, dx);
  const std::vector<Tensor> got = poisoned_values(p, dx);
  run_plan(p, got, Stream::current(Device::cuda(0)).handle());
  synchronize(Device::cuda(0));
  const int v = seg.value_id(seg.outputs[0]);
  const auto gv = got[static_cast<size_t>(v)].to_doubles(), wv = want[static_cast<size_t>(v)].to_doubles();
  size_t bad = 0;
  CHECK_MESSAGE(lftest::allclose(gv, wv, 3e-2, 3e-2, &bad),
                "first mismatch at " << bad << ": got " << (bad < gv.size() ? gv[bad] : 0) << " want "
                                     << (bad < wv.size() ? wv[bad] : 0));
}

}  // namespace

TEST_CASE("split-K rows: the row kernel adding partial products compiles for sm_90, every body" *
          doctest::skip(!jit::nvrtc_available())) {
  // NVRTC needs no GPU: this runs in CI. (The CUDA case below runs what it compiles.)
  struct Reset {
    ~Reset() { jit::set_row_pipeline(-1); }
  } reset;
  jit::KernelCompiler compiler(1, "");
  for (int pipeline : {0, 1, -1}) {
    jit::set_row_pipeline(pipeline);
    for (DType dt : {DType::f16, DType::bf16}) {
      for (int slices : {2, 4}) {
        const bool bias = slices == 2;
        INFO("row bodies " << pipeline << " (-1: both) " << std::string(dtype_name(dt)) << " slices " << slices
                           << " bias " << bias);
        PlannedSegment p = plan_segment(ffn2_segment(128, 768, 3072, dt, bias, false), cuda_options_split(slices));
        REQUIRE(gemm_of(p)->partials == slices);
        const int failed = compile_plan(p, compiler, jit::default_compile_options());
        for (const Decision& d : p.decisions) INFO(d.what << ": " << d.reason);
        std::string why;
        for (const Decision& d : p.decisions)
          if (d.reason.find("not compiled") != std::string::npos) why = d.reason.substr(0, 3000);
        CHECK_MESSAGE(failed == 0, why);
        CHECK(gemm_of(p)->partials == slices);
      }
    }
  }
}

LF_CUDA_TEST_CASE("split-K rows: FFN2 + residual + layer_norm from partial products equals eager on CUDA") {
  // BERT-base's FFN2 at batch 1 (cuBLASLt splits it on an H200), a bias-free one, bf16, and
  // rows that are not a multiple of any tile; forced splits and cuBLASLt's own choice; the row
  // kernel's plain body, its pipelined one (asked for, it gets the plain one: four f32 partials
  // are too many registers to stage) and both.
  struct Reset {
    ~Reset() { jit::set_row_pipeline(-1); }
  } reset;
  for (int pipeline : {0, 1, -1}) {
    jit::set_row_pipeline(pipeline);
    INFO("row bodies: " << std::string(pipeline < 0 ? "both" : pipeline ? "pipelined" : "plain"));
    for (int forced : {0, 2, 4}) {
      check_ffn2_cuda(128, 768, 3072, DType::f16, true, forced);
      check_ffn2_cuda(77, 256, 1024, DType::bf16, false, forced);
      check_ffn2_cuda(33, 768, 3072, DType::bf16, true, forced);
    }
  }
}
