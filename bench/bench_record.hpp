#pragma once
// The record every livefuse benchmark prints and writes with --json PATH: a JSON list of
// {"name", "variant", "size", "median_us", <derived figures>, <string tags>}.
#include <algorithm>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "livefuse/error.hpp"

namespace lfbench {

struct Record {
  std::string name, variant, size;
  double median_us = 0;
  std::vector<std::pair<std::string, double>> derived;
  std::vector<std::pair<std::string, std::string>> tags = {};  // (initialiser: records may leave it out)
};

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

inline std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

inline void write_json(const std::string& path, const std::vector<Record>& recs) {
  std::ofstream f(path);
  if (!f) throw livefuse::Error("[bench] cannot write " + path);
  f << "[\n";
  for (size_t i = 0; i < recs.size(); ++i) {
    const Record& r = recs[i];
    f << "  {\"name\": \"" << json_escape(r.name) << "\", \"variant\": \"" << json_escape(r.variant)
      << "\", \"size\": \"" << json_escape(r.size) << "\", \"median_us\": " << r.median_us;
    for (const auto& [k, v] : r.derived) f << ", \"" << k << "\": " << v;
    for (const auto& [k, v] : r.tags) f << ", \"" << k << "\": \"" << json_escape(v) << "\"";
    f << "}" << (i + 1 < recs.size() ? "," : "") << "\n";
  }
  f << "]\n";
}

}  // namespace lfbench
