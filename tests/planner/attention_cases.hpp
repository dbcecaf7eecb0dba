#pragma once
// Segments of eager attention as user code writes it (examples/bert/bert.cpp), for the
// attention suites (test_attention_cpu.cpp, test_attention_gpu.cpp):
//   q = permute(x_q, {0, 2, 1, 3}) (same for k, v: projections seen as [b, heads, s, d])
//   scores = matmul(q, transpose(k, -1, -2)); probs = softmax(scores, 1/sqrt(d), mask?)
//   ctx = matmul(probs, v) [-> reshape(contiguous(permute(ctx, {0, 2, 1, 3})), {b, s, h*d})]
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "tests/planner/planner_util.hpp"

namespace plantest {

// How the additive mask broadcasts to the scores [b, h, sq, sk].
enum class MaskForm { none, per_key, per_batch, shared, plain2d };

inline Shape mask_shape(MaskForm f, int64_t b, int64_t sq, int64_t sk) {
  switch (f) {
    case MaskForm::per_key:
      return {b, 1, 1, sk};
    case MaskForm::per_batch:
      return {b, 1, sq, sk};
    case MaskForm::shared:
      return {1, 1, sq, sk};
    case MaskForm::plain2d:
      return {sq, sk};
    case MaskForm::none:
      break;
  }
  return {};
}

inline const char* mask_name(MaskForm f) {
  switch (f) {
    case MaskForm::none:
      return "no mask";
    case MaskForm::per_key:
      return "mask [b,1,1,sk]";
    case MaskForm::per_batch:
      return "mask [b,1,sq,sk]";
    case MaskForm::shared:
      return "mask [1,1,sq,sk]";
    case MaskForm::plain2d:
      return "mask [sq,sk]";
  }
  return "?";
}

inline Attrs perm_attrs(std::initializer_list<int64_t> p) {
  Attrs a;
  for (int64_t d : p) a.push_int(d);
  return a;
}

inline Attrs matmul_attrs() {
  Attrs a;
  a.push_int(0);
  a.push_int(0);
  return a;
}

struct AttentionShape {
  int64_t b = 2, h = 4, sq = 16, sk = 16, d = 32;
  DType dtype = DType::f32;
  MaskForm mask = MaskForm::none;
  bool heads_out = true;       // permute + contiguous + reshape back to [b, sq, h*d]
  bool negative_dims = false;  // transpose(k, -1, -2) rather than (2, 3)
  bool kv_from_cache = false;  // k, v: slices [0, sk) of a longer cache [b, h, sk + 7, d]
  bool reshape_copy = false;   // heads_out by the reshape alone (it copies), no contiguous
  std::string str() const {
    std::ostringstream os;
    os << "b" << b << " h" << h << " sq" << sq << " sk" << sk << " d" << d << " "
       << dtype_name(dtype) << " " << mask_name(mask)
       << (heads_out ? " [b,s,h*d] out" : " [b,h,s,d] out") << (kv_from_cache ? " kv cache" : "")
       << (reshape_copy ? " reshape copy" : "");
    return os.str();
  }
};

// What the test may make escape (be observable or read elsewhere).
enum class Escape { none, scores_output, probs_output, probs_other_user, scores_other_user };

struct AttentionSegment {
  Segment seg;
  int scores = -1, probs = -1;  // value ids
};

inline AttentionSegment attention_segment(const AttentionShape& s, Escape escape = Escape::none) {
  SegmentBuilder b;
  const ValueRef xq = b.input({s.b, s.sq, s.h, s.d}, s.dtype);
  const ValueRef q = b.add(OpId::permute, {xq}, perm_attrs({0, 2, 1, 3}));
  ValueRef k, v;
  if (s.kv_from_cache) {
    const ValueRef kc = b.input({s.b, s.h, s.sk + 7, s.d}, s.dtype),
                   vc = b.input({s.b, s.h, s.sk + 7, s.d}, s.dtype);
    Attrs sl;
    sl.push_int(2), sl.push_int(0), sl.push_int(s.sk), sl.push_int(1);
    k = b.add(OpId::slice, {kc}, sl);
    v = b.add(OpId::slice, {vc}, sl);
  } else {
    const ValueRef xk = b.input({s.b, s.sk, s.h, s.d}, s.dtype),
                   xv = b.input({s.b, s.sk, s.h, s.d}, s.dtype);
    k = b.add(OpId::permute, {xk}, perm_attrs({0, 2, 1, 3}));
    v = b.add(OpId::permute, {xv}, perm_attrs({0, 2, 1, 3}));
  }
  const ValueRef kt = b.add(
      OpId::permute, {k}, s.negative_dims ? perm_attrs({0, 1, -1, -2}) : perm_attrs({0, 1, 3, 2}));
  const ValueRef scores = b.add(OpId::matmul, {q, kt}, matmul_attrs());
  std::vector<ValueRef> sm_in = {scores};
  if (s.mask != MaskForm::none)
    sm_in.push_back(b.input(mask_shape(s.mask, s.b, s.sq, s.sk), s.dtype));
  const ValueRef probs =
      b.add(OpId::softmax, sm_in,
            softmax_attrs(1.0 / std::sqrt(static_cast<double>(s.d)), s.mask != MaskForm::none));
  const ValueRef ctx = b.add(OpId::matmul, {probs, v}, matmul_attrs());
  if (s.heads_out) {
    const ValueRef p = b.add(OpId::permute, {ctx}, perm_attrs({0, 2, 1, 3}));
    const ValueRef c = s.reshape_copy ? p : b.add(OpId::contiguous, {p});
    b.output(b.add(OpId::reshape, {c}, perm_attrs({s.b, s.sq, s.h * s.d})));
  } else {
    b.output(ctx);
  }
  if (escape == Escape::scores_output) b.output(scores);
  if (escape == Escape::probs_output) b.output(probs);
  if (escape == Escape::probs_other_user) b.output(b.scalar_op(OpId::mul, probs, 2.0));
  if (escape == Escape::scores_other_user) b.output(b.scalar_op(OpId::mul, scores, 2.0));
  AttentionSegment out;
  out.seg = b.build();
  out.scores = out.seg.value_id(scores);
  out.probs = out.seg.value_id(probs);
  return out;
}

// Grouped-query attention as examples/decoder/decoder.cpp writes it: q [b, t, kv_heads * G, d],
// K/V [b, kv_heads, sk, d]; each K/V head's G query heads stacked as rows, the scores seen as
// [b, kv_heads, G, t, sk] by the softmax and its mask ([t, sk], or [b, 1, 1, 1, sk] when
// `per_key_mask`), the product back to [b, t, heads * d].
struct GroupedShape {
  int64_t b = 2, kv_heads = 2, groups = 3, t = 5, sk = 11, d = 16;
  DType dtype = DType::f32;
  bool per_key_mask = false;
  std::string str() const {
    std::ostringstream os;
    os << "grouped b" << b << " kv" << kv_heads << " G" << groups << " t" << t << " sk" << sk
       << " d" << d << " " << dtype_name(dtype)
       << (per_key_mask ? " mask [b,1,1,1,sk]" : " mask [t,sk]");
    return os.str();
  }
};

inline AttentionSegment grouped_attention_segment(const GroupedShape& s) {
  SegmentBuilder b;
  const int64_t h = s.kv_heads * s.groups;
  const ValueRef xq = b.input({s.b, s.t, h, s.d}, s.dtype);
  const ValueRef k = b.input({s.b, s.kv_heads, s.sk, s.d}, s.dtype),
                 v = b.input({s.b, s.kv_heads, s.sk, s.d}, s.dtype);
  const ValueRef qg = b.add(OpId::reshape, {b.add(OpId::permute, {xq}, perm_attrs({0, 2, 1, 3}))},
                            perm_attrs({s.b, s.kv_heads, s.groups * s.t, s.d}));
  const ValueRef scores = b.add(
      OpId::matmul, {qg, b.add(OpId::permute, {k}, perm_attrs({0, 1, 3, 2}))}, matmul_attrs());
  const ValueRef s5 =
      b.add(OpId::reshape, {scores}, perm_attrs({s.b, s.kv_heads, s.groups, s.t, s.sk}));
  const ValueRef mask =
      s.per_key_mask ? b.input({s.b, 1, 1, 1, s.sk}, s.dtype) : b.input({s.t, s.sk}, s.dtype);
  const ValueRef probs = b.add(OpId::softmax, {s5, mask},
                               softmax_attrs(1.0 / std::sqrt(static_cast<double>(s.d)), true));
  const ValueRef p4 =
      b.add(OpId::reshape, {probs}, perm_attrs({s.b, s.kv_heads, s.groups * s.t, s.sk}));
  const ValueRef o = b.add(OpId::matmul, {p4, v}, matmul_attrs());
  const ValueRef heads = b.add(OpId::reshape, {o}, perm_attrs({s.b, h, s.t, s.d}));
  b.output(b.add(OpId::reshape, {b.add(OpId::permute, {heads}, perm_attrs({0, 2, 1, 3}))},
                 perm_attrs({s.b, s.t, h * s.d})));
  AttentionSegment out;
  out.seg = b.build();
  out.scores = out.seg.value_id(scores);
  out.probs = out.seg.value_id(probs);
  return out;
}

// A decode step growing its KV caches by concat, as examples/decoder/decoder.cpp writes it: the
// step's k / v [b, t, kv_heads, d] permuted to [b, kv_heads, t, d] and appended to the caches
// [b, kv_heads, s.sk, d] along dim 2, the grouped attention over the grown caches (mask [t, sk +
// t], or [b, 1, 1, 1, sk + t]). Outputs: the attention's result, then the grown K and V caches
// (the program keeps them), unless `keep_caches` is false. `k_read` adds another reader of the
// grown K (the step cannot take the append then).
struct AppendingSegment {
  AttentionSegment a;
  int k_cat = -1, v_cat = -1;  // the concat nodes
};
inline AppendingSegment appending_attention_segment(const GroupedShape& s, bool keep_caches = true,
                                                    bool k_read = false) {
  SegmentBuilder b;
  const int64_t h = s.kv_heads * s.groups, sk = s.sk + s.t;
  const ValueRef xq = b.input({s.b, s.t, h, s.d}, s.dtype);
  const ValueRef kc = b.input({s.b, s.kv_heads, s.sk, s.d}, s.dtype),
                 vc = b.input({s.b, s.kv_heads, s.sk, s.d}, s.dtype);
  const ValueRef ks = b.input({s.b, s.t, s.kv_heads, s.d}, s.dtype),
                 vs = b.input({s.b, s.t, s.kv_heads, s.d}, s.dtype);
  Attrs cat;
  cat.push_int(2);
  const ValueRef k = b.add(OpId::concat, {kc, b.add(OpId::permute, {ks}, perm_attrs({0, 2, 1, 3}))}, cat);
  const ValueRef v = b.add(OpId::concat, {vc, b.add(OpId::permute, {vs}, perm_attrs({0, 2, 1, 3}))}, cat);
  const ValueRef qg = b.add(OpId::reshape, {b.add(OpId::permute, {xq}, perm_attrs({0, 2, 1, 3}))},
                            perm_attrs({s.b, s.kv_heads, s.groups * s.t, s.d}));
  const ValueRef scores = b.add(
      OpId::matmul, {qg, b.add(OpId::permute, {k}, perm_attrs({0, 1, 3, 2}))}, matmul_attrs());
  const ValueRef s5 = b.add(OpId::reshape, {scores}, perm_attrs({s.b, s.kv_heads, s.groups, s.t, sk}));
  const ValueRef mask = s.per_key_mask ? b.input({s.b, 1, 1, 1, sk}, s.dtype) : b.input({s.t, sk}, s.dtype);
  const ValueRef probs =
      b.add(OpId::softmax, {s5, mask}, softmax_attrs(1.0 / std::sqrt(static_cast<double>(s.d)), true));
  const ValueRef p4 = b.add(OpId::reshape, {probs}, perm_attrs({s.b, s.kv_heads, s.groups * s.t, sk}));
  const ValueRef o = b.add(OpId::matmul, {p4, v}, matmul_attrs());
  const ValueRef heads = b.add(OpId::reshape, {o}, perm_attrs({s.b, h, s.t, s.d}));
  b.output(b.add(OpId::reshape, {b.add(OpId::permute, {heads}, perm_attrs({0, 2, 1, 3}))},
                 perm_attrs({s.b, s.t, h * s.d})));
  if (keep_caches) {
    b.output(k);
    b.output(v);
  }
  if (k_read) b.output(b.scalar_op(OpId::mul, k, 2.0));
  AppendingSegment out;
  out.a.seg = b.build();
  out.a.scores = out.a.seg.value_id(scores);
  out.a.probs = out.a.seg.value_id(probs);
  out.k_cat = k.node, out.v_cat = v.node;
  return out;
}

inline std::vector<GroupedShape> grouped_numeric_cases() {
  std::vector<GroupedShape> out;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    out.push_back({2, 2, 3, 5, 11, 16, dt, false});
    out.push_back({1, 2, 4, 1, 77, 64, dt, true});  // decode: one query row per head
  }
  out.push_back(
      {1, 1, 1, 13, 29, 32, DType::f32, false});  // G = 1: plain attention through the reshapes
  out.push_back({2, 4, 2, 40, 40, 128, DType::f32, true});
  return out;
}

inline const AttentionStep* attention_step_of(const PlannedSegment& p) {
  for (const Step& s : p.steps)
    if (const auto* a = std::get_if<AttentionStep>(&s.body)) return a;
  return nullptr;
}

// Tolerances of the fused result against eager: eager rounds f16/bf16 scores and
// probabilities to the dtype, the fused kernel keeps them f32.
inline double attention_tol(DType d) {
  return d == DType::f32 ? 2e-5 : d == DType::f16 ? 6e-3 : 4e-2;
}

// The numeric cases both suites run: shapes, dtypes, masks and layouts.
inline std::vector<AttentionShape> attention_numeric_cases() {
  std::vector<AttentionShape> out;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    AttentionShape bert{1, 4, 128, 128, 64, dt, MaskForm::per_key, true, false, false};
    out.push_back(bert);
    AttentionShape decode{2, 3, 1, 77, 64, dt, MaskForm::per_key, false, true, true};
    out.push_back(decode);
    AttentionShape odd{2, 3, 13, 29, 40, dt, MaskForm::per_batch, true, false, false};
    out.push_back(odd);
  }
  out.push_back({2, 2, 29, 13, 16, DType::f32, MaskForm::shared, false, false, false});
  out.push_back({3, 2, 13, 29, 128, DType::f32, MaskForm::plain2d, true, true, false});
  out.push_back({1, 1, 33, 65, 8, DType::f16, MaskForm::none, true, false, true});
  out.push_back({2, 5, 40, 40, 64, DType::bf16, MaskForm::none, false, false, false});
  // The CUDA decode kernel (launch_attention takes it for f32 and one token's rows at any length,
  // for more rows from 512 keys in f16/bf16) with two lanes a key (d = 16: one 16-byte load a
  // lane), 7 rows; and below its crossover.
  out.push_back({1, 2, 7, 7, 16, DType::f16, MaskForm::none, true, false, false});
  out.push_back({1, 2, 7, 520, 16, DType::f16, MaskForm::none, true, false, false});
  out.push_back({2, 3, 5, 600, 16, DType::bf16, MaskForm::per_key, false, true, false});
  out.push_back({2, 3, 1, 300, 64, DType::f32, MaskForm::per_key, false, true, false});
  // Three query rows, a head dim that is no multiple of 16, f16: the CPU kernel's in-place
  // path (fewer than 4 rows a head) converting each key row.
  out.push_back({2, 3, 3, 70, 40, DType::f16, MaskForm::per_key, true, true, false});
  for (DType dt : {DType::f32, DType::f16}) {
    AttentionShape enc{2, 3, 13, 29, 32, dt, MaskForm::per_key, true, true, false};
    enc.reshape_copy = true;
    out.push_back(enc);
  }
  return out;
}

}  // namespace plantest
