#include "runtime/exit_hooks.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>
#include <vector>

namespace livefuse::exit_hooks {
namespace {

struct Hooks {
  std::mutex mu;
  std::vector<void (*)()> fns;
};
Hooks& hooks() {
  static Hooks* h = new Hooks;  // leaked: read at exit, after any static might be destroyed
  return *h;
}

void run_all() {
  std::vector<void (*)()> fns;
  {
    std::lock_guard<std::mutex> g(hooks().mu);
    fns.swap(hooks().fns);  // once: a hook that adds another does not run it
  }
  for (auto it = fns.rbegin(); it != fns.rend(); ++it) (*it)();
}

// Destroyed with the main thread's other thread_locals: at exit (or a return from main), before
// the atexit list -- the point of this file. Constructed last among them when armed at load.
struct MainThreadExit {
  bool armed = false;
  ~MainThreadExit() {
    if (armed) run_all();
  }
};
thread_local MainThreadExit t_main_exit;

bool on_main_thread() { return ::syscall(SYS_gettid) == ::getpid(); }

// Loaded on the main thread (linked, or dlopened there): armed before the program's first op.
const bool g_armed_at_load = [] {
  arm_if_main_thread();
  return true;
}();

}  // namespace

void add(void (*fn)()) {
  arm_if_main_thread();
  std::lock_guard<std::mutex> g(hooks().mu);
  hooks().fns.push_back(fn);
}

void arm_if_main_thread() {
  thread_local bool checked = false;
  if (checked) return;
  checked = true;
  if (on_main_thread()) t_main_exit.armed = true;
}

void reset_for_testing() {
  std::lock_guard<std::mutex> g(hooks().mu);
  hooks().fns.clear();
}

}  // namespace livefuse::exit_hooks
