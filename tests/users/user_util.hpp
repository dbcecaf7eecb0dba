#pragma once
// Helpers for the user programs: plain programs written only against the public headers, the
// way a user writes them (their own buffers, pointers kept from data_ptr(), threads, exits).
// Each runs under LIVEFUSE=on, LIVEFUSE=off and LIVEFUSE_SAMPLE=0 (tests/users/meson.build)
// and fails when a value differs from what eager execution gives, or when fusion was expected
// to engage and did not.
#include <livefuse/inspect.hpp>
#include <livefuse/livefuse.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if USERS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include <execinfo.h>
#include <pthread.h>
#include <unistd.h>

#include <ctime>

#include <csignal>

namespace users {

// USERS_CRASH_STACK=1 (tools/gpu/users.sh sets it): a crash prints the raw stack to stderr --
// addresses with their library and offset -- before the process dies, for the failures that a
// debugger's rerun does not reproduce (an exit with results pending on the GPU, about one run
// in ten in session 11). Test tooling, not a user's habit: off unless asked for.
inline pthread_t g_main_thread;
inline void say(const char* text) { (void)!write(STDERR_FILENO, text, std::strlen(text)); }
// The calling thread's raw stack under `head`, written with write(2) (no stdio, no malloc).
inline void print_stack(const char* head) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  say(head);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
}
// The main thread's stack, printed from its own context when another thread crashed: where the
// program was (running, or in exit's handlers and which) when the crash came.
inline void on_stack_request(int) { print_stack("\n*** main thread's stack at the crash:\n"); }
inline void on_crash(int sig) {
  char head[64];
  const int len = std::snprintf(head, sizeof head, "\n*** signal %d; stack:\n", sig);
  print_stack(len > 0 ? head : "\n*** signal; stack:\n");
  if (!pthread_equal(pthread_self(), g_main_thread)) {
    std::signal(SIGUSR2, on_stack_request);
    pthread_kill(g_main_thread, SIGUSR2);
    const timespec wait{0, 300 * 1000 * 1000};
    nanosleep(&wait, nullptr);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}
inline const bool g_crash_stack = [] {
  g_main_thread = pthread_self();  // static initialisation runs on the main thread
  if (const char* v = std::getenv("USERS_CRASH_STACK"); v && *v == '1')
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT}) std::signal(sig, on_crash);
  return true;
}();

inline int g_failures = 0;

inline void check(bool ok, const std::string& what) {
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

inline bool close(const std::vector<float>& got, const std::vector<float>& want, double tol = 1e-5) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(double(got[i]) - want[i]) <= tol + tol * std::abs(double(want[i])))) return false;
  return true;
}

inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}
// Fusion is expected to defer calls (LIVEFUSE unset or on) and to serve most of them
// (LIVEFUSE_SAMPLE=0: plans are kept without being timed against eager).
inline bool fusion_on() { return env("LIVEFUSE").empty() || env("LIVEFUSE") == "on"; }
inline bool unsampled() { return fusion_on() && env("LIVEFUSE_SAMPLE") == "0"; }

inline lf::Device device() { return lf::default_device(); }

// A buffer the program owns: host memory on the CPU, cudaMalloc'd memory on a GPU. Written
// with write(): on a GPU on the current livefuse stream, so it is ordered after the work the
// program already issued, as a careful program orders its own copies.
class Buffer {
 public:
  explicit Buffer(size_t n) : n_(n) {
#if USERS_HAVE_CUDA
    if (device().is_cuda()) {
      if (cudaMalloc(&p_, n * sizeof(float)) != cudaSuccess) std::abort();
      return;
    }
#endif
    p_ = std::malloc(n * sizeof(float) + 1);
  }
  ~Buffer() {
#if USERS_HAVE_CUDA
    if (device().is_cuda()) {
      cudaDeviceSynchronize();
      cudaFree(p_);
      return;
    }
#endif
    std::free(p_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* ptr() const { return static_cast<float*>(p_); }
  void write(const std::vector<float>& v) const { write_to(p_, v); }
  // Writes through any pointer to memory of this program's device (one from data_ptr()).
  static void write_to(void* p, const std::vector<float>& v) {
#if USERS_HAVE_CUDA
    if (device().is_cuda()) {
      auto st = static_cast<cudaStream_t>(lf::Stream::current().handle());
      cudaMemcpyAsync(p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice, st);
      cudaStreamSynchronize(st);
      return;
    }
#endif
    std::memcpy(p, v.data(), v.size() * sizeof(float));
  }
  lf::Tensor wrap(const lf::Shape& s) const { return lf::Tensor::wrap(p_, s, lf::DType::f32, device()); }

 private:
  size_t n_;
  void* p_ = nullptr;
};

inline std::vector<float> values(size_t n, int seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * float(i) + 1.3f * float(seed)) * 0.8f;
  return v;
}

inline uint64_t counter(const char* name) {
  return lf::inspect().counter("matcher", name).value_or(0);
}

// Checks that fusion engaged as the mode promises: calls deferred into plan windows with fusion
// on, most calls served by plans when unsampled, nothing deferred with LIVEFUSE=off.
struct Engagement {
  uint64_t calls0 = counter("calls"), deferred0 = counter("deferred"), served0 = counter("served");
  // Counts from now: a Loop restarts it when its warm-up ends, so the share served is of the
  // calls made once plans could serve (a loaded machine plans later, not less).
  void restart() { *this = Engagement(); }
  void expect(const std::string& what, double min_served = 0.5) const {
    const double calls = double(counter("calls") - calls0);
    const double deferred = double(counter("deferred") - deferred0);
    const double served = double(counter("served") - served0);
    std::printf("%-40s calls %6.0f  deferred %5.1f%%  served %5.1f%%\n", what.c_str(), calls,
                calls ? 100 * deferred / calls : 0, calls ? 100 * served / calls : 0);
    if (!fusion_on()) {
      check(deferred == 0, what + ": calls deferred with fusion off");
      return;
    }
    // Sampled (the default), a plan may lose against eager and be rejected: then nothing of
    // that structure is deferred again, so only the whole program is held to engaging
    // (finish()). Unsampled, every pattern must be served.
    if (unsampled()) {
      check(deferred > 0.3 * calls, what + ": fusion never engaged (too few calls deferred)");
      check(served > min_served * calls, what + ": plans served too few calls");
    }
  }
};

// A loop's condition: with fusion on, first a warm-up (the planner works in the background at
// the machine's pace; at most 20 s), then `iters` more; with fusion off, `iters`.
//   any_served      warm once a plan served a call.
//   all_served      unsampled (LIVEFUSE_SAMPLE=0), warm once 9 in 10 calls of the last `period`
//                   iterations were served and the planner holds no candidate (queued or
//                   compiling): a loop whose windows are planned one after another (one still
//                   compiling while another serves) would otherwise be held to a share served
//                   that depends on the compiler's speed. `period` is the loop's own: a loop
//                   whose steps differ every 8th, in sequences of 40, is warm only once a whole
//                   sequence was served (checked over 8 iterations, one kind of its steps could
//                   be served while another's plan still compiled: 37% served on the H200 once).
//                   Not all: a loop may have a step no plan serves (a sequence's first).
//                   Sampled, a plan may be rejected and never serve again: warm once a plan
//                   served a call then (any_served), so the loop runs with plans in play.
enum class WarmUp { any_served, all_served };

// Plans the planner has not published yet: hot candidates queued, or being compiled.
inline bool planner_busy() {
  for (const lf::PlanInfo& p : lf::inspect().plans)
    if (p.state == "candidate" || p.state == "compiling") return true;
  return false;
}

class Loop {
 public:
  explicit Loop(int iters, Engagement* e = nullptr, WarmUp w = WarmUp::any_served, int period = 8)
      : iters_(iters), period_(period), warm_up_(w), served0_(counter("served")), calls0_(counter("calls")),
        engagement_(e) {}
  bool more(int it) {
    if (warm_at_ < 0) {
      const bool waited_enough = std::chrono::steady_clock::now() - t0_ > std::chrono::seconds(20);
      bool warm = false;
      if (it % period_ == 0) {
        const uint64_t served = counter("served"), calls = counter("calls");
        if (warm_up_ == WarmUp::any_served || !unsampled()) {
          warm = served > served0_;
        } else {
          warm = calls > calls0_ && 10 * (served - served0_) >= 9 * (calls - calls0_) && !planner_busy();
          served0_ = served, calls0_ = calls;
        }
      }
      if (!fusion_on() || waited_enough || warm) {
        warm_at_ = it;
        if (engagement_) engagement_->restart();
      } else {
        return true;
      }
    }
    return it < warm_at_ + iters_;
  }

 private:
  int iters_, period_, warm_at_ = -1;
  WarmUp warm_up_;
  uint64_t served0_, calls0_;
  Engagement* engagement_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

inline int finish(const char* program) {
  if (fusion_on())
    check(counter("deferred") > 0 && counter("completions") > 0,
          "fusion never engaged in the whole program (no window deferred and completed)");
  for (const lf::PlanInfo& p : lf::inspect().plans)
    std::printf("  plan %llu %s (%zu ops): %s\n", (unsigned long long)p.id, p.state.c_str(),
                p.ops.size(), p.last_reason.c_str());
  if (g_failures) {
    std::printf("%s: %d checks failed\n", program, g_failures);
    return 1;
  }
  std::printf("%s: all checks passed\n", program);
  return 0;
}

}  // namespace users
