// Which of a plan run's kernels may load what the run never writes before their PDL wait
// (early_reads.hpp; the Note below).
#include "planner/early_reads.hpp"

#include "livefuse/config.hpp"
#include "planner/plan.hpp"
#if LIVEFUSE_HAS_CUDA
#include "kernels/cuda/launch_record.hpp"
#endif

namespace livefuse::planner {
namespace {

constexpr uint64_t kNoRun = ~uint64_t{0};
// The instrumented launches this thread had made when its current StepsRun began; kNoRun: none.
// And whether that run follows a kernel of its own launched elsewhere (StepsRun's `follows`).
thread_local uint64_t t_run_began = kNoRun;
thread_local bool t_run_follows = false;

#if LIVEFUSE_HAS_CUDA
// [ Note -- a plan's reads before its PDL wait ]
// Launched with PDL (LIVEFUSE_PDL), a kernel may start while the kernel before it on the stream
// still runs: it must not read what that kernel writes before griddepcontrol.wait. What it can
// load there overlaps its first DRAM round trip with the kernel before: a decode step's GEMV its
// first weights (livefuse-bench-gemv-chain, H100: GPT-2's 48 GEMVs 209 -> 162 us; a TMA
// prefetch into L2 instead: 188), the decode attention its first step of cached keys and values.
// That is safe where those are read-only for the run -- an external of the segment or a view of
// one (no step writes an external: in-place writes are sync points outside plans, an append
// writes past the cache's extent and its attention reads the keys before it), or the plan's
// merged copy of weights (refreshed before the first step) -- and the kernel that may still be
// running is one of the run's own: another instrumented launch of this StepsRun came first. (A
// graph's first node waits for all earlier work whatever its attribute; the held writes and
// merged-weight copies a plan enqueues come before its StepsRun.) LIVEFUSE_EARLY_READS=0 loads
// nothing early.
bool early_reads_allowed() {
  return config().early_reads && t_run_began != kNoRun &&
         (t_run_follows || cuda::t_instrumented_launches > t_run_began);
}

// Value `r` is an external or a view of one (permute, slice, expand: never a copy).
bool external_or_view(const PlannedSegment& p, ValueRef r) {
  while (!r.is_external()) {
    const SegmentNode& n = p.segment.nodes[r.node];
    if (n.op != OpId::permute && n.op != OpId::slice && n.op != OpId::expand) return false;
    r = n.inputs[0];
  }
  return true;
}
#endif

}  // namespace

#if LIVEFUSE_HAS_CUDA
bool weights_early(const PlannedSegment& p, const GemmStep& gs) {
  if (!early_reads_allowed()) return false;
  if (gs.merged) return true;
  const SegmentNode& n = p.segment.nodes[gs.node];
  return (n.op == OpId::linear || n.op == OpId::matmul) && n.inputs.size() > 1 &&
         n.inputs[1].is_external();
}

// The keys the attention reads from k / v: the old caches of its appends, or k and v.
bool kv_early(const PlannedSegment& p, const AttentionStep& a) {
  if (!early_reads_allowed()) return false;
  const AttentionOperands& o = a.operands;
  const auto old_keys = [&](int append, int value) {
    return append >= 0 ? p.segment.nodes[append].inputs[0] : p.segment.value_ref(value);
  };
  return external_or_view(p, old_keys(o.k_append, o.k)) && external_or_view(p, old_keys(o.v_append, o.v));
}
#endif

StepsRun::StepsRun(bool follows) : before_(t_run_began), follows_before_(t_run_follows) {
#if LIVEFUSE_HAS_CUDA
  if (t_run_began == kNoRun) {
    t_run_began = cuda::t_instrumented_launches;
    t_run_follows = follows;
  }
#else
  (void)follows;
#endif
}
StepsRun::~StepsRun() {
  t_run_began = before_;
  t_run_follows = follows_before_;
}

}  // namespace livefuse::planner
