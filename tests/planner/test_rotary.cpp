// The rotary template (pass_rotary, kernels/{cpu,cuda}/rotary): what it matches and refuses,
// what the plan becomes, and its values against eager -- bit for bit, since the kernels round
// each product and the sum as eager's mul, mul and add do. CUDA cases skip without a GPU.
#include <limits>

#include "planner/rotary_step.hpp"
#include "tests/planner/planner_util.hpp"

using namespace plantest;

namespace {

struct RotaryShape {
  int64_t b = 2, t = 3, hq = 4, hk = 2, d = 16;
  DType dtype = DType::f32;
  bool strided = false;  // q and k as permuted views of [b, heads, t, d] (not reshapes)
  bool swapped = false;  // operands in the other order: mul(cos, x), mul(sin, half), add(b, a)
};

enum class Escape { none, half_output, product_read_twice };

struct RotarySegment {
  Segment seg;
  int half_q = -1;  // value id of q's rotate_half (concat)
};

// HF's apply_rotary_pos_emb for q and k (examples/decoder/decoder.cpp, rotate()).
RotarySegment rotary_segment(const RotaryShape& s, Escape escape = Escape::none) {
  SegmentBuilder b;
  const auto heads = [&](int64_t h) {
    if (s.strided)
      return b.add(OpId::permute, {b.input({s.b, h, s.t, s.d}, s.dtype)}, ints({0, 2, 1, 3}));
    return b.add(OpId::reshape, {b.input({s.b, s.t, h * s.d}, s.dtype)}, ints({s.b, s.t, h, s.d}));
  };
  const ValueRef q = heads(s.hq), k = heads(s.hk);
  const ValueRef cos = b.input({1, s.t, 1, s.d}, s.dtype), sin = b.input({1, s.t, 1, s.d}, s.dtype);
  RotarySegment r;
  const auto rotate = [&](const ValueRef& x, bool first) {
    const ValueRef hi = b.add(OpId::slice, {x}, ints({3, s.d / 2, s.d, 1}));
    const ValueRef lo = b.add(OpId::slice, {x}, ints({3, 0, s.d / 2, 1}));
    const ValueRef half = b.add(OpId::concat, {b.add(OpId::neg, {hi}), lo}, ints({3}));
    if (first) r.half_q = static_cast<int>(b.segment().value_id(half));
    const ValueRef pa = s.swapped ? b.add(OpId::mul, {cos, x}) : b.add(OpId::mul, {x, cos});
    const ValueRef pb = s.swapped ? b.add(OpId::mul, {sin, half}) : b.add(OpId::mul, {half, sin});
    const ValueRef out = s.swapped ? b.add(OpId::add, {pb, pa}) : b.add(OpId::add, {pa, pb});
    if (first && escape == Escape::half_output) b.output(half);
    if (first && escape == Escape::product_read_twice) b.output(b.add(OpId::exp, {pb}));
    return out;
  };
  b.output(rotate(q, true));
  b.output(rotate(k, false));
  r.seg = b.build();
  return r;
}

const RotaryStep* rotary_step_of(const PlannedSegment& p) {
  for (const Step& s : p.steps)
    if (const auto* r = std::get_if<RotaryStep>(&s.body)) return r;
  return nullptr;
}

int rotary_steps(const PlannedSegment& p) {
  int n = 0;
  for (const Step& s : p.steps) n += std::holds_alternative<RotaryStep>(s.body) ? 1 : 0;
  return n;
}

bool decided(const PlannedSegment& p, const std::string& what_part, const std::string& why_part) {
  for (const Decision& d : p.decisions)
    if (d.what.find(what_part) != std::string::npos && d.reason.find(why_part) != std::string::npos)
      return true;
  return false;
}

std::vector<Tensor> to_cuda(const std::vector<Tensor>& xs) {
  std::vector<Tensor> g;
  for (const Tensor& t : xs) g.push_back(t.to(Device::cuda(0)));
  return g;
}

// The plan on `device` against CPU eager, every output bit for bit (NaN equal to NaN).
void check_exact(const Segment& seg, const std::vector<Tensor>& xs, Device device) {
  PlannedSegment p = plan_segment(seg, default_planner_options(device));
  INFO(p.describe());
  REQUIRE(rotary_step_of(p) != nullptr);
  if (device.is_cuda()) CHECK(compile_plan(p, jit::KernelCompiler::global(), jit::default_compile_options()) == 0);
  const std::vector<Tensor> want = eager_values(seg, xs);
  const std::vector<Tensor> got = poisoned_values(p, device.is_cuda() ? to_cuda(xs) : xs);
  run_plan(p, got, device.is_cuda() ? Stream::current(device).handle() : nullptr);
  if (device.is_cuda()) synchronize(device);
  for (const ValueRef& r : seg.outputs) {
    const int v = seg.value_id(r);
    const auto g = got[v].to_doubles(), w = want[v].to_doubles();
    REQUIRE(g.size() == w.size());
    size_t bad = g.size();
    for (size_t i = 0; i < g.size() && bad == g.size(); ++i)
      if (!(g[i] == w[i] || (g[i] != g[i] && w[i] != w[i]))) bad = i;
    CHECK_MESSAGE(bad == g.size(), "value " << v << " differs first at " << bad << ": got " << g[bad] << " want "
                                            << w[bad]);
  }
}

std::vector<RotaryShape> shapes() {
  std::vector<RotaryShape> out;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (bool strided : {false, true})
      for (bool swapped : {false, true}) {
        RotaryShape s;
        s.dtype = dt, s.strided = strided, s.swapped = swapped;
        if (strided) s.b = 1, s.t = 5, s.hq = 3, s.hk = 1, s.d = 64;  // Llama's head dim
        out.push_back(s);
      }
  return out;
}

std::string name(const RotaryShape& s) {
  return std::string(dtype_name(s.dtype)) + (s.strided ? " strided" : "") + (s.swapped ? " swapped" : "");
}

}  // namespace

TEST_CASE("rotary: q's and k's rotaries are one step, one launch, equal to eager bit for bit") {
  for (const RotaryShape& s : shapes()) {
    INFO(name(s));
    const RotarySegment r = rotary_segment(s);
    const PlannedSegment p = plan_segment(r.seg, default_planner_options(Device::cpu()));
    INFO(p.describe());
    REQUIRE(rotary_step_of(p) != nullptr);
    CHECK(rotary_steps(p) == 1);
    CHECK(rotary_step_of(p)->parts.size() == 2);
    CHECK(p.values[r.half_q] == ValueKind::Virtual);
    // Eager: neg, concat, two muls and an add per rotary (the slices and reshapes are views).
    CHECK(p.summary.eager_launches == 10);
    CHECK(p.num_kernels() == 1);
    CHECK(decided(p, "into rotary step", "one launch"));
    check_exact(r.seg, random_externals(r.seg, 5), Device::cpu());
  }
}

TEST_CASE("rotary: infinities and NaN in x, cos and sin come out as eager's") {
  RotaryShape s;
  s.dtype = DType::bf16;
  const RotarySegment r = rotary_segment(s);
  std::vector<Tensor> xs = random_externals(r.seg, 9);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> q = xs[0].to_floats(), c = xs[2].to_floats();
  q[0] = inf, q[s.d / 2 + 1] = -inf, q[3] = nan, q[s.d + 2] = 0.0f;
  c[1] = inf, c[s.d / 2] = 0.0f;
  xs[0] = from_floats(q, xs[0].shape(), s.dtype, Device::cpu());
  xs[2] = from_floats(c, xs[2].shape(), s.dtype, Device::cpu());
  check_exact(r.seg, xs, Device::cpu());
}

TEST_CASE("rotary: a value inside the pattern that is observable keeps it unfused") {
  for (Escape e : {Escape::half_output, Escape::product_read_twice}) {
    const RotarySegment r = rotary_segment(RotaryShape{}, e);
    const PlannedSegment p = check_against_eager(r.seg, 3);
    // q's rotary stays apart (its half or its product must exist), k's is still a step.
    CHECK(rotary_steps(p) == 1);
    REQUIRE(rotary_step_of(p) != nullptr);
    CHECK(rotary_step_of(p)->parts.size() == 1);
    CHECK(decided(p, "rotary at add", "an intermediate is read elsewhere or observable"));
  }
}

TEST_CASE("rotary: switched off, or with fusion off, the ops run as before") {
  const RotarySegment r = rotary_segment(RotaryShape{});
  PlannerOptions off = default_planner_options(Device::cpu());
  off.rotary = false;
  const PlannedSegment p = check_against_eager(r.seg, 4, -1, -1, &off);
  CHECK(rotary_step_of(p) == nullptr);
  CHECK(decided(p, "stays unfused", "the rotary template is disabled"));
  PlannerOptions nofuse = default_planner_options(Device::cpu());
  nofuse.fusion = false;
  CHECK(rotary_step_of(check_against_eager(r.seg, 4, -1, -1, &nofuse)) == nullptr);
}

TEST_CASE("rotary: a rotary of a rotary is two steps (one reads the other)") {
  SegmentBuilder b;
  const int64_t d = 8;
  const ValueRef x = b.input({1, 2, 2, d});
  const ValueRef cos = b.input({1, 2, 1, d}), sin = b.input({1, 2, 1, d});
  const auto rotate = [&](const ValueRef& v) {
    const ValueRef half = b.add(OpId::concat,
                                {b.add(OpId::neg, {b.add(OpId::slice, {v}, ints({3, d / 2, d, 1}))}),
                                 b.add(OpId::slice, {v}, ints({3, 0, d / 2, 1}))},
                                ints({3}));
    return b.add(OpId::add, {b.add(OpId::mul, {v, cos}), b.add(OpId::mul, {half, sin})});
  };
  b.output(rotate(rotate(x)));
  const Segment seg = b.build();
  const PlannedSegment p = check_against_eager(seg, 6, 0, 0);
  CHECK(rotary_steps(p) == 2);
  CHECK(p.num_kernels() == 2);
}

TEST_CASE("rotary: slices that are not the two halves are not a rotary") {
  SegmentBuilder b;
  const int64_t d = 8;
  const ValueRef x = b.input({1, 2, 2, d});
  const ValueRef cos = b.input({1, 2, 1, d}), sin = b.input({1, 2, 1, d});
  // concat(-x[.., 2:], x[.., :2]): a roll, not rotate_half.
  const ValueRef half = b.add(
      OpId::concat,
      {b.add(OpId::neg, {b.add(OpId::slice, {x}, ints({3, 2, d, 1}))}), b.add(OpId::slice, {x}, ints({3, 0, 2, 1}))},
      ints({3}));
  b.output(b.add(OpId::add, {b.add(OpId::mul, {x, cos}), b.add(OpId::mul, {half, sin})}));
  const PlannedSegment p = check_against_eager(b.build(), 8, 0, 0);
  CHECK(rotary_step_of(p) == nullptr);
}

TEST_CASE("rotary: operands the kernels do not take are a clear error at binding") {
  const Tensor x = rand_uniform({2, 3, 4, 16}, 1, -1.0, 1.0, DType::f32, Device::cpu());
  const Tensor cs = rand_uniform({1, 3, 1, 16}, 2, -1.0, 1.0, DType::f32, Device::cpu());
  const Tensor out = zeros({2, 3, 4, 16}, DType::f32, Device::cpu());
  const Tensor narrow = rand_uniform({1, 3, 1, 8}, 3, -1.0, 1.0, DType::f32, Device::cpu());
  CHECK_THROWS_WITH_AS(rotary_args(x, narrow, cs, out),
                       doctest::Contains("cos of shape [1, 3, 1, 8] does not broadcast to [2, 3, 4, 16]"),
                       livefuse::Error);
  CHECK_THROWS_WITH_AS(rotary_args(x, cs, cast(cs, DType::f16), out), doctest::Contains("operands of one dtype"),
                       livefuse::Error);
  const Tensor odd = rand_uniform({2, 3, 4, 15}, 4, -1.0, 1.0, DType::f32, Device::cpu());
  CHECK_THROWS_WITH_AS(rotary_args(odd, narrow, narrow, zeros({2, 3, 4, 15}, DType::f32, Device::cpu())),
                       doctest::Contains("the last dim must be even"), livefuse::Error);
}

LF_CUDA_TEST_CASE("rotary gpu: one launch for q and k, equal to eager bit for bit") {
  for (const RotaryShape& s : shapes()) {
    INFO(name(s));
    const RotarySegment r = rotary_segment(s);
    check_exact(r.seg, random_externals(r.seg, 11), Device::cuda(0));
  }
  RotaryShape big;  // more pairs than one wave of blocks
  big.b = 4, big.t = 300, big.hq = 32, big.hk = 8, big.d = 128, big.dtype = DType::bf16;
  const RotarySegment r = rotary_segment(big);
  check_exact(r.seg, random_externals(r.seg, 12), Device::cuda(0));
}
