#pragma once
// A plan's reads before its PDL wait (the Note in early_reads.cpp): which kernels of a run of a
// plan's steps may load what the run never writes -- a GEMV its first weights, the decode
// attention its first cached keys -- before griddepcontrol.wait.
#include <cstdint>

namespace livefuse::planner {

struct PlannedSegment;
struct GemmStep;
struct AttentionStep;

// While alive, the steps this thread launches are one run of a plan's steps on one stream, in
// order (run_plan, a stretch, a whole graph's capture): a step's kernel after another kernel of
// the run may load what the run never writes before its PDL wait. Nested runs are part of the
// outermost. `follows`: the launches are destined for a graph where a kernel of the same run
// comes before them (a family graph's varying steps, recorded or captured alone to patch its
// nodes), as if one had been launched.
class StepsRun {
 public:
  explicit StepsRun(bool follows = false);
  ~StepsRun();
  StepsRun(const StepsRun&) = delete;
  StepsRun& operator=(const StepsRun&) = delete;

 private:
  uint64_t before_;
  bool follows_before_;
};

#if LIVEFUSE_HAS_CUDA
// Within a StepsRun, after another kernel of it (LIVEFUSE_EARLY_READS): whether the step's GEMV
// may load its weights early (an external weight or the plan's merged copy), and whether the
// attention may load its cached keys and values early (its k / v, or the old caches of its
// appends, externals or views of them).
bool weights_early(const PlannedSegment& p, const GemmStep& gs);
bool kv_early(const PlannedSegment& p, const AttentionStep& a);
#endif

}  // namespace livefuse::planner
