// livefuse-inspect: reads a livefuse report (LIVEFUSE_REPORT=path) and shows what the runtime
// decided: a table of plans and counters, one plan in full, or the snapshot as JSON.
//
// Exit status: 0 shown; 1 the report is missing, partial, corrupt or of a newer schema;
// 2 bad arguments; 3 --plan names no plan in the report.
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "livefuse/error.hpp"
#include "tools/inspect/format.hpp"
#include "tools/inspect/render.hpp"

namespace {

using lfinspect::strf;

constexpr const char* kUsage =
    "usage: livefuse-inspect [options] REPORT\n"
    "  REPORT           the file a program writes with LIVEFUSE_REPORT=REPORT\n"
    "  (no option)      plans and counters as tables\n"
    "  --plan ID        one plan in full: ops, groups, generated source, timings, history\n"
    "  --json           the snapshot as JSON (validated; top-level \"plans\", each with "
    "\"state\")\n"
    "  --watch          refresh in place until interrupted (Ctrl-C)\n"
    "  --interval MS    refresh period of --watch (default 500)\n"
    "  --count N        stop --watch after N refreshes\n"
    "  --decisions N    recent decisions to list (default 8; 0 hides them)\n"
    "  --config         list every configuration variable, not only those set\n";

struct Args {
  std::string path;
  std::optional<uint64_t> plan;
  bool json = false, watch = false, all_config = false;
  int interval_ms = 500, count = -1, decisions = 8;
};

struct Usage {
  std::string msg;
};

long to_long(const std::string& opt, const std::string& v, long lo) {
  size_t pos = 0;
  long r = 0;
  try {
    r = std::stol(v, &pos);
  } catch (...) {
    pos = 0;
  }
  if (pos != v.size() || v.empty() || r < lo)
    throw Usage{strf("%s expects an integer >= %ld, got '%s'", opt.c_str(), lo, v.c_str())};
  return r;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Usage{s + " needs a value"};
      return argv[++i];
    };
    if (s == "--plan")
      a.plan = static_cast<uint64_t>(to_long(s, value(), 0));
    else if (s == "--json")
      a.json = true;
    else if (s == "--watch")
      a.watch = true;
    else if (s == "--config")
      a.all_config = true;
    else if (s == "--interval")
      a.interval_ms = static_cast<int>(to_long(s, value(), 10));
    else if (s == "--count")
      a.count = static_cast<int>(to_long(s, value(), 1));
    else if (s == "--decisions")
      a.decisions = static_cast<int>(to_long(s, value(), 0));
    else if (!s.empty() && s[0] == '-')
      throw Usage{"unknown option '" + s + "'"};
    else if (a.path.empty())
      a.path = s;
    else
      throw Usage{"more than one REPORT given ('" + a.path + "', '" + s + "')"};
  }
  if (a.path.empty()) throw Usage{"no REPORT given"};
  if (a.json && a.plan) throw Usage{"--json and --plan cannot be combined"};
  return a;
}

// Reads and validates the report; throws livefuse::Error with a message for the user.
livefuse::Snapshot load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT)
      throw livefuse::Error("no report at '" + path + "' (run the program with LIVEFUSE_REPORT=" +
                            path + "; it is written after the first op)");
    throw livefuse::Error("cannot read '" + path + "': " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) throw livefuse::Error("'" + path + "' is a directory, not a report");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw livefuse::Error("cannot read '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << f.rdbuf();
  try {
    return livefuse::snapshot_from_json(text.str());
  } catch (const livefuse::Error& e) {
    std::string m = e.what();
    if (m.rfind("[inspect] ", 0) == 0) m = m.substr(10);
    throw livefuse::Error("'" + path + "': " + m);
  }
}

// What one refresh shows. Returns the exit status it would have.
int view(const Args& a, std::string* out) {
  livefuse::Snapshot s;
  try {
    s = load(a.path);
  } catch (const livefuse::Error& e) {
    *out = std::string("livefuse-inspect: ") + e.what() + "\n";
    return 1;
  }
  if (a.json) {
    *out = livefuse::snapshot_to_json(s);
    return 0;
  }
  if (a.plan) {
    const livefuse::PlanInfo* p = s.find_plan(*a.plan);
    if (!p) {
      std::string ids;
      for (const auto& q : s.plans) ids += (ids.empty() ? "" : ", ") + std::to_string(q.id);
      *out = strf("livefuse-inspect: no plan %llu in '%s' (plans: %s)\n",
                  static_cast<unsigned long long>(*a.plan), a.path.c_str(),
                  ids.empty() ? "none" : ids.c_str());
      return 3;
    }
    *out = lfinspect::render_plan(s, *p);
    return 0;
  }
  *out = lfinspect::render_summary(s, {a.decisions, a.all_config});
  return 0;
}

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted.store(true); }

std::string file_age(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  const double age = static_cast<double>(std::time(nullptr) - st.st_mtime);
  return strf(", written %.0f s ago", age < 0 ? 0 : age);
}

// Refreshes in place. A report that cannot be read (not written yet, being replaced, the
// program restarting) shows the reason and the watch goes on; the exit status is that of the
// last refresh.
int watch(const Args& a) {
  std::signal(SIGINT, on_sigint);
  std::signal(SIGTERM, on_sigint);
  int rc = 0;
  for (int n = 0; a.count < 0 || n < a.count; ++n) {
    std::string body;
    rc = view(a, &body);
    const std::string top = strf("livefuse-inspect --watch %s: every %d ms, Ctrl-C to stop%s\n\n",
                                 a.path.c_str(), a.interval_ms, file_age(a.path).c_str());
    // Home + clear, then the whole frame in one write: no flicker of a half-drawn table.
    std::cout << "\x1b[H\x1b[2J" << top << body << std::flush;
    if (a.count >= 0 && n + 1 >= a.count) break;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(a.interval_ms);
    while (!g_interrupted.load() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (g_interrupted.load()) {
      std::cout << "\n";
      return 0;
    }
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    for (int i = 1; i < argc; ++i)
      if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help"))
        return std::cout << kUsage, 0;
    a = parse_args(argc, argv);
  } catch (const Usage& u) {
    std::cerr << "livefuse-inspect: " << u.msg << "\n" << kUsage;
    return 2;
  }
  if (a.watch) return watch(a);
  std::string out;
  const int rc = view(a, &out);
  (rc == 0 ? std::cout : std::cerr) << out;
  return rc;
}
