// livefuse-bench-replacement: what transparent replacement buys, end to end.
//   chain10_call        a 10-op pointwise chain on a small tensor, wall time per call (the chain
//                       followed by a synchronize), LIVEFUSE=off vs on in steady state
//   time_to_fused       from the first call of a new loop until >= 90% of the last 20 calls were
//                       served by plans; p99 call latency while compiling vs eager steady state
//                       (`issue_us`: the calls alone; `sync_us`: the rest -- plan launch, GPU
//                       time and the round trip of the synchronize)
//   chain10_pipelined   the same chain called 200 times back to back, one synchronize at the
//                       end: per-call time of a serving loop where host and device overlap
//                       (steady state: after a warm-up in that loop)
//   deferred_host      host time per deferred call of a served window (ops 2..10 of the chain,
//                       no kernel inside the span): the deferred path alone
//   launch_sync_floor   one eager op + synchronize: the round trip no per-call figure beats
//   matcher_overhead    host time per eager op with no plan installed: mode on (monitor +
//                       matcher) minus mode off
//   graph_binding       (CUDA) replaying a plan's graph on a new binding, four ways
//                       (bench/graph_binding.cpp)
// Usage: livefuse-bench-replacement [--device cpu|cuda] [--json PATH] [--size N]
//        [--deferred-only WINDOWS]   only deferred_host over WINDOWS served windows (profiling)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>
#if defined(__linux__)
#include <sys/resource.h>
#endif

#include "bench/bench_record.hpp"
#include "bench/graph_binding.hpp"
#include "livefuse/inspect.hpp"
#include "livefuse/livefuse.hpp"
#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "runtime/plan.hpp"

#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;
namespace lf = livefuse;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}
double pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

using lfbench::Record;

// A constant of the chain that differs per process by less than 1e-6: the fused kernel's source
// differs too, so `time_to_fused` always includes a real NVRTC compile, never a disk-cache hit
// left by an earlier run.
double g_salt = 0.0;

// Ops 2..10 of the chain (op 1 is `lf::mul(x, 1.5)`).
lf::Tensor chain10_rest(lf::Tensor y, const lf::Tensor& x) {
  y = lf::add(y, 0.25 + g_salt);
  y = lf::tanh(y);
  y = lf::mul(y, x);
  y = lf::sigmoid(y);
  y = lf::add(y, x);
  y = lf::gelu(y);
  y = lf::mul(y, 0.5);
  y = lf::sub(y, x);
  return lf::relu(y);
}

lf::Tensor chain10(const lf::Tensor& x) { return chain10_rest(lf::mul(x, 1.5), x); }

void set_mode(lf::Mode m) {
  lf::Config c = lf::config();
  c.mode = m;
  lf::set_config_for_testing(c);
}

void reset_pipeline(lf::Device dev) {
  lf::synchronize(dev);
  lf::monitor::Monitor::instance().reset();
  lf::planner::wait_service_idle();
  lf::planner::reset_service_for_testing();
  lf::PlanTable::get().clear_for_testing();
}

struct Timed {
  std::vector<double> total, issue;  // per call: chain + synchronize; the chain's calls alone
};

Timed timed_calls(const lf::Tensor& x, lf::Device dev, int n) {
  Timed t;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    {
      lf::Tensor y = chain10(x);
      t.issue.push_back(us_since(t0));
    }
    lf::synchronize(dev);
    t.total.push_back(us_since(t0));
  }
  return t;
}

// Per-call time of `reps` batches of 200 back-to-back chains, one synchronize per batch. The
// loop without syncs is a new phase for the monitor (no barrier marks the chain's start, so the
// unit it finds may be a rotation of the chain): warm up until planning has settled.
double pipelined_us(const lf::Tensor& x, lf::Device dev, int reps = 20) {
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 2000; ++i) (void)chain10(x);
    lf::synchronize(dev);
    lf::monitor::Monitor::instance().drain();
    lf::planner::wait_service_idle();
  }
  std::vector<double> per;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < 200; ++i) (void)chain10(x);
    lf::synchronize(dev);
    per.push_back(us_since(t0) / 200.0);
  }
  return pct(per, 0.5);
}

// The installed plans, a line each: what served the loop just measured.
void print_plans() {
  for (const lf::PlanInfo& p : lf::inspect().plans)
    std::printf("  plan %llu %-9s %zu ops, %llu hits: %s (%s)\n", static_cast<unsigned long long>(p.id),
                p.state.c_str(), p.ops.size(), static_cast<unsigned long long>(p.hits),
                p.name.substr(0, 60).c_str(), p.last_reason.c_str());
}

// Host time per deferred call of a served window: ops 2..10 of a chain whose plan serves it
// (op 1 opens the window; the plan runs at the synchronize, outside the timed span). No kernel
// runs inside the span on any device, so this is the deferred path alone. Windows that were not
// served whole (a flush) are left out; `served_fraction` says how many were. On Linux, spans
// in which the thread was switched out are left out too: on a loaded machine (the monitor and
// planner threads share the cores) they measure the scheduler, not the path.
int64_t context_switches() {
#if defined(__linux__)
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_nvcsw + u.ru_nivcsw;
#else
  return 0;
#endif
}
struct DeferredHost {
  double us_per_call = 0, p10_us = 0, served_fraction = 0;
  double window_us = 0;  // a whole served chain: its 10 calls, the plan's run and the sync
};
DeferredHost deferred_host(const lf::Tensor& x, lf::Device dev, int n) {
  std::vector<double> per, whole;
  for (int i = 0; i < n; ++i) {
    const uint64_t s0 = lf::matcher_counters().served;
    const int64_t cs0 = context_switches();
    const auto w0 = Clock::now();
    lf::Tensor first = lf::mul(x, 1.5);
    const auto t0 = Clock::now();
    lf::Tensor y = chain10_rest(std::move(first), x);
    const double us = us_since(t0);
    lf::synchronize(dev);  // y is held: the program uses the chain's result
    const double window = us_since(w0);
    const bool switched = context_switches() != cs0;
    if (lf::matcher_counters().served - s0 == 10 && !switched) {
      per.push_back(us / 9.0);
      whole.push_back(window);
    }
  }
  if (per.empty()) return {-1.0, -1.0, 0.0, -1.0};
  return {pct(per, 0.5), pct(per, 0.1), static_cast<double>(per.size()) / n, pct(whole, 0.5)};
}

Record call_record(const char* variant, const std::string& sz, const Timed& t) {
  const double med = pct(t.total, 0.5), issue = pct(t.issue, 0.5);
  return {"chain10_call", variant, sz, med,
          {{"p99_us", pct(t.total, 0.99)}, {"issue_us", issue}, {"sync_us", med - issue}}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, device_arg;
  int64_t size = 4096;
  int perf_windows = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else if (a == "--device" && i + 1 < argc)
      device_arg = argv[++i];
    else if (a == "--size" && i + 1 < argc)
      size = std::stoll(argv[++i]);
    else if (a == "--deferred-only" && i + 1 < argc)
      perf_windows = std::stoi(argv[++i]);
    else {
      std::fprintf(
          stderr,
          "usage: livefuse-bench-replacement [--device cpu|cuda] [--json PATH] [--size N]\n"
          "       [--deferred-only WINDOWS]  (only deferred_host, for a profiler)\n");
      return 2;
    }
  }
  const lf::Device dev = device_arg.empty() ? lf::default_device() : lf::parse_device(device_arg);
  g_salt = 1e-9 * static_cast<double>(
                      std::chrono::steady_clock::now().time_since_epoch().count() % 997 + 1);
  std::vector<Record> recs;
  const lf::Tensor x = lf::rand_uniform({size}, 1, -1, 1, lf::DType::f32, dev);
  const std::string sz = std::to_string(size);
  if (perf_windows > 0) {
    // Fusion on until the chain is served, then only served windows: what `perf record` sees
    // is the deferred path and the plan runs.
    set_mode(lf::Mode::on);
    for (int i = 0; i < 20000 && deferred_host(x, dev, 20).served_fraction < 1; ++i) {
    }
    const DeferredHost dh = deferred_host(x, dev, perf_windows);
    print_plans();
    std::printf(
        "deferred_host %.3f us per deferred call, p10 %.3f (served fraction %.3f); whole "
        "window %.3f us\n",
        dh.us_per_call, dh.p10_us, dh.served_fraction, dh.window_us);
    return 0;
  }

  // Eager steady state, and the round trip of one op + synchronize.
  set_mode(lf::Mode::off);
  timed_calls(x, dev, 200);
  const Timed eager = timed_calls(x, dev, 2000);
  const double eager_med = pct(eager.total, 0.5);
  recs.push_back(call_record("livefuse_off", sz, eager));
  const double eager_pipe = pipelined_us(x, dev);
  recs.push_back({"chain10_pipelined", "livefuse_off", sz, eager_pipe, {}});
  {
    std::vector<double> floor;
    for (int i = 0; i < 2000; ++i) {
      const auto t0 = Clock::now();
      (void)lf::add(x, 1.0);
      lf::synchronize(dev);
      floor.push_back(us_since(t0));
    }
    recs.push_back({"launch_sync_floor", "one_eager_op", sz, pct(floor, 0.5), {}});
  }
#if LIVEFUSE_HAS_CUDA
  if (dev.is_cuda()) {
    // The same round trip with no runtime in it: a CUDA graph of one node (a 16 KB memset)
    // launched and synchronized. No graph-replay of the chain can beat it on this host.
    cudaStream_t s = static_cast<cudaStream_t>(lf::Stream::current(dev).handle());
    void* buf = nullptr;
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    if (cudaMalloc(&buf, 4 * size) == cudaSuccess &&
        cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
      cudaMemsetAsync(buf, 0, 4 * size, s);
      if (cudaStreamEndCapture(s, &g) == cudaSuccess && cudaGraphInstantiate(&ge, g, 0) == cudaSuccess) {
        std::vector<double> floor;
        for (int i = 0; i < 2200; ++i) {
          const auto t0 = Clock::now();
          cudaGraphLaunch(ge, s);
          cudaStreamSynchronize(s);
          if (i >= 200) floor.push_back(us_since(t0));
        }
        recs.push_back({"launch_sync_floor", "bare_graph_one_node", sz, pct(floor, 0.5), {}});
      }
    }
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    if (buf) cudaFree(buf);
    cudaGetLastError();
  }
#endif

  // A new loop with fusion on: time to fused, latency while compiling, then steady state.
  set_mode(lf::Mode::on);
  reset_pipeline(dev);
  std::vector<bool> served;
  std::vector<double> on_lat;
  const auto t_start = Clock::now();
  double time_to_fused_ms = -1;
  std::vector<double> before_fused, started_ms;
  for (int i = 0; i < 20000 && time_to_fused_ms < 0; ++i) {
    const uint64_t s0 = lf::matcher_counters().served;
    const auto t0 = Clock::now();
    started_ms.push_back(std::chrono::duration<double, std::milli>(t0 - t_start).count());
    lf::Tensor y = chain10(x);
    lf::synchronize(dev);
    on_lat.push_back(us_since(t0));
    served.push_back(lf::matcher_counters().served - s0 >= 10);
    before_fused.push_back(on_lat.back());
    if (served.size() >= 20) {
      const int ok = static_cast<int>(std::count(served.end() - 20, served.end(), true));
      if (ok >= 18) time_to_fused_ms = us_since(t_start) / 1000.0;
    }
  }
  // Which calls were slow while compiling (> 2x eager): when, and whether a plan served them.
  {
    int shown = 0;
    for (size_t i = 0; i < before_fused.size() && shown < 24; ++i)
      if (before_fused[i] > 2 * eager_med) {
        std::printf("  slow call %zu at %.1f ms: %.1f us%s\n", i, started_ms[i], before_fused[i],
                    served[i] ? " (served)" : "");
        ++shown;
      }
  }
  const Timed fused = timed_calls(x, dev, 2000);
  Record on = call_record("livefuse_on", sz, fused);
  on.derived.push_back({"speedup_vs_off", eager_med / on.median_us});
  recs.push_back(on);
  const DeferredHost dh = deferred_host(x, dev, 2000);
  recs.push_back({"deferred_host",
                  "per_deferred_call",
                  sz,
                  dh.us_per_call,
                  {{"p10_us", dh.p10_us},
                   {"served_fraction", dh.served_fraction},
                   {"window_us", dh.window_us}}});
  const double fused_pipe = pipelined_us(x, dev);
  // What served the pipelined loop (a plan per phase; see pipelined_us).
  print_plans();
  recs.push_back(
      {"chain10_pipelined", "livefuse_on", sz, fused_pipe, {{"speedup_vs_off", eager_pipe / fused_pipe}}});
  const double slow = static_cast<double>(
      std::count_if(before_fused.begin(), before_fused.end(), [&](double us) { return us > 2 * eager_med; }));
  recs.push_back({"time_to_fused",
                  "livefuse_on",
                  sz,
                  time_to_fused_ms * 1000.0,
                  {{"time_ms", time_to_fused_ms},
                   {"calls", static_cast<double>(before_fused.size())},
                   {"p99_while_compiling_us", pct(before_fused, 0.99)},
                   {"p99_ratio_to_eager", pct(before_fused, 0.99) / eager_med},
                   {"max_us", pct(before_fused, 1.0)},
                   {"calls_over_2x_eager", slow}}});

  // Matcher + monitor host overhead per op with no plan installed (async small ops). Modes
  // alternate rep by rep, so both see the same machine (one mode after the other once gave a
  // negative difference).
  {
    std::vector<double> per[2];
    lf::planner::set_service_paused(true);  // the monitor records, nothing gets planned
    for (int rep = 0; rep < 60; ++rep) {
      const int on = rep % 2;
      set_mode(on ? lf::Mode::on : lf::Mode::off);
      reset_pipeline(dev);
      const auto t0 = Clock::now();
      for (int k = 0; k < 200; ++k) (void)lf::add(x, 1.0);
      per[on].push_back(us_since(t0) / 200.0);
      lf::synchronize(dev);
      lf::PlanTable::get().clear_for_testing();
    }
    lf::planner::set_service_paused(false);
    const double off_op = pct(per[0], 0.5), on_op = pct(per[1], 0.5);
    recs.push_back({"matcher_overhead",
                    "no_plan",
                    sz,
                    on_op - off_op,
                    {{"host_us_per_op_on", on_op}, {"host_us_per_op_off", off_op}}});
  }
  set_mode(lf::Mode::on);
#if LIVEFUSE_HAS_CUDA
  if (dev.is_cuda()) {
    set_mode(lf::Mode::off);  // plans driven directly; the monitor has nothing to see
    try {
      lfbench::bench_graph_binding(recs, size);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "graph_binding: %s\n", e.what());
    }
    set_mode(lf::Mode::on);
  }
#endif

  std::printf("%-18s %-22s %10s %12s  %s\n", "name", "variant", "size", "median_us", "derived");
  for (const Record& r : recs) {
    std::string d;
    for (const auto& [k, v] : r.derived) d += k + "=" + std::to_string(v) + " ";
    std::printf("%-18s %-22s %10s %12.3f  %s\n", r.name.c_str(), r.variant.c_str(), r.size.c_str(),
                r.median_us, d.c_str());
  }
  if (!json_path.empty()) {
    for (Record& r : recs) r.tags.push_back({"device", dev.str()});
    lfbench::write_json(json_path, recs);
  }
  return 0;
}
