// A merged sibling GEMM reads plan-owned copies of its weights: a weight the program rewrites
// between calls -- through a pointer from data_ptr(), or through an op (copy_into) -- and a
// different weight bound to the same slot must still give eager's results.
#include <cstring>

#include "livefuse/ops.hpp"
#include "planner/merged_weights.hpp"
#include "planner_util.hpp"

using namespace plantest;

namespace {

// q, k, v = linear(x, w_i, b_i), all three observable. Externals: x, then (w, b) per sibling.
Segment qkv(DType dt, int64_t m = 5, int64_t k = 24, int64_t n = 16) {
  SegmentBuilder sb;
  const ValueRef x = sb.input({m, k}, dt);
  for (int i = 0; i < 3; ++i) {
    const ValueRef w = sb.input({n, k}, dt), b = sb.input({n}, dt);
    sb.output(sb.add(OpId::linear, {x, w, b}, linear_attrs(true)));
  }
  return sb.build();
}

const GemmStep& merged_step(const PlannedSegment& p) {
  for (const Step& s : p.steps)
    if (const auto* gs = std::get_if<GemmStep>(&s.body); gs && !gs->siblings.empty()) return *gs;
  FAIL("no merged GEMM step");
  throw 0;
}

// Runs the plan on `xs` and checks every output against eager on the same externals.
void check_run(const PlannedSegment& p, const std::vector<Tensor>& xs, const char* what) {
  INFO(what);
  const std::vector<Tensor> want = eager_values(p.segment, xs);
  const std::vector<Tensor> got = poisoned_values(p, xs);
  const Device d = xs[0].device();
  run_plan(p, got, d.is_cuda() ? Stream::current(d).handle() : nullptr);
  for (const ValueRef& r : p.segment.outputs) {
    const int v = p.segment.value_id(r);
    CHECK(lftest::allclose(got[v].to_doubles(), want[v].to_doubles(), tol_for(got[v].dtype()),
                           tol_for(got[v].dtype())));
  }
}

void check_rewrites(Device d) {
  for (const DType dt : {DType::f32, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt) << " on " << d.str());
    const PlannedSegment p = plan_segment(qkv(dt), default_planner_options(d));
    const MergedWeights& mw = *merged_step(p).merged;
    std::vector<Tensor> xs = random_externals(p.segment, 41);
    for (Tensor& t : xs) t = t.to(d);
    check_run(p, xs, "first run");
    check_run(p, xs, "second run");
    const MergedWeights::Counters c0 = mw.counters();
    CHECK(c0.builds == 1);
    CHECK(c0.hits >= 1);  // the weights did not change: the copy is served as it is

    // An op writes the second weight in place (its version moves).
    copy_into(xs[3], rand_uniform(xs[3].shape(), 77, -2, 2, dt, d));
    check_run(p, xs, "after copy_into of a weight");
    CHECK(mw.counters().refreshes == c0.refreshes + 1);

    // ... and a bias.
    copy_into(xs[6], rand_uniform(xs[6].shape(), 78, -2, 2, dt, d));
    check_run(p, xs, "after copy_into of a bias");

    // A different weight tensor bound to the same slot: its own copy, not the last one.
    std::vector<Tensor> other = xs;
    other[1] = rand_uniform(xs[1].shape(), 79, -2, 2, dt, d);
    check_run(p, other, "another weight in slot 1");
    check_run(p, xs, "the first weights again");
    CHECK(mw.counters().builds == 2);
  }
}

}  // namespace

TEST_CASE("gemm siblings: rewritten weights, on the CPU, still give eager's results") {
  check_rewrites(Device::cpu());
}

LF_CUDA_TEST_CASE("gemm siblings: rewritten weights, on CUDA, still give eager's results") {
  check_rewrites(Device::cuda(0));
}

TEST_CASE("gemm siblings: a weight written through data_ptr() between runs is copied again") {
  const PlannedSegment p = plan_segment(qkv(DType::f32), default_planner_options(Device::cpu()));
  const MergedWeights& mw = *merged_step(p).merged;
  std::vector<Tensor> xs = random_externals(p.segment, 43);
  check_run(p, xs, "first run");
  // The program takes the address and writes through it, as it may at any time from now on.
  auto* w = static_cast<float*>(xs[5].data_ptr());
  for (int64_t i = 0; i < xs[5].numel(); ++i) w[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  const uint64_t refreshes = mw.counters().refreshes;
  check_run(p, xs, "after a write through data_ptr()");
  w[3] = 9.0f;
  check_run(p, xs, "after a second write, same pointer, no version change");
  CHECK(mw.counters().refreshes >= refreshes + 2);  // every run copies memory the program may write
  // A promise not to write it again: the copy is served from then on.
  xs[5].mark_immutable();
  check_run(p, xs, "immutable now");
  const MergedWeights::Counters c = mw.counters();
  check_run(p, xs, "immutable, again");
  CHECK(mw.counters().refreshes == c.refreshes);
  CHECK(mw.counters().hits == c.hits + 1);
}

TEST_CASE("gemm siblings: the CPU GEMM's pack cache does not serve a refreshed copy's old pack") {
  // M large enough for the blocked path (packs B whole on its second sighting).
  const PlannedSegment p =
      plan_segment(qkv(DType::f32, 64, 96, 80), default_planner_options(Device::cpu()));
  std::vector<Tensor> xs = random_externals(p.segment, 47);
  for (int i = 0; i < 3; ++i)
    check_run(p, xs, "warm: the concatenated weight is packed and cached");
  copy_into(xs[1], rand_uniform(xs[1].shape(), 80, -2, 2, DType::f32, Device::cpu()));
  check_run(p, xs, "after copy_into");
  check_run(p, xs, "after copy_into, again");
}
