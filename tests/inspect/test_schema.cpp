// The report schema: exact round trips, compatibility with the recorded v1 report, and clear
// errors for what is not a (complete, supported) report.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "golden_dir.hpp"
#include "livefuse/error.hpp"
#include "livefuse/inspect.hpp"
#include "rich_snapshot.hpp"

namespace lf = livefuse;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot read ", path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string parse_error(const std::string& text) {
  try {
    (void)lf::snapshot_from_json(text);
  } catch (const lf::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("inspect schema: every field survives a round trip, pretty and compact") {
  const lf::Snapshot s = lftest::rich_snapshot();
  for (int indent : {2, -1}) {
    const std::string text = lf::snapshot_to_json(s, indent);
    const lf::Snapshot back = lf::snapshot_from_json(text);
    CHECK(back == s);
    CHECK(lf::snapshot_to_json(back, indent) == text);
  }
  // Spot checks that equality is not vacuous: the values really are in the document.
  const std::string text = lf::snapshot_to_json(s);
  CHECK(text.find("\"schema_version\": 1") != std::string::npos);
  CHECK(text.find("lf_row_ln_f16_768") != std::string::npos);
  CHECK(text.find("\"speedup\": null") != std::string::npos);  // plans without samples
}

TEST_CASE("inspect schema: the recorded v1 report reads back to the snapshot it was made from") {
  // If this fails after a schema change, old reports would no longer read the same: bump
  // kReportSchemaVersion and keep reading v1, or keep the change additive.
  const std::string path = lftest::golden_dir() + "/report_states.json";
  const lf::Snapshot s = lf::snapshot_from_json(read_file(path));
  CHECK(s == lftest::rich_snapshot());
  REQUIRE(s.plans.size() == 7);
  for (std::string_view st : lf::kPlanStates) {
    bool found = false;
    for (const auto& p : s.plans) found |= p.state == st;
    CHECK_MESSAGE(found, "no plan in state ", st);
  }
}

TEST_CASE("inspect schema: a report from before kernels' bodies reads with none") {
  // `bodies` (row kernels' body per launch shape) was added to kernels without a version bump:
  // the recorded report without it reads back to the same snapshot, less the bodies.
  std::string text = read_file(lftest::golden_dir() + "/report_states.json");
  size_t removed = 0;
  for (size_t p = text.find(",\n"); p != std::string::npos; p = text.find(",\n", p + 1)) {
    const size_t key = text.find_first_not_of(" \n", p + 1);
    if (text.compare(key, 9, "\"bodies\":") != 0) continue;
    const size_t end = text.find(']', key);
    text.erase(p, end + 1 - p);
    ++removed;
  }
  REQUIRE(removed > 0);
  REQUIRE(text.find("\"bodies\"") == std::string::npos);
  lf::Snapshot want = lftest::rich_snapshot();
  size_t had = 0;
  for (auto& p : want.plans)
    for (auto& k : p.details.kernels) {
      had += k.bodies.size();
      k.bodies.clear();
    }
  CHECK(had > 0);
  CHECK(lf::snapshot_from_json(text) == want);
}

TEST_CASE("inspect schema: a live snapshot round-trips") {
  const lf::Snapshot s = lf::inspect();
  CHECK(s.schema_version == lf::kReportSchemaVersion);
  CHECK(s.pid > 0);
  CHECK(!s.config.empty());
  CHECK(s.counter("matcher", "calls").has_value());
  CHECK(lf::snapshot_from_json(lf::snapshot_to_json(s)) == s);
}

TEST_CASE("inspect schema: unknown fields are ignored, optional ones default") {
  const std::string text =
      R"({"schema_version": 1, "added_later": [1, 2], "counters": {"m": {"a": 3}},
    "plans": [{"id": 9, "state": "active", "new_field": {"x": 1}}]})";
  const lf::Snapshot s = lf::snapshot_from_json(text);
  REQUIRE(s.plans.size() == 1);
  CHECK(s.plans[0].id == 9);
  CHECK(s.plans[0].state == "active");
  CHECK(!s.plans[0].speedup.has_value());
  CHECK(s.counter("m", "a") == 3u);
  CHECK(!s.counter("m", "b").has_value());
}

TEST_CASE("inspect schema: what is not a complete, supported report is named") {
  const std::string good = lf::snapshot_to_json(lftest::rich_snapshot());
  CHECK(parse_error("").find("empty") != std::string::npos);
  CHECK(parse_error("  \n").find("empty") != std::string::npos);
  // A partial file (a reader racing a writer that does not rename) is reported as truncated.
  CHECK(
      parse_error(good.substr(0, good.size() / 2)).find("not valid JSON (truncated or corrupt)") !=
      std::string::npos);
  CHECK(parse_error("\x7f"
                    "ELF garbage")
            .find("not valid JSON") != std::string::npos);
  CHECK(parse_error("[1, 2]").find("not a livefuse report") != std::string::npos);
  CHECK(parse_error(R"({"plans": []})").find("not a livefuse report") != std::string::npos);
  const std::string newer = parse_error(R"({"schema_version": 99, "counters": {}, "plans": []})");
  CHECK(newer.find("schema_version 99") != std::string::npos);
  CHECK(parse_error(R"({"schema_version": 1, "counters": {}})").find("'plans' is missing") !=
        std::string::npos);
  CHECK(parse_error(R"({"schema_version": 1, "plans": []})").find("'counters' is missing") !=
        std::string::npos);
  CHECK(parse_error(R"({"schema_version": 1, "counters": {}, "plans": [{"id": 1}]})")
            .find("'plans[0].state' is missing") != std::string::npos);
  CHECK(parse_error(
            R"({"schema_version": 1, "counters": {}, "plans": [{"id": 1, "state": "cooking"}]})")
            .find("'cooking', not a known plan state") != std::string::npos);
  CHECK(parse_error(
            R"({"schema_version": 1, "counters": {}, "plans": [{"id": "one", "state": "active"}]})")
            .find("'plans[0].id' has the wrong type") != std::string::npos);
  CHECK(parse_error(R"({"schema_version": 1, "counters": {"m": {"a": -1}}, "plans": []})")
            .find("counters.m.a") != std::string::npos);
  CHECK(parse_error(R"({"schema_version": 1, "counters": {}, "plans": {}})")
            .find("should be an array") != std::string::npos);
}

TEST_CASE("inspect schema: text that is not valid UTF-8 does not cost the report") {
  lf::Snapshot s = lftest::rich_snapshot();
  s.plans[0].details.kernels[0].log = std::string("bad byte \xff here");
  const std::string text = lf::snapshot_to_json(s);
  const lf::Snapshot back = lf::snapshot_from_json(text);
  CHECK(back.plans[0].details.kernels[0].log.find("bad byte") == 0);
  CHECK(back.plans[0].details.kernels[0].log != s.plans[0].details.kernels[0].log);  // replaced
}
