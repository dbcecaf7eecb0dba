#include "planner/plan_returns.hpp"

#include <algorithm>

namespace livefuse::planner {

std::vector<std::shared_ptr<Plan>> prefixes_of(const Plan& longer, uint64_t occurrences) {
  std::vector<std::shared_ptr<Plan>> prefixes;
  for (const auto& q : PlanTable::get().plans()) {
    const PlanState st = q->state.load();
    if ((st == PlanState::active || st == PlanState::sampling) && takes_windows_of(*q, longer) &&
        !runs_elsewhere(q->hits.load(), occurrences))
      prefixes.push_back(q);
  }
  return prefixes;
}

std::shared_ptr<Plan> longer_plan_for(const Plan& shorter) {
  std::shared_ptr<Plan> sampling;
  for (const auto& q : PlanTable::get().plans()) {
    const PlanState st = q->state.load();
    if ((st != PlanState::active && st != PlanState::sampling) || !takes_windows_of(shorter, *q) ||
        runs_elsewhere(shorter.occurrences, q->hits.load() + q->occurrences))
      continue;
    if (st == PlanState::active) return q;
    if (!sampling) sampling = q;
  }
  return sampling;
}

void PlanReturns::went_cold(const Key& k, const Plan& p) {
  const PlanState st = p.state.load();
  if (st != PlanState::active && st != PlanState::rejected) return;
  std::lock_guard<std::mutex> g(mu_);
  if (dormant_.size() >= kMax) dormant_.erase(dormant_.begin());
  dormant_[k] = Dormant{p.id, p.shape_tuples, p.family.defined(), st == PlanState::rejected};
}

PlanReturns::Back PlanReturns::returns(const monitor::Candidate& c, uint64_t* plan_id) {
  Dormant was;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto d = dormant_.find({c.signature, c.stream});
    if (d == dormant_.end()) return Back::none;
    was = std::move(d->second);
    dormant_.erase(d);
  }
  if (was.family != c.shapes.family.defined()) return Back::none;
  for (const monitor::ShapeTuple& t : c.shapes.tuples)
    if (std::find(was.tuples.begin(), was.tuples.end(), ShapeTupleKey::of(t.dims)) == was.tuples.end())
      return Back::none;
  *plan_id = was.plan_id;
  if (was.rejected) return Back::still_rejected;  // the shapes it lost with (a new mix is planned)
  return PlanTable::get().revive(was.plan_id, "active again: the sequence is hot again, with the shapes it was planned for")
             ? Back::revived
             : Back::none;
}

void PlanReturns::superseded(uint64_t longer, std::shared_ptr<Plan> prefix, PlanState was) {
  std::lock_guard<std::mutex> g(mu_);
  if (superseded_.size() >= kMax) superseded_.erase(superseded_.begin());
  superseded_.push_back({longer, std::move(prefix), was});
}

bool PlanReturns::watching() const {
  std::lock_guard<std::mutex> g(mu_);
  return !superseded_.empty();
}

std::vector<std::shared_ptr<Plan>> PlanReturns::restore() {
  std::vector<Superseded> todo, keep;
  {
    std::lock_guard<std::mutex> g(mu_);
    todo.swap(superseded_);
  }
  std::vector<std::shared_ptr<Plan>> back;
  for (Superseded& e : todo) {
    const std::shared_ptr<Plan> l = PlanTable::get().find(e.longer);
    const PlanState st = l ? l->state.load() : PlanState::retired;
    if (st == PlanState::sampling) {
      keep.push_back(std::move(e));
      continue;
    }
    // Active: it won. Retired after matching windows: replaced by a newer plan of its structure
    // (which starts with the same ops), or cold; either way the prefix stays retired. Retired
    // without ever matching a window (planned from windows that did not come back: a prefill's),
    // it never took the prefix's windows: the prefix comes back -- unless another plan that
    // starts with its ops (a replacement of the longer one) is there to take them.
    const bool never_matched = st == PlanState::retired && l && l->hits.load() == 0 &&
                               !longer_plan_for(*e.prefix);
    if (st != PlanState::rejected && st != PlanState::failed && !never_matched) continue;
    const bool active = e.was == PlanState::active;
    if (PlanTable::get().revive(e.prefix->id,
                                std::string(active ? "active" : "sampling") + " again: plan " +
                                    std::to_string(e.longer) + ", which it stepped aside for, does not serve" +
                                    (never_matched ? " (it went cold without a window)" : ""),
                                active ? PlanState::active : PlanState::sampling))
      back.push_back(e.prefix);
  }
  std::lock_guard<std::mutex> g(mu_);
  superseded_.insert(superseded_.end(), keep.begin(), keep.end());
  return back;
}

void PlanReturns::clear() {
  std::lock_guard<std::mutex> g(mu_);
  dormant_.clear();
  superseded_.clear();
}

}  // namespace livefuse::planner
