// A decode layer's rotary inside its Q/K/V GEMV (planner/rotary_epilogue.hpp, GemvRope in
// kernels/cuda/gemv.hpp): which plans fold it, which do not, and the values -- on the CPU the
// plan's fallback order (the product, then the rotary) against eager; on CUDA the GEMV that
// rotates as it writes, bit for bit against the same plan with the rotary as its own step, and
// against CPU eager to the dtype's tolerance. CUDA cases skip without a GPU.
#include "livefuse/config.hpp"
#include "livefuse/inspect.hpp"
#include "tests/planner/planner_util.hpp"

using namespace plantest;

namespace {

struct Layer {
  int64_t rows = 1, hidden = 64, hq = 4, hk = 2, d = 16;
  DType dtype = DType::f32;
  bool norm = true;   // a lone rms_norm before Q/K/V (folds into the GEMV at the default level)
  bool bias = false;  // Q/K/V with biases (Qwen's)
  bool q_escapes = false;  // q's product (before the rotary) is also an output
};

struct LayerSegment {
  Segment seg;
  int q_product = -1;  // value id of q's linear output (the GEMV that rotates never writes it)
};

// Q/K/V of one decode step as examples/decoder writes it: [norm,] three linears over one input,
// each viewed as [rows, 1, heads, d], then q's and k's rotate-half rotaries.
LayerSegment layer_segment(const Layer& l) {
  SegmentBuilder b;
  ValueRef x = b.input({l.rows, 1, l.hidden}, l.dtype);
  if (l.norm) x = b.add(OpId::rms_norm, {x, b.input({l.hidden}, l.dtype)}, norm_attrs(1e-6, true, false));
  LayerSegment r;
  ValueRef q_product;
  const auto project = [&](int64_t heads, bool first) {
    std::vector<ValueRef> in{x, b.input({heads * l.d, l.hidden}, l.dtype)};
    if (l.bias) in.push_back(b.input({heads * l.d}, l.dtype));
    const ValueRef y = b.add(OpId::linear, in, linear_attrs(l.bias));
    if (first) q_product = y;
    if (first && l.q_escapes) b.output(y);
    return b.add(OpId::reshape, {y}, ints({l.rows, 1, heads, l.d}));
  };
  const ValueRef q = project(l.hq, true), k = project(l.hk, false), v = project(l.hk, false);
  const ValueRef cos = b.input({l.rows, 1, 1, l.d}, l.dtype), sin = b.input({l.rows, 1, 1, l.d}, l.dtype);
  const auto rotate = [&](const ValueRef& t) {
    const ValueRef hi = b.add(OpId::slice, {t}, ints({3, l.d / 2, l.d, 1}));
    const ValueRef lo = b.add(OpId::slice, {t}, ints({3, 0, l.d / 2, 1}));
    const ValueRef half = b.add(OpId::concat, {b.add(OpId::neg, {hi}), lo}, ints({3}));
    return b.add(OpId::add, {b.add(OpId::mul, {t, cos}), b.add(OpId::mul, {half, sin})});
  };
  b.output(rotate(q));
  b.output(rotate(k));
  b.output(v);
  r.seg = b.build();
  r.q_product = r.seg.value_id(q_product);  // (ids count every external, cos and sin too)
  return r;
}

const GemmStep* rotating_gemm(const PlannedSegment& p) {
  for (const Step& s : p.steps)
    if (const auto* g = std::get_if<GemmStep>(&s.body); g && !g->rotary.parts.empty()) return g;
  return nullptr;
}

int rotary_steps(const PlannedSegment& p) {
  int n = 0;
  for (const Step& s : p.steps) n += std::holds_alternative<RotaryStep>(s.body) ? 1 : 0;
  return n;
}

PlannerOptions cuda_options(bool rotary) {
  PlannerOptions o = default_planner_options(Device::cuda(0));
  o.gemv_rotary = rotary;
  return o;
}

}  // namespace

TEST_CASE("rotary gemv: a one-row Q/K/V product takes q's and k's rotary, one launch with the norm") {
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (bool norm : {true, false})
      for (bool bias : {false, true}) {
        Layer l;
        l.dtype = dt, l.norm = norm, l.bias = bias;
        const LayerSegment s = layer_segment(l);
        const PlannedSegment p = plan_segment(s.seg, cuda_options(true));
        const std::string what = std::string(dtype_name(dt)) + (norm ? " norm" : "") + (bias ? " bias" : "");
        INFO(what << "\n" << p.describe());
        const GemmStep* g = rotating_gemm(p);
        REQUIRE(g != nullptr);
        CHECK(g->rotary.parts.size() == 2);
        CHECK(g->siblings.size() == 3);
        CHECK(rotary_steps(p) == 0);
        CHECK(p.num_kernels() == 1);  // the norm, Q/K/V and both rotaries: one GEMV
        bool decided = false;
        for (const planner::Decision& d : p.decisions)
          decided = decided || (d.what.find("runs inside the GEMV") != std::string::npos &&
                                d.reason.find("rotates q and k") != std::string::npos);
        CHECK(decided);
        // The switch keeps the rotary a step of its own: one launch more.
        const PlannedSegment off = plan_segment(s.seg, cuda_options(false));
        CHECK(rotating_gemm(off) == nullptr);
        CHECK(rotary_steps(off) == 1);
        CHECK(off.num_kernels() == 2);
      }
}

TEST_CASE("rotary gemv: not folded where the GEMV could not rotate or a value would be lost") {
  {  // two rows (a batch of two): the GEMV rotates one row only
    Layer l;
    l.rows = 2;
    const PlannedSegment p = plan_segment(layer_segment(l).seg, cuda_options(true));
    INFO(p.describe());
    CHECK(rotating_gemm(p) == nullptr);
    CHECK(rotary_steps(p) == 1);
  }
  {  // q's product is observable: the GEMV would not write it
    Layer l;
    l.q_escapes = true;
    const PlannedSegment p = plan_segment(layer_segment(l).seg, cuda_options(true));
    INFO(p.describe());
    CHECK(rotating_gemm(p) == nullptr);
  }
  {  // the CPU's plans keep the rotary a step (the fold is the CUDA GEMV's)
    const PlannedSegment p = plan_segment(layer_segment(Layer{}).seg, default_planner_options(Device::cpu()));
    CHECK(rotating_gemm(p) == nullptr);
  }
}

TEST_CASE("rotary gemv: the folded plan's fallback (the product, then the rotary) gives eager's values") {
  // A CUDA plan run on CPU tensors takes the step's fallback order: what a call the GEMV
  // cannot take runs on CUDA too.
  for (DType dt : {DType::f32, DType::bf16})
    for (bool norm : {true, false}) {
      Layer l;
      l.dtype = dt, l.norm = norm, l.bias = true;
      const LayerSegment s = layer_segment(l);
      const PlannerOptions o = cuda_options(true);
      const std::string what = std::string(dtype_name(dt)) + (norm ? " norm" : "");
      INFO(what);
      const PlannedSegment p = check_against_eager(s.seg, 21, -1, -1, &o);
      CHECK(rotating_gemm(p) != nullptr);
    }
}

namespace {

// The plan with the rotary in the GEMV against the plan with it as its own step, both on CUDA:
// the same bits (the kernels share their sums and the rotary's arithmetic), the GEMV having
// really rotated (q's product, which only the fallback writes, is still poison), and both
// within the dtype's tolerance of CPU eager.
void check_gpu(const Layer& l, uint64_t seed) {
  const LayerSegment s = layer_segment(l);
  const std::vector<Tensor> xs_cpu = random_externals(s.seg, seed);
  std::vector<Tensor> xs;
  for (const Tensor& t : xs_cpu) xs.push_back(t.to(Device::cuda(0)));
  const std::vector<Tensor> want = eager_values(s.seg, xs_cpu);
  std::vector<std::vector<Tensor>> got;
  for (bool rotary : {true, false}) {
    PlannedSegment p = plan_segment(s.seg, cuda_options(rotary));
    INFO((rotary ? "in the GEMV\n" : "its own step\n") << p.describe());
    CHECK(compile_plan(p, jit::KernelCompiler::global(), jit::default_compile_options()) == 0);
    CHECK((rotating_gemm(p) != nullptr) == rotary);
    got.push_back(poisoned_values(p, xs));
    run_plan(p, got.back(), Stream::current(Device::cuda(0)).handle());
    synchronize(Device::cuda(0));
  }
  // poisoned_values' -777, as the dtype holds it (bf16: -776).
  const double poison = full({1}, -777.0, l.dtype, Device::cpu()).to_doubles()[0];
  CHECK_MESSAGE(got[0][s.q_product].to_doubles()[0] == poison, "the GEMV did not rotate (the fallback wrote q's product)");
  CHECK(got[1][s.q_product].to_doubles()[0] != poison);
  for (const ValueRef& r : s.seg.outputs) {
    const int v = s.seg.value_id(r);
    const auto a = got[0][v].to_doubles(), b = got[1][v].to_doubles(), w = want[v].to_doubles();
    INFO("output " << v << " " << dtype_name(l.dtype) << s.seg.shape(r).str());
    size_t bad = a.size();
    for (size_t i = 0; i < a.size() && bad == a.size(); ++i)
      if (!(a[i] == b[i] || (a[i] != a[i] && b[i] != b[i]))) bad = i;
    CHECK_MESSAGE(bad == a.size(), "in the GEMV vs its own step, first difference at " << bad << ": " << a[bad]
                                                                                       << " vs " << b[bad]);
    const double tol = l.dtype == DType::f32 ? 1e-4 : lftest::tolerance(l.dtype) * 4;
    size_t off = 0;
    CHECK_MESSAGE(lftest::allclose(a, w, tol, tol, &off),
                  "against CPU eager at " << off << ": " << a[off] << " vs " << w[off]);
  }
}

}  // namespace

LF_CUDA_TEST_CASE("rotary gemv gpu: q and k rotated as the GEMV writes them, the bits of the rotary step") {
  const auto rotating = [] { return find_counter(counters(), "cuda.gemv", "rotary").value_or(0); };
  const uint64_t rotating0 = rotating();
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (bool norm : {true, false})
      for (bool bias : {false, true}) {
        Layer l;
        l.dtype = dt, l.norm = norm, l.bias = bias;
        const std::string what = std::string(dtype_name(dt)) + (norm ? " norm" : "") + (bias ? " bias" : "");
        INFO(what);
        check_gpu(l, 31);
      }
  // The small cases take one warp a weight row: a pair's halves meet in shared memory. Llama-1B's
  // heads (32 q, 8 k/v of 64 over 2048 bf16) take two warps a row, likewise; rows of 4096 f16
  // take four warps a row, so one warp takes both halves of a pair (two rows); a head of 128.
  Layer llama;
  llama.hidden = 2048, llama.hq = 32, llama.hk = 8, llama.d = 64, llama.dtype = DType::bf16;
  check_gpu(llama, 32);
  for (bool norm : {false, true}) {
    Layer quad;
    quad.hidden = 4096, quad.hq = 4, quad.hk = 2, quad.d = 64, quad.dtype = DType::f16, quad.norm = norm;
    check_gpu(quad, 34);
  }
  Layer wide;
  wide.hidden = 512, wide.hq = 4, wide.hk = 1, wide.d = 128, wide.dtype = DType::f16, wide.bias = true;
  check_gpu(wide, 33);
  CHECK(rotating() > rotating0);  // the GEMVs that rotated, counted as launched
}
