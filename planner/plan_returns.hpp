#pragma once
// What the planning service keeps of plans that stopped serving but may be wanted again
// (planner/service.cpp): a plan whose sequence went cold while active is revived when the
// sequence comes back with the shapes it was made for (the prefill of the next generation: no
// new plan, compile or sampling); one that had been rejected is not planned again for those
// shapes; a plan superseded by a longer one that starts with its ops comes back if the longer
// one is rejected or fails. Bounded: kMax entries of each kind, the oldest dropped first.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "monitor/candidate.hpp"
#include "runtime/plan.hpp"

namespace livefuse::planner {

// Plans that share their first ops. The matcher ends a window at the shortest plan it matches,
// so a plan that another plan starts with takes that plan's windows; the planning service keeps
// one of the two serving (supersede_prefixes when the longer is published or revived,
// set_aside_if_prefix when the shorter is published), unless the shorter runs elsewhere too.
// Whether `prefix` takes `longer`'s windows: one stream and device kind, and `longer` starts
// with all of `prefix`'s ops (and has more).
inline bool takes_windows_of(const Plan& prefix, const Plan& longer) {
  return &prefix != &longer && prefix.stream == longer.stream &&
         prefix.device_kind == longer.device_kind && starts_with_ops(longer.ops, prefix.ops);
}
// Whether the shorter sequence runs elsewhere too, so both plans serve: it occurred (or served)
// more than 4x as often as the longer one (a decode layer against the last layer + the head).
inline bool runs_elsewhere(uint64_t shorter_count, uint64_t longer_count) {
  return shorter_count > 4 * longer_count;
}
// The plans `longer`, published or revived, supersedes: active or sampling plans it starts
// with whose hits are not over 4x its `occurrences`. A layer's first piece, planned while the
// detector still cut the layer, kept every window from the whole layer's plan, which then
// sampled nothing for the rest of the run.
std::vector<std::shared_ptr<Plan>> prefixes_of(const Plan& longer, uint64_t occurrences);
// The active or sampling plan a newly published `shorter` would take windows from, unless
// `shorter` occurs over 4x as often as that plan served and was counted; null: none (an active
// one first). On the H200 (Llama-1B concat decode, prompt 4096) a 34-op prefix of the active
// layer plan, cut at the softmax, was planned from a prefill's windows and served the layer as
// two plans without its fused attention. A sampling one: on the H100 (f32 BERT-base with
// LIVEFUSE_GEMM_TUNE=1) the layer's plan took ~1 s to tune and compile; the detector meanwhile
// cut the layer in two, and the first piece, published after it, took every window the layer's
// plan needed for its samples: it never sampled and went cold (1.30-1.34 ms a forward, not 1.23).
std::shared_ptr<Plan> longer_plan_for(const Plan& shorter);

class PlanReturns {
 public:
  using Key = std::pair<uint64_t, uint32_t>;  // (signature, stream) of a structure

  // `p` (of structure `k`) leaves because its sequence went cold; call before retiring it, so
  // that its state tells whether it served (kept, revivable) or lost (kept, not re-planned).
  void went_cold(const Key& k, const Plan& p);

  enum class Back { none, revived, still_rejected };
  // `c` is hot again: its dormant plan, if it was made for every shape `c` has seen, is active
  // again (revived) or stays rejected; none: plan anew. Records a decision when it revives, so
  // the caller must not hold a lock that inspection takes.
  Back returns(const monitor::Candidate& c, uint64_t* plan_id);

  // `prefix`, `was` active or sampling until now, was retired for `longer` (superseded by it, or
  // set aside while it samples).
  void superseded(uint64_t longer, std::shared_ptr<Plan> prefix, PlanState was);
  // Whether superseded prefixes wait for their longer plan's verdict (look again soon).
  bool watching() const;
  // The prefixes given back now -- their longer plan was rejected or failed, or retired without
  // ever matching a window -- in the state they left (active, or sampling: no verdict yet).
  // Entries whose longer plan won, or was replaced or retired after matching, are dropped.
  std::vector<std::shared_ptr<Plan>> restore();

  void clear();

 private:
  struct Dormant {
    uint64_t plan_id = 0;
    std::vector<uint64_t> tuples;  // the plan's shape tuples (ShapeTupleKey)
    bool family = false;
    bool rejected = false;  // sampled slower than eager: remembered, not revived
  };
  static constexpr size_t kMax = 64;
  mutable std::mutex mu_;
  std::map<Key, Dormant> dormant_;
  struct Superseded {
    uint64_t longer = 0;
    std::shared_ptr<Plan> prefix;
    PlanState was = PlanState::active;
  };
  std::vector<Superseded> superseded_;
};

}  // namespace livefuse::planner
