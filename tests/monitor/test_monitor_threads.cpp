// The monitor under concurrency: per-stream results, overload, shutdown under load.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "monitor/trace_event.hpp"
#include "monitor_fixture.hpp"

using namespace lfmon;

namespace {

// Thread t's loop body: t + 2 elementwise ops, a different structure per thread.
lf::Tensor thread_body(int t, const lf::Tensor& x) {
  lf::Tensor y = lf::exp(lf::mul(x, x));
  for (int k = 0; k < t; ++k) y = k % 2 ? lf::tanh(y) : lf::relu(y);
  return lf::add(y, x);
}

}  // namespace

TEST_CASE("monitor: 4 user threads on 4 streams give per-stream results") {
  setup();
  constexpr int kThreads = 4;
  std::vector<uint32_t> stream_ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t, &stream_ids] {
      const lf::Stream s = lf::Stream::create(lf::Device::cpu());
      lf::StreamGuard guard(s);
      stream_ids[t] = s.id();
      lf::Tensor x = lf::rand_uniform({4, 8}, 10 + t, -0.5, 0.5, lf::DType::f32, lf::Device::cpu());
      for (int k = 0; k < 60; ++k) x = thread_body(t, x);
      (void)x.to_floats();
    });
  for (auto& th : threads) th.join();
  const auto c = drained_candidates();
  for (const Candidate& cand : c) MESSAGE(cand.stream, ": ", describe(cand));
  std::map<uint32_t, const Candidate*> by_stream;
  for (const Candidate& cand : c) {
    CHECK(by_stream.count(cand.stream) == 0);
    by_stream[cand.stream] = &cand;
  }
  REQUIRE(by_stream.size() == kThreads);
  for (int t = 0; t < kThreads; ++t) {
    CAPTURE(t);
    REQUIRE(by_stream.count(stream_ids[t]) == 1);
    const Candidate& cand = *by_stream[stream_ids[t]];
    CHECK(cand.size() == static_cast<size_t>(t + 3));
    CHECK(cand.ops.front().op == lf::OpId::mul);
    CHECK(cand.ops.back().op == lf::OpId::add);
  }
  const auto ctr = Monitor::instance().counters();
  CHECK(ctr.windows >= kThreads);
  CHECK(ctr.drops == 0);
  // The exited threads' queues are freed once consumed (the monitor does it when idle).
  uint64_t producers = ctr.producers;
  for (int k = 0; k < 200 && producers >= kThreads; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    producers = Monitor::instance().counters().producers;
  }
  CHECK(producers < kThreads);
}

TEST_CASE("monitor: overload drops and counts events and never blocks") {
  MonitorOptions o;
  o.queue_capacity = 64;  // for threads whose first event comes after this reset
  setup(o);
  Monitor::instance().pause_for_testing(true);
  constexpr int kOps = 2000;
  double max_op_ms = 0;
  std::thread producer([&] {
    lf::Tensor x = lf::rand_uniform({2, 4}, 3);
    for (int k = 0; k < kOps; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      x = lf::relu(lf::neg(x));
      max_op_ms = std::max(
          max_op_ms,
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  });
  producer.join();
  const auto full = Monitor::instance().counters();
  CHECK(full.produced <= 64);
  // Each iteration records 2 calls and releases 2 values.
  CHECK(full.produced + full.drops >= 4 * kOps);
  CHECK(full.drops >= 4 * kOps - 64);
  CHECK(full.events == 0);
  CHECK(max_op_ms < 100);  // a full queue costs nothing like a wait
  Monitor::instance().pause_for_testing(false);
  REQUIRE(Monitor::instance().drain());
  const auto after = Monitor::instance().counters();
  CHECK(after.events + after.releases + after.syncs == full.produced);
  CHECK(after.drops == full.drops);
}

TEST_CASE("monitor: recording copies ids, dtypes and shapes into the event") {
  setup();
  const lf::Tensor a = lf::rand_uniform({3, 5}, 1), b = lf::rand_uniform({5}, 2);
  const lf::Tensor y = lf::add(a, b);
  livefuse::OpCall call;
  call.op = lf::OpId::add;
  call.inputs.push_back(a);
  call.inputs.push_back(b);
  livefuse::monitor::TraceEvent ev;
  livefuse::monitor::fill_call_event(ev, call, std::span<const lf::Tensor>(&y, 1), 7);
  CHECK(ev.kind == livefuse::monitor::EventKind::call);
  CHECK(ev.stream == 7);
  CHECK(ev.n_in == 2);
  CHECK(ev.n_out == 1);
  CHECK(ev.in_ids[0] == a.id());
  CHECK(ev.in_ids[1] == b.id());
  CHECK(ev.out_ids[0] == y.id());
  CHECK(ev.in_rank[0] == 2);
  CHECK(ev.in_rank[1] == 1);
  CHECK(ev.dims[ev.in_dims_offset(0) + 1] == 5);
  CHECK(ev.dims[ev.in_dims_offset(1)] == 5);
  CHECK(ev.dims[ev.out_dims_offset(0)] == 3);
  CHECK((ev.flags & livefuse::monitor::kEventTruncated) == 0);
  // Too many inputs for the fixed-size event: flagged, never a candidate.
  for (int k = 0; k < 6; ++k) call.inputs.push_back(b);
  livefuse::monitor::fill_call_event(ev, call, std::span<const lf::Tensor>(&y, 1), 7);
  CHECK((ev.flags & livefuse::monitor::kEventTruncated) != 0);
}

namespace {

// Runs the shutdown helper; returns its exit status, or -1 on a signal / timeout.
int run_helper(const std::string& mode, double* seconds) {
  const auto exe = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "monitor" /
                   "lf-monitor-shutdown";
  REQUIRE_MESSAGE(std::filesystem::exists(exe), "build the helper first: ", exe.string());
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("LIVEFUSE", "trace", 1);
    execl(exe.c_str(), exe.c_str(), mode.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  REQUIRE(pid > 0);
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60)) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("monitor: clean shutdown under load") {
  // "joined": 4 threads run ops on 4 streams, are joined, and main returns with the queues
  // full of unconsumed events. "racing": main returns while 4 threads are still recording.
  for (const char* mode : {"joined", "racing"})
    for (int rep = 0; rep < 3; ++rep) {
      CAPTURE(mode);
      CAPTURE(rep);
      double s = 0;
      CHECK(run_helper(mode, &s) == 0);
      CHECK(s < 30);
    }
}
