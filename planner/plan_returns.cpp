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

std::shared_ptr<Plan> serving_longer_plan(const Plan& shorter) {
  for (const auto& q : PlanTable::get().plans())
    if (q->state.load() == PlanState::active && takes_windows_of(shorter, *q) &&
        !runs_elsewhere(shorter.occurrences, q->hits.load() + q->occurrences))
      return q;
  return nullptr;
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

void PlanReturns::superseded(uint64_t longer, std::shared_ptr<Plan> prefix) {
  std::lock_guard<std::mutex> g(mu_);
  if (superseded_.size() >= kMax) superseded_.erase(superseded_.begin());
  superseded_.push_back({longer, std::move(prefix)});
}

bool PlanReturns::watching() const {
  std::lock_guard<std::mutex> g(mu_);
  return !superseded_.empty();
}

std::vector<std::shared_ptr<Plan>> PlanReturns::restore() {
  std::vector<std::pair<uint64_t, std::shared_ptr<Plan>>> todo, keep;
  {
    std::lock_guard<std::mutex> g(mu_);
    todo.swap(superseded_);
  }
  std::vector<std::shared_ptr<Plan>> back;
  for (auto& [longer, prefix] : todo) {
    const std::shared_ptr<Plan> l = PlanTable::get().find(longer);
    const PlanState st = l ? l->state.load() : PlanState::retired;
    if (st == PlanState::sampling) {
      keep.push_back({longer, prefix});
      continue;
    }
    // Active: it won. Retired: replaced by a newer plan of its structure (which starts with
    // the same ops), or cold. Either way the prefix stays retired.
    if (st != PlanState::rejected && st != PlanState::failed) continue;
    if (PlanTable::get().revive(prefix->id, "active again: plan " + std::to_string(longer) +
                                                ", which superseded it, does not serve"))
      back.push_back(prefix);
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
