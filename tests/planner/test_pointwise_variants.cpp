// Pointwise vec variants: with a scalar tail (numel % VEC != 0) and exact (no tail code, one
// copy of the program less for NVRTC to compile). The planner asks for exact only when every
// size the segment's varying dims may take keeps numel a multiple of VEC; a launch with a tail
// names the tail variant as missing, which is then compiled as a sibling.
#include "kernels/jit/cuda_launch.hpp"
#include "kernels/jit/kernel_compiler.hpp"
#include "kernels/jit/render.hpp"
#include "tests/planner/planner_util.hpp"

using namespace plantest;

namespace {

const bool kNoNvrtc = !jit::nvrtc_available();

Segment chain(const Shape& s, DType dt) {
  SegmentBuilder b;
  const ValueRef x = b.input(s, dt), y = b.input(s, dt);
  b.output(b.add(OpId::gelu, {b.add(OpId::mul, {x, y})}));
  return b.build();
}

std::shared_ptr<const jit::KernelSpec> only_spec(const Segment& seg) {
  const PlannedSegment p = plan_segment(seg, default_planner_options(Device::cuda(0)));
  REQUIRE(p.steps.size() == 1);
  return std::get<FusedKernelStep>(p.steps[0].body).spec;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("pointwise variants: exact when numel is a multiple of VEC for every size the shapes may take") {
  using jit::Variant;
  CHECK(only_spec(chain({64, 512}, DType::f32))->variants == jit::variant_bit(Variant::VecExactI32));
  CHECK(only_spec(chain({1001}, DType::f32))->variants == jit::variant_bit(Variant::VecI32));
  // f16 packs hold 8: 4 * 5 = 20 is a multiple of 4 but not of 8.
  CHECK(only_spec(chain({4, 5}, DType::f16))->variants == jit::variant_bit(Variant::VecI32));
  CHECK(only_spec(chain({4, 16}, DType::f16))->variants == jit::variant_bit(Variant::VecExactI32));
  // A varying dim may take any size: exact only when the dims that do not vary make it so.
  Segment seg = chain({12, 6}, DType::f32);
  seg.varying.assign(seg.num_values(), std::vector<bool>{true, false});
  CHECK(only_spec(seg)->variants == jit::variant_bit(Variant::VecI32));
  seg = chain({12, 8}, DType::f32);
  seg.varying.assign(seg.num_values(), std::vector<bool>{true, false});
  CHECK(only_spec(seg)->variants == jit::variant_bit(Variant::VecExactI32));
}

TEST_CASE("pointwise variants: the source holds only what its variants call") {
  using jit::Variant;
  auto spec = std::make_shared<jit::KernelSpec>(*only_spec(chain({64, 512}, DType::f32)));
  const jit::RenderedKernel exact = jit::render_cuda(*spec);
  REQUIRE(exact.variants == std::vector<Variant>{Variant::VecExactI32});
  // One unrolled copy of the program (the pack), no scalar tail, no strided path, no row helpers.
  CHECK(count(exact.source, "lf_gelu(a)") == 1);
  CHECK(exact.source.find("lf_p0_at") == std::string::npos);
  CHECK(exact.source.find("lf_p0_strided") == std::string::npos);
  CHECK(exact.source.find("lf_row_sum") == std::string::npos);
  CHECK(exact.source.find("lf_ldpack") != std::string::npos);

  spec->variants |= jit::variant_bit(Variant::VecI32);  // the sibling a tail asks for
  const jit::RenderedKernel both = jit::render_cuda(*spec);
  CHECK(both.variants == std::vector<Variant>{Variant::VecI32, Variant::VecExactI32});
  CHECK(both.source.find("lf_p0_at") != std::string::npos);  // the tail's scalar program
  CHECK(both.source.find("lf_p0_strided") == std::string::npos);

  spec->variants = jit::variant_bit(Variant::StridedI32);
  const jit::RenderedKernel strided = jit::render_cuda(*spec);
  CHECK(strided.source.find("lf_p0_vec") == std::string::npos);
  CHECK(strided.source.find("lf_ldpack") == std::string::npos);
}

TEST_CASE("pointwise variants: a launch picks exact or the tail variant; a missing tail variant is named") {
  using jit::Variant;
  auto spec = std::make_shared<jit::KernelSpec>(*only_spec(chain({64, 512}, DType::f32)));
  alignas(16) static float buf[16];
  auto geo = [&](const Shape& s) {
    const jit::TensorArg a{buf, DType::f32, s, contiguous_strides(s)};
    const jit::PartBinding pb{s, {a, a}, {a}};
    return std::vector<jit::PartGeometry>{jit::make_geometry(spec->parts[0], spec->kind, pb)};
  };
  auto kernel_for = [](const jit::KernelSpec& s) {
    auto k = std::make_unique<jit::CompiledKernel>();
    k->rendered = jit::render_cuda(s);
    k->variant_ok.assign(k->rendered.variants.size(), true);
    return k;
  };
  std::string err;
  {
    const auto k = kernel_for(*spec);
    jit::LaunchChoice c = jit::choose_launch(*spec, *k, geo({7, 512}), 48 << 10, &err);
    CHECK(err.empty());
    CHECK(c.variant == Variant::VecExactI32);
    CHECK(c.grid == 4);  // 7 * 512 / 4 = 896 packs
    c = jit::choose_launch(*spec, *k, geo({7, 511}), 48 << 10, &err);
    CHECK(c.missing == Variant::VecI32);
    err.clear();
  }
  spec->variants |= jit::variant_bit(Variant::VecI32);
  const auto k = kernel_for(*spec);
  CHECK(jit::choose_launch(*spec, *k, geo({7, 511}), 48 << 10, &err).variant == Variant::VecI32);
  CHECK(jit::choose_launch(*spec, *k, geo({7, 512}), 48 << 10, &err).variant == Variant::VecExactI32);
  CHECK(err.empty());
}

TEST_CASE("pointwise variants: exact and tail variants compile, in one module too" * doctest::skip(kNoNvrtc)) {
  using jit::Variant;
  jit::KernelCompiler compiler(1, "");
  const jit::CompileOptions o = sm90();
  for (DType dt : {DType::f32, DType::f16}) {
    auto spec = std::make_shared<jit::KernelSpec>(*only_spec(chain({64, 512}, dt)));
    for (uint32_t v : {jit::variant_bit(Variant::VecExactI64),
                       jit::variant_bit(Variant::VecExactI32) | jit::variant_bit(Variant::VecI32)}) {
      spec->variants = v;
      const jit::CompileResult r = compiler.compile(spec, o);
      INFO(dtype_name(dt) << " variants " << v << "\n" << r.error << "\n" << r.log);
      REQUIRE(r.ok());
      for (size_t i = 0; i < r.kernel->rendered.variants.size(); ++i) CHECK(r.kernel->variant_ok[i]);
    }
  }
}
