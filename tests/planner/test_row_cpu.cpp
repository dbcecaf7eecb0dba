// Row fusion (reductions and normalisations along the last dim with prologue and epilogue) on
// the CPU interpreter against eager execution.
#include "tests/planner/planner_util.hpp"

using namespace plantest;

TEST_CASE("row: residual add -> layer_norm -> gelu is one kernel") {
  for (int64_t cols : {1, 31, 768, 5000}) {
    for (DType dt : {DType::f32, DType::f16}) {
      SegmentBuilder b;
      const ValueRef x = b.input({7, cols}, dt);
      const ValueRef r = b.input({7, cols}, dt);
      const ValueRef w = b.input({cols}, dt);
      const ValueRef bias = b.input({cols}, dt);
      const ValueRef h = b.add(OpId::add, {x, r});
      const ValueRef ln = b.add(OpId::layer_norm, {h, w, bias}, norm_attrs(1e-5, true, true));
      const ValueRef g = b.add(OpId::gelu, {ln});
      b.output(g);
      b.output(h);  // the residual stream is used later
      INFO("cols " << cols << " " << dtype_name(dt));
      const PlannedSegment p = check_against_eager(b.build(), 100 + cols, dt == DType::f32 ? 2e-4 : -1, 1e-4);
      CHECK(p.num_kernels() == 1);
    }
  }
}

TEST_CASE("row: softmax with scale and a broadcast mask, then an epilogue") {
  for (int64_t cols : {5, 128, 4097, 9000}) {
    SegmentBuilder b;
    const ValueRef s = b.input({2, 3, cols});
    const ValueRef m = b.input({1, 1, cols});
    const ValueRef sm = b.add(OpId::softmax, {s, m}, softmax_attrs(0.125, true));
    const ValueRef o = b.scalar_op(OpId::mul, sm, 2.0);
    b.output(o);
    INFO("cols " << cols);
    CHECK(check_against_eager(b.build(), 7 + cols, 1e-4, 1e-6).num_kernels() == 1);
  }
}

TEST_CASE("row: softmax without mask, rms_norm with and without weight") {
  SegmentBuilder b;
  const ValueRef x = b.input({9, 300});
  const ValueRef w = b.input({300});
  const ValueRef sm = b.add(OpId::softmax, {x}, softmax_attrs(1.0, false));
  const ValueRef r1 = b.add(OpId::rms_norm, {x, w}, norm_attrs(1e-6, true, false));
  const ValueRef r2 = b.add(OpId::rms_norm, {x}, norm_attrs(1e-6, false, false));
  b.output(sm);
  b.output(r1);
  b.output(r2);
  check_against_eager(b.build(), 12, 1e-4, 1e-6);
}

TEST_CASE("row: sum / mean / max with keepdim, with ops on the result") {
  for (bool keep : {true, false}) {
    SegmentBuilder b;
    const ValueRef x = b.input({4, 6, 50});
    const ValueRef y = b.input({4, 6, 50});
    const ValueRef p = b.add(OpId::mul, {x, y});
    const ValueRef s = b.add(OpId::sum, {p}, dim_attrs(-1, keep));
    const ValueRef mx = b.add(OpId::max, {x}, dim_attrs(2, keep));
    const ValueRef mn = b.add(OpId::mean, {y}, dim_attrs(-1, keep));
    const ValueRef t = b.add(OpId::sub, {s, mx});
    const ValueRef u = b.add(OpId::add, {t, mn});
    b.output(u);
    b.output(mx);
    INFO("keepdim " << keep);
    CHECK(check_against_eager(b.build(), 31, 1e-5, 1e-5).num_kernels() == 1);
  }
}

TEST_CASE("row: hand-written softmax (max, sub, exp, sum, div) is one kernel") {
  SegmentBuilder b;
  const ValueRef x = b.input({33, 257});
  const ValueRef m = b.add(OpId::max, {x}, dim_attrs(-1, true));
  const ValueRef e = b.add(OpId::exp, {b.add(OpId::sub, {x, m})});
  const ValueRef s = b.add(OpId::sum, {e}, dim_attrs(-1, true));
  const ValueRef y = b.add(OpId::div, {e, s});
  b.output(y);
  CHECK(check_against_eager(b.build(), 2, 1e-5, 1e-7).num_kernels() == 1);
}

TEST_CASE("row: a reduction over another dim stays eager; its neighbours still fuse") {
  SegmentBuilder b;
  const ValueRef x = b.input({16, 24});
  const ValueRef e = b.add(OpId::exp, {x});
  const ValueRef s = b.add(OpId::sum, {e}, dim_attrs(0, false));
  const ValueRef t = b.add(OpId::tanh, {s});
  b.output(t);
  const PlannedSegment p = check_against_eager(b.build(), 6, 1e-5, 1e-5);
  CHECK(p.num_kernels() == 3);
}

TEST_CASE("row: layer_norm of a permuted input and a keepdim row value broadcast back") {
  SegmentBuilder b;
  const ValueRef x = b.input({40, 12});
  Attrs perm;
  perm.push_int(1);
  perm.push_int(0);
  const ValueRef t = b.add(OpId::permute, {x}, perm);  // [12, 40], strided rows
  const ValueRef ln = b.add(OpId::layer_norm, {t}, norm_attrs(1e-5, false, false));
  const ValueRef mean = b.add(OpId::mean, {t}, dim_attrs(-1, true));
  const ValueRef y = b.add(OpId::add, {ln, mean});
  b.output(y);
  CHECK(check_against_eager(b.build(), 17, 1e-4, 1e-5).summary.fused_kernels == 1);
}

TEST_CASE("row: 8-byte and 4-byte values in one row kernel keep their own buffers") {
  // An i64 input, an i64 product and f32 values in one row program: the interpreter's buffers
  // hold 8-byte elements whatever a value's width (block rows of a 4-byte value packed at 4), so
  // a narrow value can never run into a wide one's rows. Several rows a block (cols 40).
  SegmentBuilder b;
  const ValueRef x = b.input({6, 40});
  const ValueRef k = b.input({6, 40}, DType::i64);
  const ValueRef k2 = b.add(OpId::mul, {k, k});
  const ValueRef kf = b.add(OpId::cast, {k2}, cast_attrs(DType::f32));
  const ValueRef y = b.add(OpId::add, {x, kf});
  const ValueRef sm = b.add(OpId::softmax, {y}, softmax_attrs(0.01, false));
  b.output(sm);
  b.output(k2);
  CHECK(check_against_eager(b.build(), 41, 1e-5, 1e-7).num_kernels() == 1);
}
