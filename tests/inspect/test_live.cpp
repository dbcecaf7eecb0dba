// The CLI against programs running in the background, reading the report they rewrite.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli_util.hpp"
#include "livefuse/inspect.hpp"

namespace lf = livefuse;
namespace fs = std::filesystem;
using lftest::cli_path;
using lftest::run;

namespace {

// Polls the CLI's --json view until `pred` holds (at most `timeout_s`).
template <class Pred>
std::optional<lf::Snapshot> poll(const fs::path& report, int timeout_s, Pred pred) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (fs::exists(report)) {
      const auto r = run(cli_path(), {"--json", report.string()});
      // The file exists, so every read must succeed: replacement is atomic.
      REQUIRE_MESSAGE(r.rc == 0, r.err);
      lf::Snapshot s = lf::snapshot_from_json(r.out);
      if (pred(s)) return s;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return std::nullopt;
}

// Removes a scratch folder also when a REQUIRE ends the test early.
struct Cleanup {
  fs::path dir;
  ~Cleanup() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

void check_states_valid(const lf::Snapshot& s) {
  for (const auto& p : s.plans)
    CHECK_MESSAGE(lf::is_valid_plan_state(p.state), "plan ", p.id, " state ", p.state);
}

}  // namespace

// Asserts: the report is rewritten while the program runs (uptime grows), every read of it
// parses, --watch and the table work on it, the plan the driver installs leaves "sampling"
// on live traffic (the real matcher samples it against eager and decides), and at exit the
// report is final and the trace holds the driver's iterations, plan replays and report writes.
TEST_CASE("live: the CLI follows a running program's report until its final one") {
  const fs::path dir = lftest::scratch_dir("live");
  const Cleanup cleanup{dir};
  const fs::path report = dir / "live.json", trace = dir / "trace.json";
  const pid_t pid = lftest::spawn(lftest::env_path("LF_INSPECT_DRIVER").string(), {"3"},
                                  {"LIVEFUSE=on", "LIVEFUSE_REPORT=" + report.string(),
                                   "LIVEFUSE_REPORT_MS=50", "LIVEFUSE_TRACE=" + trace.string()},
                                  dir / "driver.txt");
  auto first = poll(report, 20, [](const lf::Snapshot& s) { return !s.final; });
  REQUIRE_MESSAGE(first, "the driver wrote no live report; its output:\n",
                  lftest::read_file(dir / "driver.txt"));
  check_states_valid(*first);
  auto later = poll(report, 20, [&](const lf::Snapshot& s) {
    return s.uptime_ms > first->uptime_ms && s.counter("driver", "iterations").value_or(0) > 0;
  });
  REQUIRE(later);
  CHECK(later->pid == first->pid);

  const auto w = run(cli_path(), {"--watch", "--count", "3", "--interval", "60", report.string()});
  CHECK(w.rc == 0);
  CHECK(lftest::count(w.out, "\nPLANS\n") == 3);
  CHECK(w.out.find("mul+tanh+add") != std::string::npos);

  CHECK(lftest::wait_exit(pid, 60) == 0);
  const auto fin = run(cli_path(), {"--json", report.string()});
  REQUIRE(fin.rc == 0);
  const lf::Snapshot s = lf::snapshot_from_json(fin.out);
  CHECK(s.final);
  check_states_valid(s);
  const lf::PlanInfo* p = s.find_plan(1000000);  // the driver's plan
  REQUIRE(p);
  // Decided -- or, in a slow run (the sanitizer builds), rejected and being sampled again at exit
  // (a rejected plan's retry, runtime/matcher_window.hpp): its reason then names the retry, which
  // only follows a verdict.
  const bool retrying = p->state == "sampling" && p->last_reason.find("sampling again (retry") != std::string::npos;
  CHECK_MESSAGE((p->state == "active" || p->state == "rejected" || retrying), "state ", p->state, ": ",
                p->last_reason);
  if (!retrying) {
    CHECK(p->last_reason.find("sampled") != std::string::npos);
    CHECK(p->sampled_fused_us.size() >= 5);
  }
  // The matcher sets states itself (no record_transition yet), so history holds what the
  // snapshots saw: at least the decided state, last.
  REQUIRE(!p->history.empty());
  CHECK(p->history.back().state == p->state);
  CHECK(*s.counter("matcher", "completions") > 0);
  if (p->state == "active") CHECK(p->hits > 5);

  const auto view = run(cli_path(), {"--plan", "1000000", report.string()});
  CHECK(view.rc == 0);
  CHECK(view.out.find("HISTORY") != std::string::npos);
  CHECK(view.out.find("test plan: runs its window eagerly") != std::string::npos);

  std::ifstream f(trace);
  REQUIRE_MESSAGE(f.good(), "no trace at ", trace.string());
  const nlohmann::json t = nlohmann::json::parse(f);
  std::map<std::string, int> n;
  for (const auto& e : t["traceEvents"]) ++n[e["name"].get<std::string>()];
  CHECK(n["iteration"] > 5);
  CHECK(n["replay"] > 0);
  CHECK(n["write_report"] >= 2);
  CHECK(n["thread_name"] >= 2);  // driver-main, livefuse-report
}

// The demo as a user runs it (README). Asserts only what holds before the planner exists:
// a live report appears while it runs (this needs the executor to call
// start_background_services()), it parses, plan states are valid, and the last report is
// final. It does not assert that a plan becomes active.
TEST_CASE("demo: the CLI reads livefuse-demo's live report and sees a plan become active") {
  const fs::path dir = lftest::scratch_dir("demo");
  const Cleanup cleanup{dir};
  const fs::path report = dir / "demo.json", trace = dir / "demo_trace.json";
  // LIVEFUSE_SAMPLE=0: plans are kept without timing them against eager, so on a loaded CPU
  // the test does not depend on which path happens to be faster. LF_DEMO_ITERS: under
  // ThreadSanitizer an iteration takes ~100 ms, and 3000 of them ran past the test's timeout
  // (tools/sanitize.sh sets fewer).
  const char* iters = std::getenv("LF_DEMO_ITERS");
  const pid_t pid = lftest::spawn(lftest::env_path("LF_DEMO").string(),
                                  {"--iters", iters && *iters ? iters : "3000", "--layers", "1",
                                   "--seq", "16", "--device", "cpu", "--quiet"},
                                  {"LIVEFUSE_REPORT=" + report.string(), "LIVEFUSE_REPORT_MS=50",
                                   "LIVEFUSE_TRACE=" + trace.string(), "LIVEFUSE_SAMPLE=0"},
                                  dir / "demo.txt");
  // While the demo runs: read its live report with the CLI until a plan is active.
  bool live_active = false, saw_live = false;
  for (int i = 0; i < 600 && !live_active; ++i) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      FAIL("livefuse-demo exited before a plan became active: ", lftest::read_file(dir / "demo.txt"));
      break;
    }
    if (fs::exists(report)) {
      const auto r = run(cli_path(), {"--json", report.string()});
      if (r.rc == 0) {
        const lf::Snapshot s = lf::snapshot_from_json(r.out);
        saw_live |= !s.final;
        for (const auto& p : s.plans) live_active |= !s.final && p.state == "active";
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(saw_live);
  CHECK(live_active);
  const int rc = lftest::wait_exit(pid, 300);
  const std::string demo_out = lftest::read_file(dir / "demo.txt");
  INFO("demo output:\n", demo_out);  // INFO captures by reference: keep the text alive
  CHECK(rc == 0);
  CHECK(demo_out.find("served_by_plans=") != std::string::npos);
  REQUIRE(fs::exists(report));
  const auto r = run(cli_path(), {"--json", report.string()});
  REQUIRE(r.rc == 0);
  const lf::Snapshot s = lf::snapshot_from_json(r.out);
  CHECK(s.final);
  CHECK(s.program.find("livefuse-demo") == 0);
  check_states_valid(s);
  CHECK(s.counter("memory.cpu", "allocations").value_or(0) > 0);
  CHECK(s.counter("matcher", "served").value_or(0) > 0);
  const auto table = run(cli_path(), {report.string()});
  CHECK(table.rc == 0);
  CHECK(table.out.find("COUNTERS") != std::string::npos);
  std::ifstream f(trace);
  REQUIRE_MESSAGE(f.good(), "no trace at ", trace.string());
  const nlohmann::json tj = nlohmann::json::parse(f);
  const std::string dump = tj.dump();
  CHECK(dump.find("\"replay") != std::string::npos);  // plan replays are on the timeline
}
