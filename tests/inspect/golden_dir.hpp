#pragma once
// Where tests/inspect/golden is, for the suite binary (built by tests/meson.build, which
// passes no per-suite settings). Compilers see sources by the path meson gives, relative to
// the build root; the binary is <build root>/tests/test_inspect.
#include <unistd.h>

#include <filesystem>
#include <string>

namespace lftest {
inline std::string golden_dir() {
  std::filesystem::path src(__FILE__);
  if (src.is_relative()) {
    char exe[4096];
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0)
      src = std::filesystem::path(std::string(exe, static_cast<size_t>(n)))
                .parent_path()
                .parent_path() /
            src;
  }
  return (src.parent_path() / "golden").lexically_normal().string();
}
}  // namespace lftest
