#include "livefuse/error.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/plan.hpp"

namespace livefuse {

std::string_view plan_state_name(PlanState s) {
  switch (s) {
    case PlanState::sampling:
      return "sampling";
    case PlanState::active:
      return "active";
    case PlanState::rejected:
      return "rejected";
    case PlanState::retired:
      return "retired";
    case PlanState::failed:
      return "failed";
  }
  return "?";
}

MatcherCounters& matcher_counters() {
  static MatcherCounters* c = new MatcherCounters;  // leaked: read by the report thread at exit
  return *c;
}

PlanTable& PlanTable::get() {
  // Leaked on purpose: plans hold compiled modules and graphs that user threads may still be
  // replaying while static destructors run.
  static PlanTable* t = new PlanTable;
  return *t;
}

void PlanTable::publish(std::shared_ptr<Plan> p) {
  std::lock_guard<std::mutex> g(mu_);
  auto next = std::make_shared<Snapshot>(*snap_);
  next->plans.push_back(std::move(p));
  // Bounded: drop the oldest plans that no longer serve (rejected, retired, failed) first,
  // then the oldest of any state.
  while (next->plans.size() > kMaxPlans) {
    auto victim = next->plans.begin();
    for (auto it = next->plans.begin(); it != next->plans.end(); ++it) {
      const PlanState s = (*it)->state.load();
      if (s != PlanState::active && s != PlanState::sampling) {
        victim = it;
        break;
      }
    }
    next->plans.erase(victim);
  }
  snap_ = std::move(next);
  version_.fetch_add(1, std::memory_order_release);
}

void PlanTable::retire(uint64_t plan_id, const std::string& reason) {
  std::lock_guard<std::mutex> g(mu_);
  auto next = std::make_shared<Snapshot>();
  for (const auto& p : snap_->plans) {
    if (p->id == plan_id) record_transition(*p, PlanState::retired, reason);
    next->plans.push_back(p);
  }
  snap_ = std::move(next);
  version_.fetch_add(1, std::memory_order_release);
}

bool starts_with_ops(const std::vector<PlanOp>& longer, const std::vector<PlanOp>& shorter) {
  if (shorter.empty() || longer.size() <= shorter.size()) return false;
  for (size_t k = 0; k < shorter.size(); ++k) {
    const PlanOp& a = longer[k];
    const PlanOp& b = shorter[k];
    if (a.op != b.op || a.attrs_hash != b.attrs_hash || a.in_dtypes != b.in_dtypes ||
        a.in_ranks != b.in_ranks || a.inputs.size() != b.inputs.size())
      return false;
    for (size_t m = 0; m < a.inputs.size(); ++m)
      if (a.inputs[m].op != b.inputs[m].op || a.inputs[m].out != b.inputs[m].out ||
          a.inputs[m].slot != b.inputs[m].slot)
        return false;
  }
  return true;
}

bool PlanTable::revive(uint64_t plan_id, const std::string& reason, PlanState to) {
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& p : snap_->plans)
    if (p->id == plan_id && p->state.load() == PlanState::retired) {
      record_transition(*p, to, reason);
      // A new snapshot: the matchers' cached ones skip plans that were not usable.
      snap_ = std::make_shared<Snapshot>(*snap_);
      version_.fetch_add(1, std::memory_order_release);
      return true;
    }
  return false;
}

std::shared_ptr<Plan> PlanTable::find(uint64_t plan_id) const {
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& p : snap_->plans)
    if (p->id == plan_id) return p;
  return nullptr;
}

std::shared_ptr<const PlanTable::Snapshot> PlanTable::snapshot() const {
  std::lock_guard<std::mutex> g(mu_);
  return snap_;
}

void PlanTable::clear_for_testing() {
  std::lock_guard<std::mutex> g(mu_);
  snap_ = std::make_shared<Snapshot>();
  version_.fetch_add(1, std::memory_order_release);
}

}  // namespace livefuse
