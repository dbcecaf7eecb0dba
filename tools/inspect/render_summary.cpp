// The summary view: what is the program, what plans exist and how they do, the counters.
#include <map>

#include "tools/inspect/format.hpp"
#include "tools/inspect/render.hpp"

namespace lfinspect {

using namespace livefuse;

namespace {

std::string header(const Snapshot& s) {
  std::string r =
      strf("livefuse report: %s (pid %lld), livefuse %s, schema %d\n", s.program.c_str(),
           static_cast<long long>(s.pid), s.livefuse_version.c_str(), s.schema_version);
  r += strf("mode %s, uptime %.2f s, %s\n", s.mode.c_str(), s.uptime_ms / 1000.0,
            s.final ? "final report (the program has exited)" : "live");
  std::map<std::string, int> by_state;
  uint64_t replays = 0;
  for (const PlanInfo& p : s.plans) ++by_state[p.state], replays += p.hits;
  r += strf("plans: %zu", s.plans.size());
  std::string parts;
  for (std::string_view st : kPlanStates) {
    auto it = by_state.find(std::string(st));
    if (it == by_state.end()) continue;
    parts += strf("%s%d %.*s", parts.empty() ? "" : ", ", it->second, static_cast<int>(st.size()),
                  st.data());
  }
  if (!parts.empty()) r += " (" + parts + ")";
  r += strf(", %llu replays", static_cast<unsigned long long>(replays));
  if (auto served = s.counter("matcher", "served"), calls = s.counter("matcher", "calls");
      served && calls && *calls)
    r += strf(", %.1f%% of calls served by plans",
              100.0 * static_cast<double>(*served) / static_cast<double>(*calls));
  return r + "\n";
}

std::string plan_table(const Snapshot& s) {
  if (s.plans.empty()) return "\nPLANS\n  (none yet: no repeating op sequence has been planned)\n";
  std::string r = "\nPLANS\n";
  r += strf("  %8s  %-9s  %-4s  %4s  %8s  %6s  %9s  %9s  %7s  %s\n", "ID", "STATE", "DEV", "OPS",
            "HITS", "FALLBK", "FUSED_US", "EAGER_US", "SPEEDUP", "NAME");
  for (const PlanInfo& p : s.plans) {
    r += strf("  %8llu  %-9s  %-4s  %4zu  %8llu  %6llu  %9s  %9s  %7s  %s\n",
              static_cast<unsigned long long>(p.id), p.state.c_str(), p.device.c_str(),
              p.ops.size(), static_cast<unsigned long long>(p.hits),
              static_cast<unsigned long long>(p.eager_fallbacks), num(p.fused_us).c_str(),
              num(p.eager_us).c_str(), num(p.speedup, "%.2fx").c_str(),
              one_line(p.name, 40).c_str());
    if (!p.last_reason.empty()) r += "            why: " + one_line(p.last_reason, 100) + "\n";
  }
  return r;
}

std::string counters(const Snapshot& s) {
  std::string r = "\nCOUNTERS\n";
  constexpr size_t kWidth = 100;
  for (const CounterGroup& g : s.counters) {
    std::string line = strf("  %-14s", g.name.c_str());
    const size_t indent = line.size();
    for (const auto& [n, v] : g.values) {
      const std::string item =
          n + "=" + (n.find("bytes") != std::string::npos ? bytes(v) : std::to_string(v));
      if (line.size() > indent && line.size() + 2 + item.size() > kWidth) {
        r += line + "\n";
        line = std::string(indent, ' ');
      }
      line += "  " + item;
    }
    r += line + "\n";
  }
  return r;
}

std::string config(const Snapshot& s, bool all) {
  std::string r;
  for (const ConfigEntry& c : s.config) {
    if (!all && c.source == "default") continue;
    r += strf("  %-26s %-24s %s\n", c.name.c_str(), c.value.empty() ? "\"\"" : c.value.c_str(),
              c.source.c_str());
  }
  if (r.empty()) return "\nCONFIG\n  (all defaults; --config lists them)\n";
  return std::string("\nCONFIG") + (all ? "" : " (set in the environment; --config lists all)") +
         "\n" + r;
}

std::string decisions(const Snapshot& s, int n) {
  if (n <= 0) return "";
  const size_t total = s.decisions.size();
  const size_t shown = std::min(total, static_cast<size_t>(n));
  std::string r = strf("\nRECENT DECISIONS (last %zu of %zu kept; %llu older dropped)\n", shown,
                       total, static_cast<unsigned long long>(s.decisions_dropped));
  if (total == 0) return r + "  (none)\n";
  for (size_t k = total - shown; k < total; ++k) {
    const Decision& d = s.decisions[k];
    r += strf("  %10s  %-10s %-22s %-12s %s\n", at(d.t_ms).c_str(), d.component.c_str(),
              one_line(d.subject, 22).c_str(), one_line(d.what, 12).c_str(),
              one_line(d.reason, 80).c_str());
  }
  return r;
}

}  // namespace

std::string render_summary(const Snapshot& s, const RenderOptions& o) {
  return header(s) + plan_table(s) + counters(s) + config(s, o.all_config) +
         decisions(s, o.decisions);
}

}  // namespace lfinspect
