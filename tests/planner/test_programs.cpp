// Kernels submitted together compile as one NVRTC program (KernelCompiler::submit_batch): one
// program per program head, every kernel with its own entries, stats and cache entry; a kernel
// that breaks its program fails alone. NVRTC only (no GPU): runs in CI. On the GPU, plans with
// several kernels (test_gpu.cpp, test_bert) launch kernels of shared programs.
#include <filesystem>
#include <set>

#include "kernels/jit/kernel_compiler.hpp"
#include "kernels/jit/render.hpp"
#include "livefuse/custom.hpp"
#include "tests/planner/planner_util.hpp"

using namespace plantest;

namespace {

const bool kNoNvrtc = !jit::nvrtc_available();

std::shared_ptr<const jit::KernelSpec> only_spec(const Segment& seg) {
  const PlannedSegment p = plan_segment(seg, default_planner_options(Device::cuda(0)));
  REQUIRE(specs_of(p).size() == 1);
  return specs_of(p)[0];
}

std::shared_ptr<const jit::KernelSpec> chain(DType dt, double c) {
  SegmentBuilder b;
  const ValueRef x = b.input({1000}, dt);
  b.output(b.add(OpId::gelu, {b.scalar_op(OpId::mul, x, c)}));
  return only_spec(b.build());
}

std::shared_ptr<const jit::KernelSpec> norm_row(double eps) {
  SegmentBuilder b;
  const ValueRef x = b.input({16, 256}), w = b.input({256}), bb = b.input({256});
  b.output(b.add(OpId::layer_norm, {x, w, bb}, norm_attrs(eps, 1, 1)));
  return only_spec(b.build());
}

}  // namespace

TEST_CASE("nvrtc programs: kernels submitted together share one program per head" * doctest::skip(kNoNvrtc)) {
  jit::KernelCompiler compiler(1, "");
  // f32 results: exact exp; the f16 chain takes the fast exp, a different program head.
  const std::vector<std::shared_ptr<const jit::KernelSpec>> specs = {chain(DType::f32, 1.5), norm_row(1e-5),
                                                                      chain(DType::f16, 2.5), chain(DType::f32, 3.5)};
  auto futures = compiler.submit_batch(specs, sm90());
  REQUIRE(futures.size() == specs.size());
  std::vector<jit::CompileResult> rs;
  for (auto& f : futures) rs.push_back(f.get());
  for (const auto& r : rs) {
    INFO(r.error << "\n" << r.log);
    REQUIRE(r.ok());
    CHECK(!r.cache_hit);
    // Each kernel found its own entry points in the program's ptxas report.
    REQUIRE(r.kernel->stats.size() == r.kernel->rendered.variants.size());
    for (const auto& st : r.kernel->stats) CHECK(st.registers > 0);
  }
  CHECK(compiler.stats().programs == 2);
  CHECK(compiler.stats().compiled == 4);
  const auto& f32 = rs[0].kernel->program;
  CHECK(rs[1].kernel->program == f32);
  CHECK(rs[3].kernel->program == f32);
  CHECK(rs[2].kernel->program != f32);
  CHECK(f32->kernels() == 3);
  CHECK(rs[2].kernel->program->kernels() == 1);
  // The program's NVRTC time is shared out among its kernels.
  CHECK(rs[0].kernel->compile_ms == rs[1].kernel->compile_ms);
  CHECK(rs[0].kernel->compile_ms > 0);
  // Every kernel's entries are in the one cubin, which is whole (an ELF image).
  for (int i : {0, 1, 3}) {
    CHECK(rs[i].kernel->cubin().compare(0, 4, "\x7f" "ELF") == 0);
    for (jit::Variant v : rs[i].kernel->rendered.variants)
      CHECK(rs[i].kernel->cubin().find(rs[i].kernel->rendered.entry(v)) != std::string::npos);
  }
  // Each kernel has its own cache entry: alone or in another batch, a hit.
  const jit::CompileResult again = compiler.compile(specs[1], sm90());
  CHECK(again.cache_hit);
  CHECK(again.kernel == rs[1].kernel);
  for (auto& f : compiler.submit_batch({specs[3], specs[2]}, sm90())) CHECK(f.get().cache_hit);
  CHECK(compiler.stats().programs == 2);
}

TEST_CASE("nvrtc programs: a batch's kernels are found on disk one by one" * doctest::skip(kNoNvrtc)) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("lf_programs_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::vector<std::shared_ptr<const jit::KernelSpec>> specs = {chain(DType::f32, 4.5), norm_row(2e-5)};
  {
    jit::KernelCompiler c1(1, dir.string());
    for (auto& f : c1.submit_batch(specs, sm90())) REQUIRE(f.get().ok());
    CHECK(c1.cache().counters().disk_writes == 2);
  }
  jit::KernelCompiler c2(1, dir.string());
  const jit::CompileResult r = c2.compile(specs[1], sm90());
  REQUIRE(r.ok());
  CHECK(r.kernel->from_disk);
  CHECK(c2.stats().programs == 0);
  for (jit::Variant v : r.kernel->rendered.variants)
    CHECK(r.kernel->cubin().find(r.kernel->rendered.entry(v)) != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("nvrtc programs: a kernel that breaks its program fails alone" * doctest::skip(kNoNvrtc)) {
  jit::KernelCompiler compiler(1, "");
  const CustomOp bad = register_elementwise("programs_broken", 1, "a +* no_such_function(a)", [](float a, float, float) { return a; });
  SegmentBuilder b;
  Attrs ca;
  ca.custom_id = bad.id();
  b.output(b.add(OpId::custom, {b.add(OpId::exp, {b.input({64})})}, ca));
  const auto broken = only_spec(b.build());
  const std::vector<std::shared_ptr<const jit::KernelSpec>> specs = {chain(DType::f32, 5.5), broken, norm_row(3e-5)};
  std::vector<jit::CompileResult> rs;
  for (auto& f : compiler.submit_batch(specs, sm90())) rs.push_back(f.get());
  CHECK(rs[0].ok());
  CHECK(rs[2].ok());
  REQUIRE(!rs[1].ok());
  CHECK(rs[1].error.find(broken->name) != std::string::npos);
  CHECK(rs[1].log.find("no_such_function") != std::string::npos);
  // The program of three, then each kernel alone.
  CHECK(compiler.stats().programs == 4);
  CHECK(rs[0].kernel->program->kernels() == 1);
  CHECK(compiler.stats().failed == 1);
}

TEST_CASE("nvrtc programs: a spec twice in one batch, or already in flight, is one job" * doctest::skip(kNoNvrtc)) {
  jit::KernelCompiler compiler(1, "");
  const auto spec = chain(DType::f32, 6.5);
  auto fs = compiler.submit_batch({spec, spec}, sm90());
  auto f3 = compiler.submit(spec, sm90());
  CHECK(fs[0].get().ok());
  CHECK(fs[1].get().kernel == fs[0].get().kernel);
  CHECK(f3.get().kernel == fs[0].get().kernel);
  CHECK(compiler.stats().compiled == 1);
  CHECK(compiler.stats().deduplicated >= 1);
}

TEST_CASE("nvrtc programs: expensive functions out of line are one copy per kernel" * doctest::skip(kNoNvrtc)) {
  jit::set_outline_heavy_ops(true);
  SegmentBuilder b;
  const ValueRef x = b.input({4096}, DType::f16);
  b.output(b.add(OpId::silu, {b.add(OpId::gelu, {b.add(OpId::gelu, {x})})}));
  const auto spec = only_spec(b.build());
  const jit::RenderedKernel rk = jit::render_cuda(*spec);
  jit::set_outline_heavy_ops(false);
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t p = rk.body.find(what); p != std::string::npos; p = rk.body.find(what, p + 1)) ++n;
    return n;
  };
  CHECK(count("__noinline__ float lf_ool_gelu(") == 1);
  CHECK(count("__noinline__ float lf_ool_silu(") == 1);
  CHECK(count("lf_gelu(") == 1);  // inside the one out-of-line copy
  jit::KernelCompiler compiler(1, "");
  const jit::CompileResult r = compiler.compile(spec, sm90());
  INFO(r.error << "\n" << r.log);
  CHECK(r.ok());
  // Off again: the default renders a different source (a different cache key).
  CHECK(jit::render_cuda(*spec).source != rk.source);
}
