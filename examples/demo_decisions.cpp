#include "examples/demo_decisions.hpp"

#include <cstdio>
#include <filesystem>
#include <string_view>
#include <system_error>

#include "livefuse/inspect.hpp"

namespace demo {

namespace {

std::string duration(double us) {
  char buf[32];
  if (us >= 1000) std::snprintf(buf, sizeof buf, "%.2f ms", us / 1000);
  else std::snprintf(buf, sizeof buf, "%.1f us", us);
  return buf;
}

// "16 ops, linear .. layer_norm": the plan's name lists every op, too long for one line.
std::string what_it_covers(const livefuse::PlanInfo& p) {
  std::string s = std::to_string(p.ops.size());
  s += p.ops.size() == 1 ? " op" : " ops";
  if (!p.ops.empty()) {
    s += ", ";
    s += p.ops.front().op;
    if (p.ops.size() > 1) {
      s += " .. ";
      s += p.ops.back().op;
    }
  }
  return s;
}

std::string verdict(const livefuse::PlanInfo& p) {
  char buf[160];
  const bool timed = p.fused_us && p.eager_us;
  const size_t n = std::min(p.sampled_fused_us.size(), p.sampled_eager_us.size());
  if (p.state == "active" && timed) {
    std::snprintf(buf, sizeof buf, "kept: %.2fx faster than eager (%s against %s, medians of %zu)",
                  p.speedup.value_or(0), duration(*p.fused_us).c_str(),
                  duration(*p.eager_us).c_str(), n);
    return buf;
  }
  if (p.state == "active") return "kept without timing (LIVEFUSE_SAMPLE=0)";
  if (p.state == "rejected" && timed) {
    std::snprintf(buf, sizeof buf,
                  "rejected: not 5%% faster than eager (%s against %s, medians of %zu)",
                  duration(*p.fused_us).c_str(), duration(*p.eager_us).c_str(), n);
    return buf;
  }
  if (p.state == "sampling") return "still being timed against eager when the demo ended";
  std::string s = p.state;
  if (!p.last_reason.empty()) s.append(": ").append(p.last_reason);
  return s;
}

// The inspect tool built beside this program (build/tools/inspect/), named relative to the
// working directory when it lies below it; otherwise the installed one.
std::string inspect_command() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path tool = exe.parent_path().parent_path() / "tools/inspect/livefuse-inspect";
    if (fs::exists(tool, ec)) {
      const fs::path rel = fs::relative(tool, fs::current_path(ec), ec);
      if (!ec && !rel.empty() && *rel.begin() != "..") return rel.string();
      return tool.string();
    }
  }
  return "livefuse-inspect";
}

}  // namespace

std::vector<std::string> decision_lines(const std::string& report) {
  const livefuse::Snapshot s = livefuse::inspect();
  std::vector<std::string> out;
  if (s.mode == "off") {
    out.push_back("decided: nothing -- fusion is off (LIVEFUSE=off), every call ran eagerly");
    return out;
  }
  size_t plans = 0, retired = 0;
  std::string retired_why;
  for (const livefuse::PlanInfo& p : s.plans) {
    if (p.origin != "plan_table") continue;
    ++plans;
    // Plans replaced by a newer one (a decode loop's shapes moved on): one line for all.
    if (p.state == "retired") {
      if (retired++ == 0) retired_why = p.last_reason;
      continue;
    }
    const uint64_t calls = p.hits * p.ops.size();
    std::string line = "plan ";
    line.append(std::to_string(p.id)).append(" (").append(what_it_covers(p)).append("): ");
    line.append(verdict(p)).append("; served ").append(std::to_string(calls));
    line.append(" calls in ").append(std::to_string(p.hits)).append(" runs");
    if (p.state == "rejected") line.append(" while it was timed");
    out.push_back(std::move(line));
  }
  if (retired > 0) {
    std::string line = std::to_string(retired);
    line.append(retired == 1 ? " earlier plan" : " earlier plans").append(" retired");
    const std::string_view prefix = "retired: ";
    std::string_view why = retired_why;
    if (why.substr(0, prefix.size()) == prefix) why.remove_prefix(prefix.size());
    if (!why.empty()) line.append(" (the last: ").append(why).append(")");
    out.push_back(std::move(line));
  }
  if (plans == 0)
    out.push_back("decided: no plan -- no sequence of calls repeated often enough (LIVEFUSE_HOT)");
  const std::string tool = inspect_command();
  std::string more = "more (each plan's groups, kernels, timings, history): ";
  if (report.empty()) more.append("run with --report /tmp/livefuse-demo.json, then ");
  more.append(tool).append(" ").append(report.empty() ? "/tmp/livefuse-demo.json" : report);
  out.push_back(std::move(more));
  return out;
}

}  // namespace demo
