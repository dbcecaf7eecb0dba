// Generated CUDA compiles with NVRTC for sm_80 and sm_90 for every strategy and dtype. NVRTC
// needs no GPU: these run in CI and skip only in a CPU-only build.
#include <algorithm>
#include <cstdlib>
#include <set>
#include <thread>

#include "kernels/jit/kernel_compiler.hpp"
#include "kernels/jit/cuda_launch.hpp"
#include "kernels/jit/render.hpp"
#include "kernels/jit/row_schedule.hpp"
#include "kernels/jit/row_tuner.hpp"
#include "tests/planner/planner_util.hpp"

using namespace plantest;

namespace {

const bool kNoNvrtc = !jit::nvrtc_available();

float twice_plus(float a, float b, float) { return 2 * a + b; }


// Segments covering every strategy for one float dtype.
std::vector<Segment> strategy_segments(DType dt) {
  std::vector<Segment> out;
  {  // vertical elementwise with broadcast, scalar, where, casts, two outputs
    SegmentBuilder b;
    const ValueRef x = b.input({64, 33}, dt), y = b.input({33}, dt);
    const ValueRef a = b.add(OpId::gelu, {b.add(OpId::add, {x, y})});
    const ValueRef m = b.scalar_op(OpId::minimum, a, 0.5);
    const ValueRef c = b.add(OpId::cast, {m}, cast_attrs(DType::boolean));
    const ValueRef w = b.add(OpId::where, {c, a, x});
    const ValueRef i = b.add(OpId::cast, {w}, cast_attrs(DType::i32));
    const ValueRef l = b.add(OpId::cast, {b.scalar_op(OpId::add, i, 3)}, cast_attrs(DType::i64));
    b.output(w);
    b.output(l);
    out.push_back(b.build());
  }
  {  // residual + layer_norm + gelu, softmax with mask, rms_norm, sum/mean/max
    SegmentBuilder b;
    const ValueRef x = b.input({8, 96}, dt), r = b.input({8, 96}, dt), w = b.input({96}, dt), bb = b.input({96}, dt);
    const ValueRef h = b.add(OpId::add, {x, r});
    b.output(h);
    b.output(b.add(OpId::gelu, {b.add(OpId::layer_norm, {h, w, bb}, norm_attrs(1e-5, true, true))}));
    out.push_back(b.build());
  }
  {
    SegmentBuilder b;
    const ValueRef s = b.input({2, 4, 64}, dt), m = b.input({1, 1, 64}, dt);
    b.output(b.add(OpId::softmax, {s, m}, softmax_attrs(0.125, true)));
    out.push_back(b.build());
  }
  {
    SegmentBuilder b;
    const ValueRef x = b.input({5, 40}, dt), w = b.input({40}, dt);
    b.output(b.add(OpId::rms_norm, {x, w}, norm_attrs(1e-6, true, false)));
    const ValueRef s = b.add(OpId::sum, {x}, dim_attrs(-1, false));
    const ValueRef mx = b.add(OpId::max, {x}, dim_attrs(-1, false));
    const ValueRef mn = b.add(OpId::mean, {x}, dim_attrs(-1, false));
    b.output(b.add(OpId::add, {b.add(OpId::sub, {s, mx}), mn}));
    out.push_back(b.build());
  }
  {  // horizontal + gemm tail
    SegmentBuilder b;
    const ValueRef x = b.input({16, 32}, dt), w = b.input({24, 32}, dt), z = b.input({100}, dt);
    Attrs lin;
    lin.push_int(0);
    lin.push_int(0);
    const ValueRef y = b.add(OpId::linear, {x, w}, lin);
    b.output(b.add(OpId::silu, {b.scalar_op(OpId::mul, y, 2.0)}));
    b.output(b.add(OpId::exp, {z}));
    b.output(b.add(OpId::tanh, {x}));
    out.push_back(b.build());
  }
  return out;
}

}  // namespace

TEST_CASE("nvrtc: every strategy and dtype compiles for sm_80 and sm_90" * doctest::skip(kNoNvrtc)) {
  jit::KernelCompiler compiler(2, "");
  const CustomOp op = register_elementwise("nvrtc_twice_plus", 2, "2.0f * a + b", twice_plus);
  std::set<std::string> kinds;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    std::vector<Segment> segs = strategy_segments(dt);
    SegmentBuilder cb;  // a custom op in a chain
    const ValueRef a = cb.input({77}, dt), c = cb.input({77}, dt);
    Attrs ca;
    ca.custom_id = op.id();
    cb.output(cb.add(OpId::exp, {cb.add(OpId::custom, {a, c}, ca)}));
    segs.push_back(cb.build());
    for (const Segment& seg : segs) {
      const PlannedSegment p = plan_segment(seg, default_planner_options(Device::cuda(0)));
      for (const auto& spec : specs_of(p)) {
        kinds.insert(spec->kind == jit::SpecKind::Row ? "row" : spec->parts.size() > 1 ? "horizontal" : "pointwise");
        auto all = std::make_shared<jit::KernelSpec>(*spec);
        all->variants = 0;  // every variant, not only the one the planner picked
        for (auto [arch, sp] : {std::pair{80, spec}, std::pair{90, spec}, std::pair{90, std::shared_ptr<const jit::KernelSpec>(all)}}) {
          jit::CompileOptions o;
          o.arch = arch;
          const jit::CompileResult r = compiler.compile(sp, o);
          INFO(sp->name << " " << dtype_name(dt) << " sm_" << arch << " variants " << sp->variants << "\n" << r.error << "\n" << r.log);
          REQUIRE(r.ok());
          CHECK(!r.kernel->cubin().empty());
          CHECK(r.kernel->stats.size() == r.kernel->rendered.variants.size());
          // ptxas' report (-v) gives registers and spills, when this NVRTC prints one.
          if (r.log.find("Used") != std::string::npos)
            for (const auto& st : r.kernel->stats) CHECK(st.registers > 0);
        }
      }
    }
  }
  CHECK(kinds == std::set<std::string>{"row", "horizontal", "pointwise"});
  const jit::CompilerStats st = compiler.stats();
  CHECK(st.failed == 0);
  CHECK(!st.compile_ms.empty());
}

TEST_CASE("nvrtc: compile_plan compiles a plan; a broken kernel becomes eager steps with its log" * doctest::skip(kNoNvrtc)) {
  jit::KernelCompiler compiler(1, "");
  const jit::CompileOptions o = sm90();
  const CustomOp bad = register_elementwise("nvrtc_broken", 1, "a +* no_such_function(a)", [](float a, float, float) { return a; });
  SegmentBuilder b;
  const ValueRef x = b.input({64});
  Attrs ca;
  ca.custom_id = bad.id();
  const ValueRef y = b.add(OpId::custom, {b.add(OpId::exp, {x})}, ca);
  b.output(b.add(OpId::neg, {y}));
  PlannedSegment p = plan_segment(b.build(), default_planner_options(Device::cuda(0)));
  CHECK(p.num_kernels() == 1);
  CHECK(compile_plan(p, compiler, o) == 1);
  CHECK(p.num_kernels() == 3);
  bool logged = false;
  for (const Decision& d : p.decisions) logged = logged || d.reason.find("not compiled") != std::string::npos;
  CHECK(logged);
  // The failure is data with NVRTC's log, not an exception.
  SegmentBuilder b2;
  b2.output(b2.add(OpId::custom, {b2.input({8})}, ca));
  const PlannedSegment p2 = plan_segment(b2.build(), default_planner_options(Device::cuda(0)));
  const jit::CompileResult r = compiler.compile(specs_of(p2).at(0), o);
  CHECK(!r.ok());
  CHECK(r.log.find("error") != std::string::npos);
  // The plan still runs correctly on the CPU with the unfused steps.
  const std::vector<Tensor> xs = random_externals(p.segment, 3);
  const std::vector<Tensor> want = eager_values(p.segment, xs);
  const std::vector<Tensor> got = poisoned_values(p, xs);
  run_plan(p, got);
  const int v = p.segment.value_id(p.segment.outputs[0]);
  CHECK(lftest::allclose(got[v].to_doubles(), want[v].to_doubles(), 1e-6, 1e-6));
}

TEST_CASE("nvrtc: LIVEFUSE_FMA=0 compiles with --fmad=false; jobs run off the caller's thread" * doctest::skip(kNoNvrtc)) {
  jit::CompileOptions o = sm90();
  o.fma = false;
  const auto flags = o.flags();
  CHECK(std::find(flags.begin(), flags.end(), "--fmad=false") != flags.end());
  CHECK(std::find(flags.begin(), flags.end(), "-arch=sm_90") != flags.end());
  // NVRTC 12.9+ has a compile cache of its own on GPU hosts; ours makes it pure cost: off.
  const std::string ver = jit::nvrtc_version();
  const int major = std::atoi(ver.c_str()), minor = std::atoi(ver.substr(ver.find('.') + 1).c_str());
  CHECK((std::find(flags.begin(), flags.end(), "--no-cache") != flags.end()) == (major > 12 || (major == 12 && minor >= 9)));
  jit::KernelCompiler compiler(1, "");
  SegmentBuilder b;
  b.output(b.add(OpId::sigmoid, {b.input({10})}));
  const auto spec = specs_of(plan_segment(b.build())).at(0);
  const jit::CompileResult r = compiler.compile(spec, o);
  REQUIRE(r.ok());
  CHECK(r.worker != std::this_thread::get_id());
  jit::CompileOptions fma = o;
  fma.fma = true;
  CHECK(jit::make_key(*spec, r.kernel->rendered, o).text != jit::make_key(*spec, r.kernel->rendered, fma).text);
}

TEST_CASE("nvrtc: LIVEFUSE_FAST_COMPILE: front end at -Ofc=min, ptxas at full strength; 0 compiles at full optimisation" * doctest::skip(kNoNvrtc)) {
  const std::string ver = jit::nvrtc_version();
  const int major = std::atoi(ver.c_str()), minor = std::atoi(ver.substr(ver.find('.') + 1).c_str());
  const bool has_ofc = major > 12 || (major == 12 && minor >= 8);
  auto has = [](const jit::CompileOptions& o, const char* flag) {
    const auto f = o.flags();
    return std::find(f.begin(), f.end(), flag) != f.end();
  };
  jit::CompileOptions fast = sm90(), full = sm90();
  full.fast_compile = false;
  CHECK(fast.fast_compile);  // the default
  CHECK(has(fast, "-Ofc=min") == has_ofc);
  CHECK(has(fast, "--ptxas-options=-Ofc=0") == has_ofc);
  CHECK_FALSE(has(full, "-Ofc=min"));
  CHECK_FALSE(has(full, "--ptxas-options=-Ofc=0"));

  SegmentBuilder b;  // a pointwise kernel and a row kernel
  const ValueRef x = b.input({64, 100}), w = b.input({100});
  b.output(b.add(OpId::gelu, {b.add(OpId::mul, {x, x})}));
  Attrs a;
  a.push_float(1e-5);
  a.push_int(1);
  a.push_int(0);
  b.output(b.add(OpId::layer_norm, {b.add(OpId::add, {x, x}), w}, a));
  const auto specs = specs_of(plan_segment(b.build()));
  REQUIRE(specs.size() == 2);
  jit::KernelCompiler compiler(1, "");
  auto with_fast = compiler.submit_batch(specs, fast);
  auto with_full = compiler.submit_batch(specs, full);
  for (size_t i = 0; i < specs.size(); ++i) {
    const jit::CompileResult f = with_fast[i].get(), g = with_full[i].get();
    REQUIRE_MESSAGE(f.ok(), f.error, "\n", f.log);
    REQUIRE_MESSAGE(g.ok(), g.error, "\n", g.log);
    CHECK_FALSE(f.cache_hit);
    CHECK_FALSE(g.cache_hit);  // keyed apart
    CHECK(f.kernel->key.text != g.kernel->key.text);
    // ptxas still reports registers per entry (the spill check depends on it).
    REQUIRE(!f.kernel->stats.empty());
    CHECK(f.kernel->stats[0].registers > 0);
    CHECK(f.log.find("Ofast-compile") == std::string::npos);  // the expected ptxas warning is dropped
  }
}

TEST_CASE("nvrtc: the rendered source uses the embedded helpers and the op table's expressions") {
  SegmentBuilder b;
  b.output(b.add(OpId::gelu_tanh, {b.input({10})}));
  const auto spec = specs_of(plan_segment(b.build())).at(0);
  const jit::RenderedKernel rk = jit::render_cuda(*spec);
  CHECK(rk.source.find("LF_HD float lf_gelu_tanh") != std::string::npos);  // lf_math.cuh itself
  CHECK(rk.source.find(std::string(op_info(OpId::gelu_tanh).expr)) != std::string::npos);
  CHECK(rk.source.find("lf_nat_f16") != std::string::npos);  // lf_fused.cuh
  CHECK(rk.variants.size() == 1);  // the planner asks for the one variant its shapes need
  jit::KernelSpec all = *spec;
  all.variants = 0;
  CHECK(jit::render_cuda(all).variants.size() == 6);
}

TEST_CASE("nvrtc: launch variant choice -- vec/strided, 32/64-bit, row cache/recompute, missing ones named") {
  auto kernel_for = [](const jit::KernelSpec& spec) {
    auto k = std::make_unique<jit::CompiledKernel>();
    k->rendered = jit::render_cuda(spec);
    k->variant_ok.assign(k->rendered.variants.size(), true);
    return k;
  };
  alignas(16) static float buf[16];
  auto arg = [&](const Shape& s) { return jit::TensorArg{buf, DType::f32, s, contiguous_strides(s)}; };
  SegmentBuilder b;
  b.output(b.add(OpId::exp, {b.add(OpId::add, {b.input({64}), b.input({64})})}));
  const auto spec = specs_of(plan_segment(b.build())).at(0);
  REQUIRE(spec->variants == jit::variant_bit(jit::Variant::VecExactI32));  // 64: whole packs of 4
  const auto k = kernel_for(*spec);
  auto geo = [&](const Shape& a, const Shape& bb, const Shape& out) {
    jit::PartBinding pb{out, {arg(a), arg(bb)}, {arg(out)}};
    return std::vector<jit::PartGeometry>{jit::make_geometry(spec->parts[0], spec->kind, pb)};
  };
  std::string err;
  jit::LaunchChoice c = jit::choose_launch(*spec, *k, geo({1000}, {1000}, {1000}), 48 << 10, &err);
  CHECK(err.empty());
  CHECK(c.variant == jit::Variant::VecExactI32);
  CHECK(c.grid == 1);  // 250 vectors of 4
  c = jit::choose_launch(*spec, *k, geo({1001}, {1001}, {1001}), 48 << 10, &err);  // a tail of 1
  CHECK(c.missing == jit::Variant::VecI32);
  err.clear();
  c = jit::choose_launch(*spec, *k, geo({1000}, {1}, {1000}), 48 << 10, &err);  // a broadcast operand
  CHECK(c.missing == jit::Variant::StridedI32);
  err.clear();
  c = jit::choose_launch(*spec, *k, geo({int64_t{3} << 30}, {int64_t{3} << 30}, {int64_t{3} << 30}), 48 << 10, &err);
  CHECK(c.missing == jit::Variant::VecExactI64);

  SegmentBuilder rb;
  rb.output(rb.add(OpId::softmax, {rb.input({4, 1000})}, softmax_attrs(1.0, false)));
  const auto rspec = specs_of(plan_segment(rb.build())).at(0);
  REQUIRE(rspec->variants == jit::variant_bit(jit::Variant::VecCacheI32));
  const auto rk = kernel_for(*rspec);
  auto rgeo = [&](const Shape& x) {
    jit::PartBinding pb{x, {arg(x)}, {arg(x)}};
    return std::vector<jit::PartGeometry>{jit::make_geometry(rspec->parts[0], rspec->kind, pb)};
  };
  err.clear();
  c = jit::choose_launch(*rspec, *rk, rgeo({4, 1000}), 48 << 10, &err);
  CHECK(err.empty());
  // Both register bodies are rendered; the pipelined one is the first choice (the launch may
  // run the plain one: row_tuner.hpp).
  CHECK(c.variant == jit::Variant::VecPipeI32);
  CHECK(std::count(rk->rendered.variants.begin(), rk->rendered.variants.end(), jit::Variant::VecCacheI32) == 1);
  // The row stays in registers: each thread owns row_regs columns at most; f32 rows stage the
  // next row in registers, so no shared memory.
  REQUIRE(rk->rendered.row_regs > 0);
  CHECK(c.smem == 0);
  CHECK(static_cast<int64_t>(c.block_x) * rk->rendered.row_regs >= 1000);
  CHECK(c.block_x * c.block_y <= jit::kRowMaxThreads);
  c = jit::choose_launch(*rspec, *rk, rgeo({4, 100000}), 48 << 10, &err);  // rows too long to hold
  CHECK(c.missing == jit::Variant::VecRecomputeI32);
  err.clear();
  c = jit::choose_launch(*rspec, *rk, rgeo({4, 999}), 48 << 10, &err);  // odd rows: no 16-byte packs
  CHECK(c.missing == jit::Variant::CacheI32);
}

// A decoder's head: layer_norm of the last position of [1, T, C], a slice made inside the plan.
// The view's strides and address are known only at launch, so both the packed and the
// one-column variant are compiled and the launch takes packs where the view allows them (the
// planner asked for the one-column variant alone before: a one-row norm of 16 us on an H200).
TEST_CASE("nvrtc: a row read through a view inside the plan gets packs where the launch finds them") {
  alignas(16) static uint16_t buf[4 * 768 + 8];
  SegmentBuilder b;
  const ValueRef h = b.input({1, 4, 768}, DType::f16);
  const ValueRef last = b.add(OpId::slice, {h}, [] {
    Attrs a;
    for (int64_t v : {1, 3, 4, 1}) a.push_int(v);  // dim 1, [3, 4)
    return a;
  }());
  b.output(b.add(OpId::layer_norm, {last, b.input({768}, DType::f16), b.input({768}, DType::f16)},
                 norm_attrs(1e-5, true, true)));
  const auto specs = specs_of(plan_segment(b.build()));
  REQUIRE(specs.size() == 1);
  const jit::KernelSpec& spec = *specs[0];
  CHECK(spec.variants == (jit::variant_bit(jit::Variant::VecCacheI32) | jit::variant_bit(jit::Variant::CacheI32)));
  auto k = std::make_unique<jit::CompiledKernel>();
  k->rendered = jit::render_cuda(spec);
  k->variant_ok.assign(k->rendered.variants.size(), true);
  // The row at element `first` of the buffer, the weight and bias behind it, the output at 0.
  auto choose = [&](int64_t first) {
    const Shape row{1, 1, 768}, w{768};
    auto at = [&](int64_t e, const Shape& s) { return jit::TensorArg{buf + e, DType::f16, s, contiguous_strides(s)}; };
    jit::PartBinding pb{row, {at(first, row), at(0, w), at(0, w)}, {at(0, row)}};
    std::string err;
    const std::vector<jit::PartGeometry> geo{jit::make_geometry(spec.parts[0], spec.kind, pb)};
    const jit::LaunchChoice c = jit::choose_launch(spec, *k, geo, 48 << 10, &err);
    CHECK(err.empty());
    CHECK(!c.missing);
    return c.variant;
  };
  const jit::Variant aligned = choose(3 * 768);  // position 3: 4608 bytes in, 16-byte aligned
  CHECK((aligned == jit::Variant::VecCacheI32 || aligned == jit::Variant::VecPipeI32));
  CHECK(choose(3 * 768 + 1) == jit::Variant::CacheI32);  // 2 bytes off: one column at a time
}

TEST_CASE("nvrtc: register rows share an array between cached values whose lifetimes do not overlap") {
  // softmax: the scaled logits (loop 0 -> 1) and their exponentials (loop 1 -> 2) take turns in
  // one array; softmax(x) * x holds x from loop 0 to 2 beside the exponentials: two arrays.
  for (bool times_x : {false, true}) {
    SegmentBuilder b;
    const ValueRef x = b.input({64, 1024}, DType::f16);
    const ValueRef sm = b.add(OpId::softmax, {x}, softmax_attrs(1.0, false));
    b.output(times_x ? b.add(OpId::mul, {sm, x}) : sm);
    const auto specs = specs_of(plan_segment(b.build(), default_planner_options(Device::cuda(0))));
    REQUIRE(specs.size() == 1);
    const jit::KernelPart& part = specs[0]->parts[0];
    const jit::RowSchedule s = jit::schedule_row(part, jit::RowCacheMode::CacheAll);
    INFO("times x " << times_x);
    CHECK(s.narrays == (times_x ? 2 : 1));
    CHECK(s.narrays == s.live);
    // Every value read back from an array was written to it, and no other value written to that
    // array in between (home loop strictly inside its lifetime).
    std::vector<int> last_read(part.instrs.size(), -1);
    for (int p = 0; p < s.nloops; ++p)
      for (int x2 : s.loop_cache_read[p]) last_read[x2] = p;
    for (size_t a2 = 0; a2 < part.instrs.size(); ++a2)
      for (size_t b2 = 0; b2 < part.instrs.size(); ++b2)
        if (a2 != b2 && s.reg_array[a2] >= 0 && s.reg_array[a2] == s.reg_array[b2])
          CHECK((s.home[b2] >= last_read[a2] || s.home[a2] >= last_read[b2]));
    const jit::RenderedKernel rk = jit::render_cuda(*specs[0]);
    CHECK((rk.source.find("float lf_k1[") != std::string::npos) == times_x);
    CHECK(rk.source.find("float lf_k2[") == std::string::npos);
  }
}

TEST_CASE("nvrtc: f16/bf16 contiguous rows read 16-byte packs once and keep the row in registers") {
  auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
  };
  struct RowCase {
    const char* name;
    Segment seg;
    size_t full_inputs;  // per-element operands, each read once
  };
  std::vector<RowCase> cases;
  for (DType dt : {DType::f16, DType::bf16}) {
    {
      SegmentBuilder b;
      const ValueRef x = b.input({256, 1024}, dt), w = b.input({1024}, dt), bb = b.input({1024}, dt);
      b.output(b.add(OpId::layer_norm, {x, w, bb}, norm_attrs(1e-5, true, true)));
      cases.push_back({"layer_norm", b.build(), 3});
    }
    {
      SegmentBuilder b;
      b.output(b.add(OpId::softmax, {b.input({256, 1024}, dt)}, softmax_attrs(0.125, false)));
      cases.push_back({"softmax", b.build(), 1});
    }
    {
      SegmentBuilder b;
      b.output(b.add(OpId::softmax, {b.input({8, 64, 512}, dt), b.input({1, 1, 512}, dt)},
                     softmax_attrs(0.125, true)));
      cases.push_back({"softmax with mask", b.build(), 2});
    }
    {
      SegmentBuilder b;
      const ValueRef x = b.input({256, 4096}, dt), w = b.input({4096}, dt);
      b.output(b.add(OpId::rms_norm, {x, w}, norm_attrs(1e-5, true, false)));
      cases.push_back({"rms_norm", b.build(), 2});
    }
  }
  jit::KernelCompiler compiler(1, "");
  for (const RowCase& c : cases) {
    const auto specs = specs_of(plan_segment(c.seg, default_planner_options(Device::cuda(0))));
    REQUIRE(specs.size() == 1);
    const jit::KernelSpec& spec = *specs[0];
    const jit::RenderedKernel rk = jit::render_cuda(spec);
    INFO(c.name << " " << dtype_name(c.seg.dtype(c.seg.outputs[0])) << "\n" << rk.source);
    CHECK(spec.variants == jit::variant_bit(jit::Variant::VecCacheI32));
    CHECK(rk.row_vec == 8);  // 8 halves = 16 bytes per access
    CHECK(rk.row_regs >= 8);
    CHECK(rk.row_regs % 8 == 0);
    // Every per-element operand is loaded as 16-byte packs once (no second pass over global
    // memory), the output stored as 16-byte packs; no 2-byte column accesses, no shared cache.
    // Two bodies (plain and pipelined), each reading each operand once; the pipelined one
    // copies the next row's first-loop operands into shared memory (cp.async) and reads them
    // from there. Operands the loops after a reduction read (a norm's weight and bias) are
    // loaded at the row's start into registers of their own (lf_e: render_row.cpp, early loads).
    CHECK(count(rk.source, "lf_ldpack<8>(lf_s") + count(rk.source, "lf_ldpack<8>(lf_e") == 2 * c.full_inputs);
    CHECK(count(rk.source, "lf_stpack<8>(((lf_u16*)") == 2);
    CHECK(count(rk.source, "lf_cp_async16((lf_stage") == 2 * (rk.row_stage_bytes / 16 / (rk.row_regs / 8)));
    CHECK(rk.row_stage_bytes > 0);
    CHECK(count(rk.source, " + lf_c * c") == 0);
    CHECK(rk.source.find("lf_cache") == std::string::npos);
    CHECK(rk.source.find("lf_k") != std::string::npos);  // the register-held row
    // The launch picks it for a contiguous, aligned row: no dynamic shared memory.
    alignas(16) static float buf[16];
    const DType dt = c.seg.dtype(c.seg.outputs[0]);
    auto arg = [&](const Shape& s) { return jit::TensorArg{buf, dt, s, contiguous_strides(s)}; };
    jit::PartBinding pb;
    pb.shape = c.seg.shape(c.seg.outputs[0]);
    for (const ExternalInfo& e : c.seg.externals) pb.inputs.push_back(arg(e.shape));
    pb.outputs.push_back(arg(pb.shape));
    const std::vector<jit::PartGeometry> geo = {jit::make_geometry(spec.parts[0], spec.kind, pb)};
    jit::CompiledKernel k;
    k.rendered = rk;
    k.variant_ok.assign(rk.variants.size(), true);
    std::string err;
    const jit::LaunchChoice lc = jit::choose_launch(spec, k, geo, 48 << 10, &err);
    CHECK(err.empty());
    CHECK(lc.variant == jit::Variant::VecPipeI32);
    CHECK(lc.smem == lc.block_x * lc.block_y * static_cast<unsigned>(rk.row_stage_bytes));
    // No room for the staging area: the plain body, which needs no shared memory.
    const jit::LaunchChoice tight = jit::choose_launch(spec, k, geo, 1024, &err);
    CHECK(err.empty());
    CHECK(tight.variant == jit::Variant::VecCacheI32);
    CHECK(tight.smem == 0);
    CHECK(static_cast<int64_t>(lc.block_x) * rk.row_regs >= geo[0].cols);
    if (!kNoNvrtc) {  // and it compiles without spilling
      const jit::CompileOptions o = sm90();
      const jit::CompileResult r = compiler.compile(specs[0], o);
      REQUIRE(r.ok());
      for (const auto& st : r.kernel->stats) CHECK(st.spill_bytes == 0);
    }
  }
}

TEST_CASE("nvrtc: ptxas report parsing (registers, spills)") {
  const std::string log =
      "ptxas info    : Compiling entry function 'k_vec_i32' for 'sm_90'\n"
      "ptxas info    : Function properties for k_vec_i32\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 24 registers, used 0 barriers\n"
      "ptxas info    : Function properties for k_strided_i64\n"
      "ptxas         .     48 bytes stack frame, 40 bytes spill stores, 36 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers\n";
  const auto e = jit::parse_ptxas_log(log);
  REQUIRE(e.size() == 2);
  CHECK(e[0].name == "k_vec_i32");
  CHECK(e[0].registers == 24);
  CHECK(e[0].spill_bytes == 0);
  CHECK(e[1].registers == 255);
  CHECK(e[1].spill_bytes == 76);
}

TEST_CASE("row tuner: one cold launch, then both bodies timed in turn; the faster median is kept") {
  using jit::BodyTuner;
  for (bool guess : {false, true}) {
    BodyTuner t(guess);
    INFO("guess " << guess);
    // Nothing is timed while the caller cannot time (a graph capture): the guess runs.
    BodyTuner::Pick p = t.next(false);
    CHECK(p.pipelined == guess);
    CHECK_FALSE(p.timed);
    p = t.next(true);  // cold
    CHECK(p.pipelined == guess);
    CHECK_FALSE(p.timed);
    std::vector<bool> bodies;
    for (int i = 0; i < 2 * BodyTuner::kSamples; ++i) {
      p = t.next(true);
      CHECK(p.timed);
      bodies.push_back(p.pipelined);
    }
    // Alternating, the guess first; then, with every result pending, untimed launches of the guess.
    for (size_t i = 0; i < bodies.size(); ++i) CHECK(bodies[i] == (i % 2 == 0 ? guess : !guess));
    p = t.next(true);
    CHECK_FALSE(p.timed);
    CHECK(p.pipelined == guess);
    CHECK_FALSE(t.decided());
    // The other body is 10% faster (one outlier does not move a median of three).
    for (int i = 0; i < BodyTuner::kSamples; ++i) {
      t.result(guess, i == 0 ? 5.0 : 100.0);
      CHECK_FALSE(t.decided());
      t.result(!guess, 90.0);
    }
    CHECK(t.decided());
    CHECK(t.choice() == !guess);
    CHECK(t.median_us(guess) == 100.0);
    CHECK(t.median_us(!guess) == 90.0);
    p = t.next(true);
    CHECK(p.pipelined == !guess);
    CHECK_FALSE(p.timed);
  }
  // Within 2%: the guess stands. A failed timing: the guess stands, nothing more is timed.
  BodyTuner close(true);
  for (int i = 0; i < BodyTuner::kSamples; ++i) {
    close.result(true, 100.0);
    close.result(false, 98.5);
  }
  CHECK(close.decided());
  CHECK(close.choice());
  BodyTuner failed(false);
  (void)failed.next(true);
  CHECK(failed.next(true).timed);
  failed.abandon();
  CHECK(failed.decided());
  CHECK_FALSE(failed.choice());
  CHECK_FALSE(failed.next(true).timed);
}

TEST_CASE("nvrtc: register rows choose the pipelined or the plain body as measured on the H200") {
  // The H200 cases behind the guess a launch shape starts from (cuda_launch.hpp): blocks resident
  // per SM of each body at its launch shape, from their compiled registers, and which one was
  // faster.
  struct Case {
    const char* name;
    int plain, pipelined, warps_per_row;
    bool late_loads, pipelined_faster;
  };
  const Case cases[] = {
      {"layer_norm bf16 1024 (47 vs 64 regs)", 5, 4, 2, true, true},
      {"rms_norm bf16 1024 (34 vs 48 regs)", 6, 5, 2, true, true},
      {"softmax f16 1024 (32 vs 60 regs)", 8, 4, 2, false, true},
      {"masked softmax f16 512 (31 vs 61 regs)", 8, 4, 1, false, false},
      {"layer_norm f32 1024 (49 vs 88 regs)", 4, 2, 2, true, false},
      {"layer_norm f32 4096 (49 vs 88 regs)", 4, 2, 8, true, false},
      {"softmax f32 1024 (38 vs 76 regs)", 6, 3, 2, false, true},
      {"softmax f32 8192 (38 vs 76 regs, 512-thread rows)", 4, 1, 16, false, true},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    CHECK(jit::prefer_pipelined_rows(c.plain, c.pipelined, c.warps_per_row, c.late_loads) == c.pipelined_faster);
  }
}

TEST_CASE("nvrtc: rows that one wave of the pipelined body holds once a thread-row run the plain body") {
  // 132 SMs, 2 pipelined blocks an SM of 8 rows: 2112 thread-rows. A launch shape holds rows up
  // to twice its first launch's (row_shape_key: rows to within a power of two).
  CHECK(jit::rows_in_one_pass(1, 132, 2, 8));      // a decode step's norm
  CHECK(jit::rows_in_one_pass(128, 132, 2, 8));    // BERT at batch 1
  CHECK(jit::rows_in_one_pass(1024, 132, 2, 8));   // batch 8: 2048 <= 2112
  CHECK(!jit::rows_in_one_pass(1100, 132, 2, 8));  // this shape may see 2200 rows
  CHECK(!jit::rows_in_one_pass(65536, 132, 4, 8));
  CHECK(!jit::rows_in_one_pass(128, 132, 1, 1));   // one row a block, one block an SM
}
