// Kernels linked from the op library (LIVEFUSE_JIT=lto, kernels/jit/lto_render.hpp). Without a
// GPU: the library compiles, every op and dtype links, and the linked kernel's PTX holds the same
// instructions as NVRTC's for the same kernel; the compile service links what the renderer
// covers and compiles the rest with NVRTC. With a GPU: the same values as NVRTC's kernels, bit
// for bit.
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "kernels/jit/kernel_compiler.hpp"
#include "kernels/jit/lto_compiler.hpp"
#include "kernels/jit/lto_render.hpp"
#include "tests/planner/planner_util.hpp"

using namespace plantest;

namespace {

const bool kNoLto = !jit::nvrtc_available() || !jit::lto_available();

// Counts of a PTX listing's value instructions: floating-point arithmetic, compares and
// conversions, which decide the values, and integer divisions (a strided kernel's offsets). Address arithmetic and the form of loads and stores
// (generic or global, one 8-byte store or two 4-byte halves) are left out: the two routes
// spell them differently. A compare and its negation select the same values, so "eq" and "neu"
// count as one.
std::map<std::string, int> histogram(const std::string& ptx) {
  std::map<std::string, int> h;
  std::istringstream is(ptx);
  std::string line;
  static const std::regex op_re("^\\s+(@!?%p\\d+ )?([a-z][a-z0-9_.]*)\\s");
  static const std::regex value_op("\\.(f32|f16|bf16|f64|rn|rzi|approx)(\\.|$)");
  for (std::smatch m; std::getline(is, line);) {
    if (!std::regex_search(line, m, op_re)) continue;
    std::string op = m[2];
    if (op.rfind("ld", 0) == 0 || op.rfind("st", 0) == 0 || op.rfind("mov", 0) == 0) continue;
    if (!std::regex_search(op, value_op) && op.rfind("div", 0) != 0 && op.rfind("rem", 0) != 0) continue;
    op = std::regex_replace(op, std::regex("^setp\\.(eq|neu|ne|equ)\\."), "setp.eqne.");
    ++h[op];
  }
  return h;
}

std::string diff(const std::map<std::string, int>& a, const std::map<std::string, int>& b) {
  std::string d;
  std::map<std::string, int> all = a;
  for (const auto& [k, v] : b) all.emplace(k, 0);
  for (const auto& [k, v] : all) {
    const int x = a.count(k) ? a.at(k) : 0, y = b.count(k) ? b.at(k) : 0;
    if (x != y) d += "  " + k + ": nvrtc " + std::to_string(x) + ", linked " + std::to_string(y) + "\n";
  }
  return d;
}

struct OpCase {
  std::string name;
  Segment seg;
  // pow is libdevice's powf on both routes, optimised apart: the link keeps two more fabs of
  // its special cases (same values expected; the GPU case below checks them bit for bit).
  bool same_instructions = true;
};

// One kernel per elementwise op and dtype it takes (with a scalar operand, on a shape that
// divides by the pack: the VecExactI32 variant), casts, sizes with a tail (VecI32) and a
// horizontal kernel.
std::vector<OpCase> op_cases() {
  std::vector<OpCase> out;
  for (int i = 0; i < static_cast<int>(OpId::kCount); ++i) {
    const OpId op = static_cast<OpId>(i);
    const OpInfo& info = op_info(op);
    if (info.category != OpCategory::Elementwise || op == OpId::custom || op == OpId::cast || op == OpId::clamp) continue;
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64}) {
      const bool is_int = dt == DType::i32 || dt == DType::i64;
      if (is_int && !info.int_ok) continue;
      SegmentBuilder b;
      const ValueRef x = b.input({64, 256}, dt), y = b.input({64, 256}, dt), z = b.input({64, 256}, dt);
      ValueRef v;
      if (info.arity == 1) v = b.add(op, {b.scalar_op(OpId::add, x, 0.5)});
      else if (info.arity == 2) v = b.add(op, {x, b.scalar_op(OpId::mul, y, 1.5)});
      else v = b.add(op, {x, y, z});
      b.output(v);
      out.push_back({std::string(info.name) + " " + std::string(dtype_name(dt)), b.build(), op != OpId::pow});
    }
  }
  {  // cast and clamp take attributes
    SegmentBuilder b;
    const ValueRef x = b.input({64, 256}, DType::f16);
    b.output(b.add(OpId::cast, {b.add(OpId::gelu, {x})}, cast_attrs(DType::i32)));
    b.output(b.add(OpId::cast, {x}, cast_attrs(DType::boolean)));
    out.push_back({"cast f16 -> i32, bool", b.build()});
  }
  for (DType dt : {DType::f16, DType::f32, DType::i64}) {  // numel % pack != 0: packs, then a tail
    SegmentBuilder b;
    const ValueRef x = b.input({7, 37}, dt), y = b.input({7, 37}, dt);
    const ValueRef v = dt == DType::i64 ? b.add(OpId::maximum, {x, y}) : b.add(OpId::gelu, {b.add(OpId::sub, {x, y})});
    b.output(b.add(OpId::where, {x, v, y}));
    out.push_back({"odd size " + std::string(dtype_name(dt)), b.build()});
  }
  for (DType dt : {DType::f32, DType::f16, DType::i32}) {  // broadcasts and a view: strided
    SegmentBuilder b;
    const ValueRef x = b.input({33, 65}, dt), bias = b.input({65}, dt), col = b.input({33, 1}, dt);
    const ValueRef a = b.add(OpId::add, {x, bias});
    b.output(b.add(OpId::maximum, {b.add(OpId::mul, {a, col}), x}));
    out.push_back({"broadcast " + std::string(dtype_name(dt)), b.build()});
  }
  {
    SegmentBuilder b;
    const ValueRef x = b.input({40, 12}, DType::bf16);
    Attrs perm;
    perm.push_int(1);
    perm.push_int(0);
    b.output(b.add(OpId::gelu, {b.add(OpId::permute, {x}, perm)}));
    out.push_back({"permuted bf16", b.build()});
  }
  {  // a registered custom op, in f16 and beside integer work (its own module joins the link)
    static const CustomOp cubic = register_elementwise("lto_cubic", 2, "a * a * a - b", [](float a, float b, float) { return a * a * a - b; });
    SegmentBuilder b;
    const ValueRef x = b.input({64, 256}, DType::f16), y = b.input({64, 256}, DType::f16), i = b.input({64, 256}, DType::i32);
    Attrs ca;
    ca.custom_id = cubic.id();
    const ValueRef c = b.add(OpId::custom, {b.add(OpId::gelu, {x}), y}, ca);
    b.output(c);
    b.output(b.add(OpId::add, {b.add(OpId::cast, {c}, cast_attrs(DType::i32)), i}));
    out.push_back({"custom op f16", b.build()});
  }
  {  // a horizontal kernel: two unrelated chains in one launch
    SegmentBuilder b;
    const ValueRef x = b.input({64, 256}), y = b.input({32, 128}, DType::bf16);
    b.output(b.add(OpId::sigmoid, {b.add(OpId::mul, {x, x})}));
    b.output(b.add(OpId::silu, {b.add(OpId::sub, {y, y})}));
    out.push_back({"horizontal f32 + bf16", b.build()});
  }
  return out;
}

}  // namespace

TEST_CASE("lto: the op library compiles, both exp flavours" * doctest::skip(!jit::nvrtc_available())) {
  for (bool fast : {false, true}) {
    jit::CompileOptions o = sm90();
    o.output = jit::CompileOptions::Output::lto_ir;
    const jit::NvrtcOutput out = jit::nvrtc_compile(jit::op_library_source(fast), "lf_op_library", o);
    REQUIRE_MESSAGE(out.ok, out.error, "\n", out.log);
    CHECK(!out.cubin.empty());  // the library's LTO IR
  }
}

TEST_CASE("lto: every elementwise op and dtype links, with NVRTC's instructions" * doctest::skip(kNoLto)) {
  int linked = 0;
  for (const OpCase& c : op_cases()) {
    INFO(c.name);
    const PlannedSegment p = plan_segment(c.seg, default_planner_options(Device::cuda(0)));
    auto specs = specs_of(p);
    {  // the same kernel with 64-bit indexing (shapes past 2^31 elements take it)
      auto wide = std::make_shared<jit::KernelSpec>(*specs.at(0));
      const bool vec = specs[0]->variants & (jit::variant_bit(jit::Variant::VecI32) | jit::variant_bit(jit::Variant::VecExactI32));
      wide->variants = vec ? jit::variant_bit(jit::Variant::VecI64) | jit::variant_bit(jit::Variant::VecExactI64)
                           : jit::variant_bit(jit::Variant::StridedI64);
      specs.push_back(wide);
    }
    for (const auto& spec : specs) {
      REQUIRE_MESSAGE(jit::ir_covers(*spec), "the IR renderer should cover ", spec->name);
      const jit::RenderedKernel rk = jit::render_cuda(*spec);
      const std::string ir = jit::render_pointwise_ir(*spec, rk);
      const std::string linked_ptx = jit::lto_ptx(ir, sm90(), rk.head.fast_exp, jit::custom_ops_of(*spec));
      // Same options both ways: NVVM's optimisation level decides where a*b+c becomes an FMA.
      const std::string nvrtc_ptx = jit::nvrtc_ptx(rk.source, sm90());
      REQUIRE_MESSAGE(!linked_ptx.empty(), "linking failed; IR:\n", ir);
      REQUIRE(!nvrtc_ptx.empty());
      for (jit::Variant v : rk.variants) CHECK(linked_ptx.find(".entry " + rk.entry(v)) != std::string::npos);
      CHECK_MESSAGE(linked_ptx.find("call") == std::string::npos, "a library call was not inlined");
      // Launch-compatible: the same parameter block and block-size bound.
      auto signature = [](const std::string& ptx) {
        std::string sig;
        std::istringstream is(ptx);
        for (std::string line; std::getline(is, line);)
          if (line.find(".param .align") != std::string::npos || line.find(".maxntid") != std::string::npos) sig += line + "\n";
        return sig;
      };
      CHECK(!signature(nvrtc_ptx).empty());
      CHECK(signature(linked_ptx) == signature(nvrtc_ptx));
      const std::string d = diff(histogram(nvrtc_ptx), histogram(linked_ptx));
      if (c.same_instructions) CHECK_MESSAGE(d.empty(), "instructions differ:\n", d);
      else if (!d.empty()) MESSAGE(c.name, ": instructions differ (expected, see OpCase):\n", d);
      ++linked;
    }
  }
  CHECK(linked > 80);
}

TEST_CASE("lto: the compile service links what the renderer covers and compiles the rest with NVRTC" * doctest::skip(kNoLto)) {
  SegmentBuilder b;
  const ValueRef x = b.input({64, 256}), w = b.input({256});
  b.output(b.add(OpId::gelu, {b.scalar_op(OpId::mul, x, 0.5)}));  // pointwise: linked
  b.output(b.add(OpId::layer_norm, {b.add(OpId::add, {x, x}), w}, norm_attrs(1e-5, 1, 0)));  // row: NVRTC
  const auto specs = specs_of(plan_segment(b.build(), default_planner_options(Device::cuda(0))));
  REQUIRE(specs.size() == 2);
  jit::CompileOptions o = sm90();
  o.lto = true;
  jit::KernelCompiler compiler(1, "");
  auto futures = compiler.submit_batch(specs, o);
  for (size_t i = 0; i < specs.size(); ++i) {
    const jit::CompileResult r = futures[i].get();
    REQUIRE_MESSAGE(r.ok(), r.error, "\n", r.log);
    const bool covered = jit::ir_covers(*specs[i]);
    CHECK(covered == (specs[i]->kind == jit::SpecKind::Pointwise));
    CHECK((r.kernel->key.text.find("+lto") != std::string::npos) == covered);  // keyed apart from NVRTC's
    REQUIRE(!r.kernel->stats.empty());
    CHECK(r.kernel->stats[0].registers > 0);  // ptxas's report reaches the spill check
  }
  CHECK(compiler.stats().linked == 1);
  CHECK(compiler.stats().link_fallbacks == 0);
  // Again: both from the cache.
  auto again = compiler.submit_batch(specs, o);
  for (auto& f : again) CHECK(f.get().cache_hit);
}

TEST_CASE("lto: kernels submitted together are linked together, into one cubin" * doctest::skip(kNoLto)) {
  std::vector<std::shared_ptr<const jit::KernelSpec>> specs;
  for (const OpCase& c : op_cases())
    if (specs.size() < 6 && c.name.find("f32") != std::string::npos)  // one exp flavour
      for (const auto& s : specs_of(plan_segment(c.seg, default_planner_options(Device::cuda(0))))) specs.push_back(s);
  REQUIRE(specs.size() == 6);
  jit::CompileOptions o = sm90();
  o.lto = true;
  jit::KernelCompiler compiler(1, "");
  std::vector<jit::CompileResult> results;
  for (auto& f : compiler.submit_batch(specs, o)) results.push_back(f.get());
  for (const auto& r : results) {
    REQUIRE_MESSAGE(r.ok(), r.error, "\n", r.log);
    CHECK(r.kernel->program == results[0].kernel->program);  // one cubin, one module per device
    CHECK(!r.kernel->stats.empty());
    CHECK(r.kernel->stats[0].registers > 0);  // each entry's own ptxas report
  }
  CHECK(compiler.stats().linked == 6);
  CHECK(compiler.stats().programs == 1);
}

TEST_CASE("lto: LIVEFUSE_FMA=0 reaches the link, as it reaches NVRTC" * doctest::skip(kNoLto)) {
  SegmentBuilder b;
  const ValueRef x = b.input({64, 256});
  b.output(b.add(OpId::gelu_tanh, {x}));  // x + 0.044715 x^3 and friends: FMAs when allowed
  const auto spec = specs_of(plan_segment(b.build(), default_planner_options(Device::cuda(0)))).at(0);
  const jit::RenderedKernel rk = jit::render_cuda(*spec);
  const std::string ir = jit::render_pointwise_ir(*spec, rk);
  jit::CompileOptions no_fma = sm90();
  no_fma.fma = false;
  const auto with = histogram(jit::lto_ptx(ir, sm90(), false)), without = histogram(jit::lto_ptx(ir, no_fma, false));
  REQUIRE(!with.empty());
  REQUIRE(!without.empty());
  CHECK(with != without);
  CHECK(diff(histogram(jit::nvrtc_ptx(rk.source, sm90())), with).empty());
  CHECK_MESSAGE(diff(histogram(jit::nvrtc_ptx(rk.source, no_fma)), without).empty(),
                diff(histogram(jit::nvrtc_ptx(rk.source, no_fma)), without));
}

TEST_CASE("lto: IR that libNVVM refuses is an error with its log, not a crash" * doctest::skip(kNoLto)) {
  const std::string ir = "this is not IR";
  const jit::NvrtcOutput out = jit::lto_compile({{&ir, "broken", {}}}, sm90(), false);
  CHECK_FALSE(out.ok);
  CHECK(out.error.find("libNVVM") != std::string::npos);
  CHECK(!out.log.empty());
}

TEST_CASE("lto: linked kernels give NVRTC's values, bit for bit" * doctest::skip(kNoLto || !cuda_available())) {
  for (const OpCase& c : op_cases()) {
    INFO(c.name);
    const std::vector<Tensor> xs = random_externals(c.seg, 17, -3.0, 3.0);
    std::vector<Tensor> gpu;
    for (const Tensor& t : xs) gpu.push_back(t.to(Device::cuda(0)));
    std::vector<std::vector<double>> results[2];
    for (int lto = 0; lto < 2; ++lto) {
      PlannedSegment p = plan_segment(c.seg, default_planner_options(Device::cuda(0)));
      jit::CompileOptions o = jit::default_compile_options();
      o.lto = lto == 1;
      jit::KernelCompiler compiler(1, "");
      REQUIRE(compile_plan(p, compiler, o) == 0);
      const std::vector<Tensor> got = poisoned_values(p, gpu);
      run_plan(p, got, Stream::current(Device::cuda(0)).handle());
      synchronize(Device::cuda(0));
      for (const ValueRef& r : c.seg.outputs) results[lto].push_back(got[c.seg.value_id(r)].to_doubles());
    }
    REQUIRE(results[0].size() == results[1].size());
    for (size_t k = 0; k < results[0].size(); ++k) {
      const auto& a = results[0][k];
      const auto& l = results[1][k];
      REQUIRE(a.size() == l.size());
      size_t first = a.size();
      for (size_t i = 0; i < a.size() && first == a.size(); ++i)
        if (!(a[i] == l[i] || (a[i] != a[i] && l[i] != l[i]))) first = i;
      CHECK_MESSAGE(first == a.size(), "output ", k, " differs at ", first, ": nvrtc ", a[first], ", linked ", l[first]);
    }
  }
}

TEST_CASE("lto: the op library is kept in the kernel cache's directory for the next process" * doctest::skip(kNoLto)) {
  TempDir dir("lto_library");
  jit::DiskCache disk(dir.path.string());
  REQUIRE(disk.enabled());
  jit::CompileOptions o = sm90();
  o.lto = true;
  jit::forget_lto_libraries_for_testing();  // as in a fresh process
  const jit::LtoLibraryInfo built = jit::lto_library(o, false, &disk);
  REQUIRE(built.ok);
  CHECK_FALSE(built.from_disk);
  const auto entries = dir.files();
  REQUIRE(entries.size() == 1);
  // The next process reads it back, and kernels link against what it read.
  jit::forget_lto_libraries_for_testing();
  const jit::LtoLibraryInfo read = jit::lto_library(o, false, &disk);
  CHECK(read.ok);
  CHECK(read.from_disk);
  CHECK(read.ms < built.ms);
  const std::vector<OpCase> cases = op_cases();
  const OpCase& c = cases.front();
  const auto spec = specs_of(plan_segment(c.seg, default_planner_options(Device::cuda(0)))).at(0);
  const std::string ir = jit::render_pointwise_ir(*spec, jit::render_cuda(*spec));
  const jit::NvrtcOutput linked = jit::lto_compile({{&ir, "k", {}}}, o, false, &disk);
  CHECK_MESSAGE(linked.ok, linked.error, "\n", linked.log);
  // A corrupt entry is ignored and the library compiled (and written) again.
  {
    std::ofstream f(entries[0], std::ios::binary | std::ios::trunc);
    f << "LFKC not an entry";
  }
  jit::forget_lto_libraries_for_testing();
  const jit::LtoLibraryInfo rebuilt = jit::lto_library(o, false, &disk);
  CHECK(rebuilt.ok);
  CHECK_FALSE(rebuilt.from_disk);
  jit::forget_lto_libraries_for_testing();
  CHECK(jit::lto_library(o, false, &disk).from_disk);
  jit::forget_lto_libraries_for_testing();
}

TEST_CASE("lto: warm_up pays the library and the first link before any kernel" * doctest::skip(kNoLto)) {
  TempDir dir("lto_warm_up");
  jit::CompileOptions o = sm90();
  o.lto = true;
  jit::forget_lto_libraries_for_testing();
  jit::KernelCompiler compiler(1, dir.path.string());
  const jit::CompileResult w = compiler.warm_up(o).get();
  CHECK_MESSAGE(w.error.empty(), w.error, "\n", w.log);
  CHECK(w.worker != std::this_thread::get_id());  // on the arena, never the caller's thread
  // Both flavours are built (and on disk for the next process); no kernel was compiled.
  CHECK(jit::lto_library(o, false).ok);
  CHECK(jit::lto_library(o, true).ok);
  CHECK(dir.files().size() == 2);
  CHECK(compiler.stats().programs == 0);
  CHECK(compiler.stats().submitted == 0);
  // A second process's warm-up reads both.
  jit::forget_lto_libraries_for_testing();
  jit::KernelCompiler second(1, dir.path.string());
  CHECK(second.warm_up(o).get().error.empty());
  CHECK(jit::lto_library(o, false).from_disk);
  CHECK(jit::lto_library(o, true).from_disk);
  jit::forget_lto_libraries_for_testing();
}
