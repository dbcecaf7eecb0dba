#pragma once
// Small text helpers shared by the views.
#include <cstdarg>
#include <cstdio>
#include <optional>
#include <string>

namespace lfinspect {

inline std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string strf(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < static_cast<int>(sizeof buf)) return std::string(buf, n < 0 ? 0 : n);
  std::string big(static_cast<size_t>(n) + 1, '\0');
  va_start(ap, fmt);
  std::vsnprintf(big.data(), big.size(), fmt, ap);
  va_end(ap);
  big.resize(static_cast<size_t>(n));
  return big;
}

// "12.34" or "-" when unknown.
inline std::string num(const std::optional<double>& v, const char* fmt = "%.2f") {
  return v ? strf(fmt, *v) : "-";
}

// Seconds since process start, as "+12.345s".
inline std::string at(double t_ms) { return strf("+%.3fs", t_ms / 1000.0); }

inline std::string bytes(uint64_t b) {
  if (b < 1024) return strf("%lluB", static_cast<unsigned long long>(b));
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) v /= 1024, ++u;
  return strf("%.1f%s", v, units[u]);
}

// Cuts `s` to one line of at most `width` characters (a reason or a name in a table cell).
inline std::string one_line(const std::string& s, size_t width) {
  std::string r = s.substr(0, s.find('\n'));
  if (r.size() > width) r = r.substr(0, width - 3) + "...";
  return r;
}

}  // namespace lfinspect
