// The plan view (--plan ID): everything the report holds about one plan.
#include "tools/inspect/format.hpp"
#include "tools/inspect/render.hpp"

namespace lfinspect {

using namespace livefuse;

namespace {

// "12.30 us (median of 3: 12.10 12.30 15.00)"
std::string timing(const std::optional<double>& median, const std::vector<double>& v) {
  if (v.empty()) return "";
  std::string r = num(median) + strf(" us (median of %zu:", v.size());
  for (double x : v) r += strf(" %.2f", x);
  return r + ")";
}

std::string field(const char* name, const std::string& value) {
  return value.empty() ? "" : strf("  %-16s %s\n", name, value.c_str());
}

// "%2.0" reads as "%2" (first output); inputs are "%j.k" (window op j, output k) or "$e".
std::string value_name(const std::string& in) {
  if (in.size() > 2 && in[0] == '%' && in.compare(in.size() - 2, 2, ".0") == 0)
    return in.substr(0, in.size() - 2);
  return in;
}

std::string ops(const PlanInfo& p) {
  std::string r =
      strf("\nOPS (%zu; $e = external input e, %%j = result of op j; inputs as dtype[rank])\n",
           p.ops.size());
  for (size_t j = 0; j < p.ops.size(); ++j) {
    const PlanOpInfo& o = p.ops[j];
    std::string args, types;
    for (size_t i = 0; i < o.inputs.size(); ++i) {
      args += (i ? ", " : "") + value_name(o.inputs[i]);
      const std::string dt = i < o.dtypes.size() ? o.dtypes[i] : "?";
      types += strf("%s%s[r%d]", i ? " " : "", dt.c_str(), i < o.ranks.size() ? o.ranks[i] : -1);
    }
    r += strf("  %%%-3zu = %s(%s)", j, o.op.c_str(), args.c_str());
    const size_t pad = 44;
    const size_t len = strf("  %%%-3zu = %s(%s)", j, o.op.c_str(), args.c_str()).size();
    r += std::string(len < pad ? pad - len : 1, ' ') + types;
    if (!o.attrs_hash.empty()) r += "  attrs " + o.attrs_hash;
    r += "\n";
  }
  return r;
}

std::string groups(const PlanInfo& p) {
  if (p.details.groups.empty()) return "";
  bool profiled = false;
  for (const FusionGroupInfo& g : p.details.groups) profiled |= g.gpu_us.has_value();
  std::string r = profiled ? "\nFUSION GROUPS (mean GPU time per replay)\n" : "\nFUSION GROUPS\n";
  for (const FusionGroupInfo& g : p.details.groups) {
    std::string list;
    for (size_t k = 0; k < g.ops.size(); ++k) list.append(k ? "," : "").append(std::to_string(g.ops[k]));
    // The GPU time column appears only for profiled plans (LIVEFUSE_PROFILE=1).
    const std::string gpu = !profiled ? "" : g.gpu_us ? strf("%9.2f us  ", *g.gpu_us) : std::string(14, ' ');
    r += strf("  %-6s %-14s %sops %-16s %s\n", g.name.c_str(), g.kind.c_str(), gpu.c_str(),
              list.c_str(), g.kernel.empty() ? "(eager)" : ("kernel " + g.kernel).c_str());
  }
  return r;
}

std::string indented(const std::string& text) {
  std::string r;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    r += "    " + text.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return r;
}

std::string kernels(const PlanInfo& p) {
  if (p.details.kernels.empty()) return "";
  std::string r = strf("\nKERNELS (%zu)\n", p.details.kernels.size());
  for (const KernelInfo& k : p.details.kernels) {
    r += strf("  %s  compile %s  cache %s\n", k.name.c_str(),
              k.compile_ms ? (num(k.compile_ms) + " ms").c_str() : "-",
              k.cache.empty() ? "-" : k.cache.c_str());
    for (const std::string& b : k.bodies) r += "  body: " + b + "\n";
    if (!k.source.empty()) r += "  --- generated source ---\n" + indented(k.source);
    if (!k.log.empty()) r += "  --- compiler log ---\n" + indented(k.log);
  }
  return r;
}

std::string graphs(const PlanInfo& p) {
  if (p.details.graphs.empty()) return "";
  std::string r = "\nGRAPHS PER SHAPE\n";
  r += strf("  %-40s %8s %6s\n", "SHAPE", "REPLAYS", "NODES");
  for (const GraphInfo& g : p.details.graphs)
    r += strf("  %-40s %8llu %6d\n", g.shape.c_str(), static_cast<unsigned long long>(g.replays),
              g.nodes);
  return r;
}

std::string history(const PlanInfo& p) {
  std::string r =
      "\nHISTORY (oldest first; ~ = seen by a snapshot, not reported when it happened)\n";
  if (p.history_dropped)
    r += strf("  (%llu older transitions dropped)\n",
              static_cast<unsigned long long>(p.history_dropped));
  if (p.history.empty()) return r + "  (none)\n";
  for (const Transition& t : p.history)
    r += strf("  %10s%s %-10s %s\n", at(t.t_ms).c_str(), t.observed ? "~" : " ", t.state.c_str(),
              t.reason.c_str());
  return r;
}

}  // namespace

std::string render_plan(const Snapshot& s, const PlanInfo& p) {
  (void)s;
  std::string r = strf("PLAN %llu  %s\n", static_cast<unsigned long long>(p.id), p.name.c_str());
  r += field("state", p.state);
  r += field("last reason", p.last_reason);
  r += field("device", p.device);
  r += field("origin", p.origin);
  r += field("signature", p.signature);
  const bool long_description = p.description.find('\n') != std::string::npos;
  if (!long_description) r += field("description", p.description == p.name ? "" : p.description);
  r += field("shape pattern", p.details.shape_pattern);
  r += field("external inputs", std::to_string(p.n_external));
  r += field("hits", strf("%llu (eager fallbacks %llu)", static_cast<unsigned long long>(p.hits),
                          static_cast<unsigned long long>(p.eager_fallbacks)));
  r += field("compile", p.details.compile_ms ? num(p.details.compile_ms) + " ms" : "");
  r += field("fused", timing(p.fused_us, p.sampled_fused_us));
  r += field("eager", timing(p.eager_us, p.sampled_eager_us));
  r += field("speedup", p.speedup ? num(p.speedup, "%.2fx") : "");
  if (long_description) r += "\nDESCRIPTION\n" + indented(p.description);
  r += ops(p) + groups(p);
  if (!p.details.decisions.empty()) {
    r += "\nPLANNER DECISIONS\n";
    for (const auto& [what, why] : p.details.decisions)
      r += "  " + what + (why.empty() ? "" : "\n      because " + why) + "\n";
  }
  r += kernels(p) + graphs(p) + history(p);
  if (!p.details.notes.empty()) {
    r += "\nNOTES\n";
    for (const auto& [k, v] : p.details.notes) r += strf("  %-16s %s\n", k.c_str(), v.c_str());
  }
  return r;
}

}  // namespace lfinspect
