// PlanInfo from a published Plan: the matcher's view (ops, state, counts, samples) plus what
// the plan says about itself (Plan::details) and its transition history.
#include <algorithm>
#include <cstdio>

#include "livefuse/error.hpp"
#include "livefuse/inspect.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/plan.hpp"

namespace livefuse {

namespace {

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::optional<double> median(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

PlanOpInfo op_info_of(const PlanOp& op) {
  PlanOpInfo o;
  o.op = std::string(op_name(op.op));
  for (const PlanInput& in : op.inputs)
    o.inputs.push_back(in.internal() ? detail::concat("%", in.op, ".", in.out)
                                     : detail::concat("$", in.slot));
  for (DType t : op.in_dtypes) o.dtypes.emplace_back(dtype_name(t));
  for (int8_t r : op.in_ranks) o.ranks.push_back(r);
  o.attrs_hash = hex(op.attrs_hash);
  return o;
}

}  // namespace

PlanInfo plan_info(Plan& p) {
  PlanInfo i;
  i.id = p.id;
  i.name = p.name;
  i.state = std::string(plan_state_name(p.state.load()));
  i.device = p.device_kind == DeviceKind::cuda ? "cuda" : "cpu";
  i.origin = "plan_table";
  i.signature = hex(p.signature);
  i.n_external = p.n_external;
  for (const PlanOp& op : p.ops) i.ops.push_back(op_info_of(op));
  i.hits = p.hits.load(std::memory_order_relaxed);
  i.eager_fallbacks = p.eager_fallbacks.load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> g(p.sample_mu);
    // The samples the verdict compares (unmatched ones -- a layer one run ahead -- left out).
    matched_samples(p, i.sampled_fused_us, i.sampled_eager_us);
    i.last_reason = p.last_reason;
  }
  i.fused_us = median(i.sampled_fused_us);
  i.eager_us = median(i.sampled_eager_us);
  if (i.fused_us && i.eager_us && *i.fused_us > 0) i.speedup = *i.eager_us / *i.fused_us;
  inspect_detail::plan_history(i.id, i.state, i.last_reason, &i.history, &i.history_dropped);
  // A plan's own description must not cost the snapshot: its failure becomes a note.
  try {
    i.description = p.describe();
    p.details(i.details);
  } catch (const std::exception& e) {
    i.details.notes.emplace_back("details_error", e.what());
  }
  return i;
}

}  // namespace livefuse
