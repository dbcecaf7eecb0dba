#pragma once
// Two kinds of failure (STYLE.md): a user's mistake is a livefuse::Error naming the op,
// the shapes/dtypes given and what was expected; an internal bug is LF_ASSERT, which also
// throws (so a test can see it) but says plainly that it is a livefuse bug.
#include <sstream>
#include <stdexcept>
#include <string>

namespace livefuse {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void assert_fail(const char* cond, const char* file, int line, const std::string& msg);
}  // namespace detail
}  // namespace livefuse

// LF_CHECK(cond, "op", pieces...): user-facing validation.
#define LF_CHECK(cond, op, ...)                                                          \
  do {                                                                                   \
    if (!(cond)) throw ::livefuse::Error(::livefuse::detail::concat("[", op, "] ", __VA_ARGS__)); \
  } while (0)

#define LF_ASSERT(cond, ...)                                                                   \
  do {                                                                                         \
    if (!(cond))                                                                               \
      ::livefuse::detail::assert_fail(#cond, __FILE__, __LINE__, ::livefuse::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
