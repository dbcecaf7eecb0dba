// [ Note -- configuration table ]
// Every LIVEFUSE_* variable is read here, once. Each row: name, how to parse it, where it goes.
// A bad value is reported once on stderr (naming the variable and the accepted values) and the
// default stays in force; Config::sources records which values came from the environment.
#include "livefuse/config.hpp"

#include <tbb/global_control.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <mutex>

#include "livefuse/error.hpp"

namespace livefuse {

std::string_view mode_name(Mode m) {
  switch (m) {
    case Mode::off:
      return "off";
    case Mode::trace:
      return "trace";
    case Mode::shadow:
      return "shadow";
    case Mode::on:
      return "on";
  }
  return "?";
}

namespace {

std::string default_cache_dir(const char* (*getenv_fn)(const char*)) {
  if (const char* x = getenv_fn("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/livefuse";
  if (const char* h = getenv_fn("HOME"); h && *h) return std::string(h) + "/.cache/livefuse";
  return "";
}

bool parse_int(const std::string& s, int lo, int hi, int* out) {
  try {
    size_t pos = 0;
    const long v = std::stol(s, &pos);
    if (pos != s.size() || v < lo || v > hi) return false;
    *out = static_cast<int>(v);
    return true;
  } catch (...) {
    return false;
  }
}

bool parse_bool01(const std::string& s, bool* out) {
  if (s == "0" || s == "false" || s == "off") return *out = false, true;
  if (s == "1" || s == "true" || s == "on") return *out = true, true;
  return false;
}

struct Row {
  const char* name;
  const char* accepted;
  std::function<bool(const std::string&, Config&)> apply;
};

std::vector<Row> rows(const char* (*getenv_fn)(const char*)) {
  auto int_row = [](const char* name, const char* acc, int lo, int hi, int Config::*field) {
    return Row{name, acc,
               [=](const std::string& s, Config& c) { return parse_int(s, lo, hi, &(c.*field)); }};
  };
  auto bool_row = [](const char* name, bool Config::*field) {
    return Row{name, "0 or 1",
               [=](const std::string& s, Config& c) { return parse_bool01(s, &(c.*field)); }};
  };
  (void)getenv_fn;
  return {
      {"LIVEFUSE", "off, trace, shadow or on",
       [](const std::string& s, Config& c) {
         if (s == "off" || s == "0") return c.mode = Mode::off, true;
         if (s == "trace") return c.mode = Mode::trace, true;
         if (s == "shadow") return c.mode = Mode::shadow, true;
         if (s == "on" || s == "1") return c.mode = Mode::on, true;
         return false;
       }},
      int_row("LIVEFUSE_HOT", "an integer 2..1000000", 2, 1000000, &Config::hot),
      int_row("LIVEFUSE_MAX_SEGMENT", "an integer 2..1024", 2, 1024, &Config::max_segment),
      bool_row("LIVEFUSE_GRAPHS", &Config::graphs),
      bool_row("LIVEFUSE_FUSION", &Config::fusion),
      int_row("LIVEFUSE_COMPILE_THREADS", "an integer 1..64", 1, 64, &Config::compile_threads),
      int_row("LIVEFUSE_CPU_THREADS", "an integer 0..4096 (0: one per core)", 0, 4096,
              &Config::cpu_threads),
      {"LIVEFUSE_CACHE_DIR", "a directory path or off",
       [](const std::string& s, Config& c) {
         c.cache_dir = (s == "off") ? std::string() : s;
         return !s.empty();
       }},
      int_row("LIVEFUSE_VERIFY", "an integer 0..1000000", 0, 1000000, &Config::verify),
      int_row("LIVEFUSE_SAMPLE", "an integer 0..1000", 0, 1000, &Config::sample),
      {"LIVEFUSE_REPORT", "a file path",
       [](const std::string& s, Config& c) { return c.report_path = s, !s.empty(); }},
      int_row("LIVEFUSE_REPORT_MS", "an integer 10..3600000", 10, 3600000, &Config::report_ms),
      {"LIVEFUSE_TRACE", "a file path",
       [](const std::string& s, Config& c) { return c.trace_path = s, !s.empty(); }},
      {"LIVEFUSE_LOG", "error, warn, info or debug",
       [](const std::string& s, Config& c) {
         if (s == "error") return c.log = LogLevel::error, true;
         if (s == "warn") return c.log = LogLevel::warn, true;
         if (s == "info") return c.log = LogLevel::info, true;
         if (s == "debug") return c.log = LogLevel::debug, true;
         return false;
       }},
      bool_row("LIVEFUSE_FMA", &Config::fma),
      bool_row("LIVEFUSE_FAST_COMPILE", &Config::fast_compile),
      {"LIVEFUSE_JIT", "nvrtc or lto",
       [](const std::string& s, Config& c) {
         if (s != "nvrtc" && s != "lto") return false;
         return c.jit_lto = s == "lto", true;
       }},
      bool_row("LIVEFUSE_CUDA_CACHE", &Config::cuda_cache),
      int_row("LIVEFUSE_CACHE_MAX_MB", "an integer 0..1048576", 0, 1048576, &Config::cache_max_mb),
      bool_row("LIVEFUSE_PROFILE", &Config::profile),
      {"LIVEFUSE_ATTENTION", "auto, 0 or 1",
       [](const std::string& s, Config& c) {
         if (s == "auto") return c.attention = -1, true;
         if (s == "0" || s == "1") return c.attention = s == "1", true;
         return false;
       }},
      bool_row("LIVEFUSE_GEMM_SIBLINGS", &Config::gemm_siblings),
      bool_row("LIVEFUSE_ROTARY", &Config::rotary),
      bool_row("LIVEFUSE_SEAM", &Config::seam),
      bool_row("LIVEFUSE_SETTLE", &Config::settle),
      bool_row("LIVEFUSE_PACK_CACHE", &Config::pack_cache),
      bool_row("LIVEFUSE_FAMILY_GRAPH", &Config::family_graph),
      bool_row("LIVEFUSE_FAMILY_RECORD", &Config::family_record),
      bool_row("LIVEFUSE_WRITE_BATCH", &Config::write_batch),
      bool_row("LIVEFUSE_APPEND", &Config::append),
      bool_row("LIVEFUSE_INFER_MEMO", &Config::infer_memo),
      bool_row("LIVEFUSE_GEMV", &Config::gemv),
      bool_row("LIVEFUSE_GEMM_TC", &Config::gemm_tc),
      bool_row("LIVEFUSE_GEMM_F32X3", &Config::gemm_f32x3),
      int_row("LIVEFUSE_GEMV_NORM", "0, 1 or 2", 0, 2, &Config::gemv_norm),
      int_row("LIVEFUSE_GEMV_PAIR", "0, 1 or 2", 0, 2, &Config::gemv_pair),
      bool_row("LIVEFUSE_GEMV_ROTARY", &Config::gemv_rotary),
      bool_row("LIVEFUSE_GEMM_TUNE", &Config::gemm_tune),
      bool_row("LIVEFUSE_ATTENTION_SPLIT", &Config::attention_split),
      bool_row("LIVEFUSE_DECODE_LEAN", &Config::decode_lean),
      bool_row("LIVEFUSE_ATTENTION_APPEND", &Config::attention_append),
      bool_row("LIVEFUSE_DECODE_TC", &Config::decode_tc),
      int_row("LIVEFUSE_DECODE_STREAM_KEYS", "an integer 0..1000000000 (0: never)", 0, 1000000000,
              &Config::decode_stream_keys),
      bool_row("LIVEFUSE_SPLIT_K_ROWS", &Config::split_k_rows),
      bool_row("LIVEFUSE_ROW_EARLY_LOADS", &Config::row_early_loads),
      bool_row("LIVEFUSE_PDL", &Config::pdl),
      bool_row("LIVEFUSE_EARLY_READS", &Config::early_reads),
      {"LIVEFUSE_DEVICE", "cpu or cuda",
       [](const std::string& s, Config& c) {
         if (s != "cpu" && s != "cuda") return false;
         return c.device = s, true;
       }},
  };
}

}  // namespace

Config parse_config(const char* (*getenv_fn)(const char*), std::vector<std::string>* warnings) {
  Config c;
  c.cache_dir = default_cache_dir(getenv_fn);
  // Why 2 compile threads by default: compilation must never starve the user's own threads;
  // NVRTC jobs are short (~50 ms) and few per model.
  for (const Row& r : rows(getenv_fn)) {
    const char* v = getenv_fn(r.name);
    if (!v) {
      c.sources.emplace_back(r.name, "default");
      continue;
    }
    Config trial = c;
    if (r.apply(v, trial)) {
      c = std::move(trial);
      c.sources.emplace_back(r.name, "env");
    } else {
      c.sources.emplace_back(r.name, "env (invalid, default used)");
      if (warnings)
        warnings->push_back(detail::concat("[config] ", r.name, "='", v,
                                           "' is not valid (expected ", r.accepted,
                                           "); using the default"));
    }
  }
  return c;
}

namespace {
const char* real_getenv(const char* n) { return std::getenv(n); }

// The CPU kernels' parallelism, for the life of the process (LIVEFUSE_CPU_THREADS).
void limit_cpu_threads(int n) {
  if (n <= 0) return;
  // Leaked: TBB work may still run during static destruction.
  static tbb::global_control* limit =
      new tbb::global_control(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(n));
  (void)limit;
}

// [ Note -- configuration snapshots ]
// config() is read on every op and from the monitor, planner and report threads, while tests
// switch it (set_config_for_testing). Each configuration is an immutable snapshot published
// through one atomic pointer: a reader pays one load and keeps a consistent Config for as long
// as it holds the reference. Snapshots are never freed (a reader may hold one for ever); an
// equal configuration published again reuses its snapshot, so tests that flip between a few
// configurations keep a few.
std::atomic<const Config*>& current() {
  // A function-local static rather than std::call_once: libstdc++'s call_once goes through
  // thread-locals and a call each time.
  // Leaked on purpose: the monitor and compile threads may read it during static destruction.
  static std::atomic<const Config*> c{[] {
    std::vector<std::string> warnings;
    auto* parsed = new Config(parse_config(real_getenv, &warnings));
    for (const auto& w : warnings) std::cerr << "livefuse: " << w << "\n";
    limit_cpu_threads(parsed->cpu_threads);
    return parsed;
  }()};
  return c;
}
}  // namespace

const Config& config() { return *current().load(std::memory_order_acquire); }

void set_config_for_testing(const Config& c) {
  static std::mutex mu;
  static auto* published = new std::vector<const Config*>;  // leaked with the snapshots
  std::lock_guard<std::mutex> g(mu);
  const Config* now = current().load(std::memory_order_relaxed);
  if (*now == c) return;
  if (published->empty()) published->push_back(now);
  for (const Config* p : *published)
    if (*p == c) return current().store(p, std::memory_order_release);
  published->push_back(new Config(c));
  current().store(published->back(), std::memory_order_release);
}

}  // namespace livefuse
