// The report file: atomic writes, the background thread (LIVEFUSE_REPORT / _REPORT_MS), the
// final report and the trace at stop.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "livefuse/inspect.hpp"
#include "livefuse/livefuse.hpp"
#include "runtime/inspect_registry.hpp"

namespace lf = livefuse;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("lf_report_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::optional<lf::Snapshot> try_read(const fs::path& p) {
  std::ifstream f(p);
  if (!f) return std::nullopt;
  std::ostringstream s;
  s << f.rdbuf();
  return lf::snapshot_from_json(s.str());  // a partial file would throw: the write is atomic
}

// Waits up to 10 s for `pred` on the report at `p`.
template <class Pred>
std::optional<lf::Snapshot> wait_for(const fs::path& p, Pred pred) {
  for (int k = 0; k < 1000; ++k) {
    if (auto s = try_read(p); s && pred(*s)) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("report: write_report replaces the file atomically and leaves no temp file") {
  TempDir d;
  const fs::path p = d.path / "r.json";
  lf::write_report(p.string());
  auto s = try_read(p);
  REQUIRE(s);
  CHECK_FALSE(s->final);
  CHECK(s->pid == ::getpid());
  lf::write_report(p.string(), true);
  s = try_read(p);
  REQUIRE(s);
  CHECK(s->final);
  int files = 0;
  for (const auto& e : fs::directory_iterator(d.path)) {
    ++files;
    CHECK(e.path().filename() == "r.json");
  }
  CHECK(files == 1);
  CHECK_THROWS_WITH_AS(lf::write_report((d.path / "missing_dir" / "r.json").string()),
                       doctest::Contains("missing_dir"), lf::Error);
}

TEST_CASE(
    "report: the background thread rewrites the report, then writes a final one and the trace") {
  TempDir d;
  const fs::path report = d.path / "live.json", trace = d.path / "trace.json";
  const lf::Config saved = lf::config();
  lf::Config c = saved;
  c.report_path = report.string();
  c.report_ms = 20;
  c.trace_path = trace.string();
  lf::set_config_for_testing(c);
  lf::trace::reset_for_testing(false);

  lf::start_background_services();
  lf::start_background_services();  // idempotent
  CHECK(lf::trace::enabled());
  auto first = wait_for(report, [](const lf::Snapshot&) { return true; });
  REQUIRE_MESSAGE(first, "no report appeared at ", report.string());
  CHECK_FALSE(first->final);
  lf::record_decision("test", "report", "written", "by the background thread");
  // Live: later reports are newer snapshots, with what happened in between.
  auto later = wait_for(report, [&](const lf::Snapshot& s) {
    return s.uptime_ms > first->uptime_ms && !s.decisions.empty() &&
           s.decisions.back().subject == "report";
  });
  REQUIRE(later);
  CHECK(later->counter("report", "writes").value_or(0) >= 1);
  CHECK(later->counter("report", "write_errors") == 0u);

  lf::stop_background_services();
  CHECK_FALSE(lf::trace::enabled());
  auto last = try_read(report);
  REQUIRE(last);
  CHECK(last->final);
  // Stopped: the file is no longer rewritten.
  const auto mtime = fs::last_write_time(report);
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  CHECK(fs::last_write_time(report) == mtime);

  // The trace holds the report writes, on the report thread's named track.
  std::ifstream f(trace);
  REQUIRE(f.good());
  const nlohmann::json t = nlohmann::json::parse(f);
  int64_t report_tid = -1;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "M" && e["args"]["name"] == "livefuse-report") report_tid = e["tid"];
  CHECK(report_tid > 0);
  int writes = 0;
  for (const auto& e : t["traceEvents"])
    writes += e["name"] == "write_report" && e["tid"] == report_tid;
  CHECK(writes >= 2);

  // Startable again (a test hook; after exit has begun it is not).
  lf::start_background_services();
  CHECK(wait_for(report, [](const lf::Snapshot& s) { return !s.final; }));
  lf::stop_background_services();
  lf::set_config_for_testing(saved);
  lf::trace::reset_for_testing(false);
}

TEST_CASE("report: an unwritable report path is counted, not fatal") {
  TempDir d;
  const lf::Config saved = lf::config();
  lf::Config c = saved;
  c.report_path = (d.path / "no" / "such" / "dir.json").string();
  c.report_ms = 10;
  c.trace_path.clear();
  lf::set_config_for_testing(c);
  lf::start_background_services();
  uint64_t errors = 0;
  for (int k = 0; k < 500 && errors < 2; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    errors = lf::inspect().counter("report", "write_errors").value_or(0);
  }
  lf::stop_background_services();
  lf::set_config_for_testing(saved);
  CHECK(errors >= 2);
}
