// A plan's GEMM step on the CPU with its pointwise tail (activation, residual add) applied in the
// GEMM's tile loop (kernels/cpu/gemm_tail.hpp), against eager execution of the same ops.
#include "kernels/cpu/gemm_tail.hpp"
#include "tests/planner/planner_util.hpp"

using namespace plantest;

namespace {

// Runs the segment as a plan and eagerly; returns how many GEMMs took their tail in the loop.
uint64_t tails_in_loop(const Segment& seg, uint64_t seed) {
  const uint64_t before = livefuse::cpu::gemm_tails_run();
  check_against_eager(seg, seed);
  return livefuse::cpu::gemm_tails_run() - before;
}

}  // namespace

TEST_CASE("gemm tail: linear + bias then gelu, in the tile loop, as eager") {
  // Rows past one tile (120) and the small-M path (M <= 4); N and K past one block (256).
  for (int64_t m : {3, 130}) {
    SegmentBuilder b;
    const ValueRef x = b.input({m, 300}), w = b.input({270, 300}), bias = b.input({270});
    const ValueRef y = b.add(OpId::linear, {x, w, bias}, linear_attrs(true));
    b.output(b.add(OpId::gelu, {y}));
    INFO("M = " << m);
    CHECK(tails_in_loop(b.build(), 40 + m) == 1);
  }
}

TEST_CASE("gemm tail: activation then a residual add, and a residual add alone") {
  {
    SegmentBuilder b;
    const ValueRef x = b.input({2, 64, 96}), w = b.input({128, 96}), r = b.input({2, 64, 128});
    const ValueRef y = b.add(OpId::linear, {x, w}, linear_attrs(false));
    b.output(b.add(OpId::add, {r, b.add(OpId::relu, {y})}));  // residual on the left
    CHECK(tails_in_loop(b.build(), 51) == 1);
  }
  {
    SegmentBuilder b;
    const ValueRef x = b.input({4, 33, 40}), w = b.input({40, 50}), r = b.input({4, 33, 50});
    const ValueRef y = b.add(OpId::matmul, {x, w});
    b.output(b.add(OpId::add, {y, r}));
    CHECK(tails_in_loop(b.build(), 52) == 1);
  }
}

TEST_CASE("gemm tail: an op with scalar attributes (clamp) keeps them") {
  SegmentBuilder b;
  const ValueRef x = b.input({16, 64}), w = b.input({48, 64}), bias = b.input({48});
  const ValueRef y = b.add(OpId::linear, {x, w, bias}, linear_attrs(true));
  Attrs bounds;
  bounds.push_float(-0.25);
  bounds.push_float(0.5);
  b.output(b.add(OpId::clamp, {y}, bounds));
  CHECK(tails_in_loop(b.build(), 53) == 1);
}

TEST_CASE("gemm tail: other tails run after the GEMM, as before") {
  {  // two ops after the activation
    SegmentBuilder b;
    const ValueRef x = b.input({16, 64}), w = b.input({48, 64});
    const ValueRef y = b.add(OpId::linear, {x, w}, linear_attrs(false));
    b.output(b.scalar_op(OpId::mul, b.add(OpId::tanh, {y}), 2.0));
    CHECK(tails_in_loop(b.build(), 54) == 0);
  }
  {  // a broadcast (bias-like) add is not a residual of the output's shape
    SegmentBuilder b;
    const ValueRef x = b.input({16, 64}), w = b.input({48, 64}), c = b.input({48});
    const ValueRef y = b.add(OpId::linear, {x, w}, linear_attrs(false));
    b.output(b.add(OpId::add, {y, c}));
    CHECK(tails_in_loop(b.build(), 55) == 0);
  }
  {  // f16: the eager result rounds the product to f16 before the tail
    SegmentBuilder b;
    const ValueRef x = b.input({16, 64}, DType::f16), w = b.input({48, 64}, DType::f16);
    const ValueRef y = b.add(OpId::linear, {x, w}, linear_attrs(false));
    b.output(b.add(OpId::gelu, {y}));
    CHECK(tails_in_loop(b.build(), 56) == 0);
  }
}
