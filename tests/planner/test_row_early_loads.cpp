// Row kernels that hold their row in registers issue their later loops' loads (a norm's weight
// and bias, read after the mean and variance) at the row's start (kernels/jit/render_row.cpp,
// LIVEFUSE_ROW_EARLY_LOADS). On the CPU: where the rendered source issues them, that NVRTC
// compiles every body either way; on CUDA: both ways give eager's bits.
#include <string>

#include "kernels/jit/kernel_compiler.hpp"
#include "kernels/jit/render.hpp"
#include "tests/planner/planner_util.hpp"

using namespace plantest;

namespace {

struct EarlyKnob {  // forces the renderer's choice for a scope
  explicit EarlyKnob(int on) { jit::set_row_early_loads(on); }
  ~EarlyKnob() { jit::set_row_early_loads(-1); }
};

// The norms these kernels are: residual add + layer_norm (BERT's seam), rms_norm * weight
// (Llama's), and a softmax (no operand read after its reductions).
enum class Form { add_layer_norm, rms_norm, softmax };
const char* form_name(Form f) {
  return f == Form::add_layer_norm ? "add + layer_norm" : f == Form::rms_norm ? "rms_norm" : "softmax";
}

Segment row_segment(Form f, int64_t rows, int64_t cols, DType dt) {
  SegmentBuilder b;
  const ValueRef x = b.input({rows, cols}, dt);
  if (f == Form::add_layer_norm) {
    const ValueRef r = b.input({rows, cols}, dt), g = b.input({cols}, dt), beta = b.input({cols}, dt);
    b.output(b.add(OpId::layer_norm, {b.add(OpId::add, {x, r}), g, beta}, norm_attrs(1e-12, true, true)));
  } else if (f == Form::rms_norm) {
    const ValueRef w = b.input({cols}, dt);
    b.output(b.add(OpId::rms_norm, {b.add(OpId::mul, {x, x}), w}, norm_attrs(1e-6, true, false)));
  } else {
    b.output(b.add(OpId::softmax, {b.add(OpId::mul, {x, x})}, softmax_attrs(0.125, false)));
  }
  return b.build();
}

const FusedKernelStep* row_step(const PlannedSegment& p) {
  for (const Step& s : p.steps)
    if (const auto* fk = std::get_if<FusedKernelStep>(&s.body); fk && fk->spec->kind == jit::SpecKind::Row) return fk;
  return nullptr;
}

// The CUDA source of the segment's row kernel, every body.
std::string row_source(Form f, int64_t rows, int64_t cols, DType dt) {
  const PlannedSegment p = plan_segment(row_segment(f, rows, cols, dt), default_planner_options(Device::cpu()));
  const FusedKernelStep* fk = row_step(p);
  REQUIRE(fk != nullptr);
  jit::KernelSpec spec = *fk->spec;
  spec.variants = 0;  // every entry point
  return jit::render_cuda(spec).source;
}

// The source of one body (its device function) of a rendered row kernel.
std::string body_of(const std::string& src, const std::string& name) {
  const size_t at = src.find("void " + name + "(");
  REQUIRE(at != std::string::npos);
  return src.substr(at, src.find("\n}\n", at) - at);
}

}  // namespace

TEST_CASE("row early loads: a register row's norm weights are loaded before its first loop, once") {
  for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
    INFO(std::string(dtype_name(dt)));
    std::string on, off;
    {
      EarlyKnob k(1);
      on = row_source(Form::add_layer_norm, 128, 768, dt);
    }
    {
      EarlyKnob k(0);
      off = row_source(Form::add_layer_norm, 128, 768, dt);
    }
    for (const char* name : {"lf_row_cache_v", "lf_row_cache_vp"}) {
      if (on.find(std::string("void ") + name + "(") == std::string::npos) continue;  // a body not rendered
      INFO(name);
      const std::string b = body_of(on, name), b_off = body_of(off, name);
      const size_t issued = b.find("the later loops' loads, issued now"), loop0 = b.find("// ---- loop 0"),
                   loop2 = b.find("// ---- loop 2");
      REQUIRE(issued != std::string::npos);
      REQUIRE(loop0 != std::string::npos);
      REQUIRE(loop2 != std::string::npos);
      CHECK(issued < loop0);
      // The weight and bias: two arrays filled before loop 0, read in loop 2, not loaded there.
      const std::string before = b.substr(issued, loop0 - issued), last = b.substr(loop2);
      size_t arrays = 0;
      for (size_t at = before.find("lf_ldpack<"); at != std::string::npos; at = before.find("lf_ldpack<", at + 1)) ++arrays;
      CHECK(arrays == 2);
      CHECK(last.find("= lf_e") != std::string::npos);
      CHECK(last.find("lf_ldpack<") == std::string::npos);
      // Off: no early arrays, the loads in loop 2 as before.
      CHECK(b_off.find("lf_e") == std::string::npos);
      CHECK(b_off.substr(b_off.find("// ---- loop 2")).find("lf_ldpack<") != std::string::npos);
    }
  }
  SUBCASE("nothing to issue where no loop after a reduction loads") {
    EarlyKnob k(1);
    CHECK(row_source(Form::softmax, 64, 1024, DType::f16).find("issued now") == std::string::npos);
  }
  SUBCASE("only the register bodies with packs issue them") {
    // One column a step (rows whose stride is known at launch only) and the recomputing
    // bodies keep each load in its loop: they hold no arrays to issue into.
    EarlyKnob k(1);
    const std::string src = row_source(Form::add_layer_norm, 128, 768, DType::f16);
    for (const char* name : {"lf_row_cache", "lf_row_recompute", "lf_row_recompute_v"}) {
      INFO(name);
      CHECK(body_of(src, name).find("issued now") == std::string::npos);
    }
  }
}

TEST_CASE("row early loads: NVRTC compiles every row body either way, for sm_90" *
          doctest::skip(!jit::nvrtc_available())) {
  // NVRTC needs no GPU: this runs in CI. (The CUDA case below runs what it compiles.)
  jit::KernelCompiler compiler(1, "");
  for (int early : {1, 0}) {
    EarlyKnob k(early);
    for (Form f : {Form::add_layer_norm, Form::rms_norm}) {
      for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
        INFO("early " << early << " " << form_name(f) << " " << std::string(dtype_name(dt)));
        PlannedSegment p = plan_segment(row_segment(f, 128, 768, dt), default_planner_options(Device::cpu()));
        std::string why;
        const int failed = compile_plan(p, compiler, jit::default_compile_options());
        for (const Decision& d : p.decisions)
          if (d.reason.find("not compiled") != std::string::npos) why = d.reason.substr(0, 3000);
        CHECK_MESSAGE(failed == 0, why);
      }
    }
  }
}

LF_CUDA_TEST_CASE("row early loads: norms give eager's bits with the loads early and late, every body") {
  struct Reset {
    ~Reset() { jit::set_row_pipeline(-1); }
  } reset;
  for (int pipeline : {0, 1}) {
    jit::set_row_pipeline(pipeline);
    for (Form f : {Form::add_layer_norm, Form::rms_norm}) {
      for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
        // BERT-base's seam (128 x 768), one decode row of Llama-1B (2048), rows that are not a
        // multiple of a block's, and columns that are not a multiple of a thread's packs.
        for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{128, 768}, {1, 2048}, {77, 1000}}) {
          INFO("pipelined " << pipeline << " " << form_name(f) << " " << std::string(dtype_name(dt)) << " " << rows
                            << " x " << cols);
          const Segment seg = row_segment(f, rows, cols, dt);
          const std::vector<Tensor> xs = random_externals(seg, 17, -2.0, 2.0);
          std::vector<Tensor> dx;
          for (const Tensor& t : xs) dx.push_back(t.to(Device::cuda(0)));
          const int v = seg.value_id(seg.outputs[0]);
          const std::vector<double> want = eager_values(seg, dx)[static_cast<size_t>(v)].to_doubles();
          std::vector<double> got_by[2];
          for (int early : {1, 0}) {
            EarlyKnob k(early);
            INFO("early " << early);
            PlannedSegment p = plan_segment(seg, default_planner_options(Device::cuda(0)));
            REQUIRE(row_step(p) != nullptr);
            REQUIRE(compile_plan(p, jit::KernelCompiler::global(), jit::default_compile_options()) == 0);
            const std::vector<Tensor> got = poisoned_values(p, dx);
            run_plan(p, got, Stream::current(Device::cuda(0)).handle());
            synchronize(Device::cuda(0));
            got_by[early] = got[static_cast<size_t>(v)].to_doubles();
            size_t bad = 0;
            CHECK_MESSAGE(lftest::allclose(got_by[early], want, 3e-2, 3e-2, &bad),
                          "first mismatch at " << bad << ": got " << got_by[early][bad] << " want " << want[bad]);
          }
          // Only the loads moved: the same arithmetic in the same order, bit for bit.
          CHECK(got_by[1] == got_by[0]);
        }
      }
    }
  }
}
