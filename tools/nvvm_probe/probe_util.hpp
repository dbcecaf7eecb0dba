#pragma once
// What both probes need: a file's text, milliseconds since a time point, what a compiler hands
// back -- a log or a result (NVRTC, libNVVM and nvJitLink all give a size, then the bytes).
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

namespace probe {
using clk = std::chrono::steady_clock;
inline double ms_since(clk::time_point a) { return std::chrono::duration<double, std::milli>(clk::now() - a).count(); }
inline std::string read(const char* f) {
  std::ifstream in(f);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
template <class H, class SizeFn, class GetFn>
std::string fetch(H h, SizeFn size, GetFn get) {
  size_t n = 0;
  size(h, &n);
  std::string l(n, 0);
  get(h, l.data());
  return l;
}
}  // namespace probe
