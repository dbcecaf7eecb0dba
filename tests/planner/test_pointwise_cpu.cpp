// Vertical elementwise fusion on the CPU interpreter against eager execution: chains, DAGs
// with broadcasts and several outputs, views as inputs, odd sizes, every dtype, custom ops.
#include "tests/planner/planner_util.hpp"

using namespace plantest;

namespace {

float cubic(float a, float b, float) { return a * a * a - b; }

}  // namespace

TEST_CASE("pointwise: a 10-op chain is one kernel and matches eager") {
  for (int64_t n : {1, 7, 1000, 4099, 70001}) {
    SegmentBuilder b;
    const ValueRef x = b.input({n});
    const ValueRef y = b.input({n});
    ValueRef v = b.add(OpId::add, {x, y});
    v = b.scalar_op(OpId::mul, v, 1.5);
    v = b.add(OpId::sigmoid, {v});
    v = b.add(OpId::sub, {v, x});
    v = b.scalar_op(OpId::add, v, 0.25);
    v = b.add(OpId::tanh, {v});
    v = b.add(OpId::mul, {v, y});
    v = b.add(OpId::relu, {v});
    v = b.add(OpId::exp, {v});
    v = b.add(OpId::neg, {v});
    b.output(v);
    INFO("n = " << n);
    const PlannedSegment p = check_against_eager(b.build(), 11 + n);
    CHECK(p.num_kernels() == 1);
    CHECK(p.summary.eager_launches == 10);
  }
}

TEST_CASE("pointwise: DAG with broadcasts, a scalar tensor and two outputs") {
  SegmentBuilder b;
  const ValueRef x = b.input({33, 65});
  const ValueRef bias = b.input({65});
  const ValueRef col = b.input({33, 1});
  const ValueRef s = b.input({});
  const ValueRef a = b.add(OpId::add, {x, bias});
  const ValueRef c = b.add(OpId::mul, {a, col});
  const ValueRef d = b.add(OpId::maximum, {c, s});
  const ValueRef e = b.add(OpId::gelu, {a});
  const ValueRef f = b.add(OpId::div, {d, e});
  b.output(f);
  b.output(a);  // an intermediate that is also observable
  const PlannedSegment p = check_against_eager(b.build(), 3);
  CHECK(p.num_kernels() == 1);
}

TEST_CASE("pointwise: views of inputs (permute, slice, strided external) load through strides") {
  SegmentBuilder b;
  const ValueRef x = b.input({17, 9});
  const ValueRef y = b.input({9, 17});
  Attrs perm;
  perm.push_int(1);
  perm.push_int(0);
  const ValueRef yt = b.add(OpId::permute, {y}, perm);
  const ValueRef xs = b.add(OpId::slice, {x}, [] {
    Attrs a;
    for (int64_t v : {0, 1, 17, 2}) a.push_int(v);  // rows 1, 3, ..., 15
    return a;
  }());
  const ValueRef ys = b.add(OpId::slice, {yt}, [] {
    Attrs a;
    for (int64_t v : {0, 0, 16, 2}) a.push_int(v);  // rows 0, 2, ..., 14
    return a;
  }());
  const ValueRef r = b.add(OpId::sub, {xs, ys});
  const ValueRef q = b.add(OpId::abs, {r});
  b.output(q);
  const PlannedSegment p = check_against_eager(b.build(), 5);
  CHECK(p.summary.fused_kernels == 1);
}

TEST_CASE("pointwise: f16 and bf16 chains round like eager") {
  for (DType dt : {DType::f16, DType::bf16}) {
    SegmentBuilder b;
    const ValueRef x = b.input({3, 1001}, dt);
    const ValueRef y = b.input({1001}, dt);
    ValueRef v = b.add(OpId::mul, {x, y});
    v = b.add(OpId::silu, {v});
    v = b.scalar_op(OpId::pow, v, 2.0);
    v = b.add(OpId::add, {v, x});
    v = b.add(OpId::gelu_tanh, {v});
    b.output(v);
    INFO(dtype_name(dt));
    CHECK(check_against_eager(b.build(), 21).num_kernels() == 1);
  }
}

TEST_CASE("pointwise: integer ops, casts, where and clamp") {
  SegmentBuilder b;
  const ValueRef i = b.input({5, 37}, DType::i32);
  const ValueRef j = b.input({37}, DType::i32);
  const ValueRef k = b.input({5, 37}, DType::i64);
  const ValueRef x = b.input({5, 37});
  const ValueRef s = b.add(OpId::add, {i, j});
  const ValueRef m = b.scalar_op(OpId::mul, s, 3);
  const ValueRef q = b.add(OpId::div, {m, j});  // integer division (by zero -> 0)
  const ValueRef l = b.add(OpId::cast, {q}, cast_attrs(DType::i64));
  const ValueRef sum64 = b.add(OpId::add, {l, k});
  const ValueRef asf = b.add(OpId::cast, {sum64}, cast_attrs(DType::f32));
  Attrs cl;
  cl.push_float(-4.5);
  cl.push_float(6.25);
  const ValueRef c = b.add(OpId::clamp, {x}, cl);
  const ValueRef cond = b.add(OpId::cast, {b.add(OpId::relu, {x})}, cast_attrs(DType::boolean));
  const ValueRef w = b.add(OpId::where, {cond, asf, c});
  const ValueRef back = b.add(OpId::cast, {w}, cast_attrs(DType::i32));
  b.output(w);
  b.output(back);
  b.output(sum64);
  CHECK(check_against_eager(b.build(), 8, 0, 0).num_kernels() == 1);
}

TEST_CASE("pointwise: custom elementwise ops fuse like built-ins") {
  const CustomOp op = register_elementwise("plan_cubic", 2, "a * a * a - b", cubic);
  SegmentBuilder b;
  const ValueRef x = b.input({129});
  const ValueRef y = b.input({129});
  Attrs a;
  a.custom_id = op.id();
  const ValueRef c = b.add(OpId::custom, {x, y}, a);
  const ValueRef d = b.add(OpId::tanh, {c});
  b.output(d);
  CHECK(check_against_eager(b.build(), 4).num_kernels() == 1);
}

TEST_CASE("pointwise: contiguous of a permuted input is a fused copy") {
  SegmentBuilder b;
  const ValueRef x = b.input({6, 10, 3});
  Attrs perm;
  for (int64_t v : {2, 0, 1}) perm.push_int(v);
  const ValueRef t = b.add(OpId::permute, {x}, perm);
  const ValueRef c = b.add(OpId::contiguous, {t});
  const ValueRef e = b.add(OpId::exp, {c});
  b.output(c);
  b.output(e);
  CHECK(check_against_eager(b.build(), 9).num_kernels() == 1);
}
