#include <map>
#include <string>

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
