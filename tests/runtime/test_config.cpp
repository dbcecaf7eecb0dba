#include <tbb/global_control.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>

#include "test_util.hpp"

namespace lf = livefuse;

namespace {
std::map<std::string, std::string> g_env;
const char* fake_getenv(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}
std::string source_of(const lf::Config& c, const std::string& var) {
  for (const auto& [k, v] : c.sources)
    if (k == var) return v;
  return "";
}
}  // namespace

TEST_CASE("config: defaults, valid values and one warning per bad value") {
  g_env = {{"HOME", "/home/u"}};
  std::vector<std::string> warnings;
  lf::Config c = lf::parse_config(fake_getenv, &warnings);
  CHECK(warnings.empty());
  CHECK(c.mode == lf::Mode::on);
  CHECK(c.cache_dir == "/home/u/.cache/livefuse");
  CHECK(source_of(c, "LIVEFUSE_HOT") == "default");
  CHECK(c.jit_lto);  // pointwise kernels are linked from the op library unless LIVEFUSE_JIT=nvrtc

  g_env = {{"LIVEFUSE", "shadow"},   {"LIVEFUSE_HOT", "5"}, {"LIVEFUSE_CACHE_DIR", "off"},
           {"LIVEFUSE_GRAPHS", "0"}, {"LIVEFUSE_FMA", "0"}, {"LIVEFUSE_LOG", "debug"},
           {"LIVEFUSE_FAST_COMPILE", "0"}, {"LIVEFUSE_JIT", "nvrtc"}};
  c = lf::parse_config(fake_getenv, &warnings);
  CHECK(warnings.empty());
  CHECK(c.mode == lf::Mode::shadow);
  CHECK(c.hot == 5);
  CHECK(c.cache_dir.empty());
  CHECK_FALSE(c.graphs);
  CHECK_FALSE(c.fma);
  CHECK_FALSE(c.fast_compile);
  CHECK_FALSE(c.jit_lto);
  CHECK(c.log == lf::LogLevel::debug);
  CHECK(source_of(c, "LIVEFUSE_HOT") == "env");

  g_env = {{"LIVEFUSE", "sometimes"}, {"LIVEFUSE_HOT", "-3"}, {"LIVEFUSE_MAX_SEGMENT", "12abc"},
           {"LIVEFUSE_FAST_COMPILE", "max"}, {"LIVEFUSE_JIT", "llvm"}};
  warnings.clear();
  c = lf::parse_config(fake_getenv, &warnings);
  REQUIRE(warnings.size() == 5);
  CHECK(c.jit_lto == lf::Config{}.jit_lto);
  CHECK(c.fast_compile == lf::Config{}.fast_compile);
  CHECK(warnings[0].find("LIVEFUSE='sometimes'") != std::string::npos);
  CHECK(warnings[0].find("off, trace, shadow or on") != std::string::npos);
  CHECK(c.mode == lf::Mode::on);
  CHECK(c.hot == lf::Config{}.hot);
  CHECK(c.max_segment == 64);
  CHECK(source_of(c, "LIVEFUSE") == "env (invalid, default used)");
}

TEST_CASE("config: LIVEFUSE_CPU_THREADS limits the CPU kernels' threads") {
  g_env = {};
  std::vector<std::string> warnings;
  CHECK(lf::parse_config(fake_getenv, &warnings).cpu_threads == 0);  // one per core
  g_env = {{"LIVEFUSE_CPU_THREADS", "1"}};
  CHECK(lf::parse_config(fake_getenv, &warnings).cpu_threads == 1);
  g_env = {{"LIVEFUSE_CPU_THREADS", "-1"}};
  CHECK(lf::parse_config(fake_getenv, &warnings).cpu_threads == 0);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("LIVEFUSE_CPU_THREADS") != std::string::npos);
  // The sanitizer run (tools/sanitize.sh) sets it for the whole process.
  if (const int n = lf::config().cpu_threads; n > 0)
    CHECK(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism) ==
          static_cast<size_t>(n));
}

TEST_CASE("config: a reference to the configuration keeps its values when a test switches it") {
  const lf::Config saved = lf::config();
  const lf::Config& before = lf::config();
  lf::Config other = saved;
  other.report_ms = saved.report_ms + 1;
  lf::set_config_for_testing(other);
  CHECK(lf::config().report_ms == saved.report_ms + 1);
  CHECK(before.report_ms == saved.report_ms);
  lf::set_config_for_testing(saved);
  CHECK(lf::config() == saved);
}

// The monitor, planner and report threads read the configuration while tests switch it. Under
// ThreadSanitizer, assigning the one process Config in place was a data race report here (and
// without it a reader could see half of one configuration and half of the other).
TEST_CASE("config: threads reading the configuration while it is switched see whole ones") {
  const lf::Config saved = lf::config();
  lf::Config a = saved, b = saved;
  // Fields nothing reads after start: the running pipeline does not notice the switching.
  a.report_ms = 11;
  b.report_ms = 22;
  b.sources.emplace_back("LIVEFUSE_TEST_SNAPSHOT", "b");
  std::atomic<bool> stop{false};
  std::atomic<int> mixed{0}, seen_a{0}, seen_b{0};
  std::thread reader([&] {
    while (!stop.load()) {
      const lf::Config& c = lf::config();
      const bool b_sources = c.sources.size() == b.sources.size() &&
                             c.sources.back().first == "LIVEFUSE_TEST_SNAPSHOT";
      if (c.report_ms == 11 && !b_sources) ++seen_a;
      else if (c.report_ms == 22 && b_sources) ++seen_b;
      else if (c.report_ms == 11 || c.report_ms == 22) ++mixed;
    }
  });
  for (int i = 0; i < 2000; ++i) lf::set_config_for_testing(i % 2 ? b : a);
  // Both seen: the reader ran while the switching went on.
  while (seen_a.load() == 0 || seen_b.load() == 0) {
    lf::set_config_for_testing(a);
    std::this_thread::yield();
    lf::set_config_for_testing(b);
    std::this_thread::yield();
  }
  stop = true;
  reader.join();
  lf::set_config_for_testing(saved);
  CHECK(mixed.load() == 0);
}
