// LIVEFUSE_REPORT / LIVEFUSE_TRACE: the report thread, the atomic report write, and the clean
// stop at exit.
//
// [ Note -- shutdown ]
//   The services are started lazily (first op) and registered with std::atexit then. atexit
//   handlers run before the destructors of statics constructed earlier, and this one joins
//   the report thread and writes the final report and the trace while the runtime's state is
//   still alive (the PlanTable, counters and registry are leaked, so even later readers are
//   safe). All state here is leaked too: a joinable std::thread destroyed during static
//   destruction would call std::terminate. After exit has begun, start does nothing.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

#include "livefuse/config.hpp"
#include "livefuse/error.hpp"
#include "livefuse/inspect.hpp"
#include "runtime/inspect_registry.hpp"

namespace livefuse {

namespace {

struct Services {
  std::mutex mu;  // guards everything below except the atomics
  std::condition_variable cv;
  std::thread thread;
  enum class State { idle, running, stopping } state = State::idle;
  bool stop = false;     // asks the report thread to end
  bool exiting = false;  // exit has begun: never start again
  bool atexit_registered = false;
  std::string report_path, trace_path;
  int report_ms = 1000;
  std::atomic<uint64_t> writes{0}, write_errors{0};
  bool warned = false;
};

Services& services() {
  static Services* s = new Services;  // leaked: see the note above
  return *s;
}

std::atomic<bool> g_started{false};

void warn_once(Services& sv, const std::string& what) {
  sv.write_errors.fetch_add(1);
  if (sv.warned) return;
  sv.warned = true;
  std::cerr << "livefuse: " << what << " (further report errors are only counted)\n";
}

void write_periodic(Services& sv, bool final) {
  try {
    write_report(sv.report_path, final);
    sv.writes.fetch_add(1);
  } catch (const std::exception& e) {
    warn_once(sv, e.what());
  }
}

void report_loop() {
  Services& sv = services();
  trace::set_thread_name("livefuse-report");
  pthread_setname_np(pthread_self(), "lf-report");
  std::unique_lock<std::mutex> lk(sv.mu);
  while (!sv.stop) {
    lk.unlock();
    write_periodic(sv, false);
    lk.lock();
    sv.cv.wait_for(lk, std::chrono::milliseconds(sv.report_ms), [&] { return sv.stop; });
  }
}

void at_exit() {
  {
    std::lock_guard<std::mutex> g(services().mu);
    services().exiting = true;
  }
  stop_background_services();
}

}  // namespace

void write_report(const std::string& path, bool final) {
  trace::Scope scope("inspect", "write_report");
  Snapshot s = inspect();
  s.final = final;
  const std::string text = snapshot_to_json(s);
  // Same folder as the target: rename is atomic only within one filesystem.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) throw Error("[report] cannot write '" + tmp + "': " + std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error("[report] cannot write '" + path + "': " + why);
  }
}

void start_background_services() {
  if (g_started.load(std::memory_order_relaxed)) return;
  Services& sv = services();
  std::lock_guard<std::mutex> g(sv.mu);
  if (sv.state != Services::State::idle || sv.exiting) return;
  const Config& c = config();
  sv.report_path = c.report_path;
  sv.trace_path = c.trace_path;
  sv.report_ms = c.report_ms;
  sv.stop = false;
  register_counter_source("report", [](CounterSink& s) {
    s.add("writes", services().writes.load());
    s.add("write_errors", services().write_errors.load());
  });
  if (!sv.trace_path.empty()) trace::detail::g_enabled.store(true);
  if (!sv.report_path.empty()) sv.thread = std::thread(report_loop);
  if (!sv.atexit_registered) {
    sv.atexit_registered = true;
    std::atexit(at_exit);
  }
  sv.state = Services::State::running;
  // Last: another thread's fast path must not see "started" before the thread exists.
  g_started.store(true, std::memory_order_release);
}

void stop_background_services() {
  Services& sv = services();
  std::thread t;
  {
    std::lock_guard<std::mutex> g(sv.mu);
    if (sv.state != Services::State::running) return;
    sv.state = Services::State::stopping;
    sv.stop = true;
    t = std::move(sv.thread);
  }
  sv.cv.notify_all();
  if (t.joinable()) t.join();
  if (!sv.report_path.empty()) write_periodic(sv, true);
  if (!sv.trace_path.empty()) {
    trace::detail::g_enabled.store(false);
    try {
      write_trace(sv.trace_path);
    } catch (const std::exception& e) {
      warn_once(sv, e.what());
    }
  }
  std::lock_guard<std::mutex> g(sv.mu);
  sv.state = Services::State::idle;
  // After exit has begun the fast path stays "started": ops still running on other threads
  // must not take the mutex on every call only to learn that nothing may start.
  if (!sv.exiting) g_started.store(false);
}

}  // namespace livefuse
