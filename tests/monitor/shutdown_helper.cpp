// A process that exits while the monitor is busy (see test_monitor_threads.cpp): it must exit
// with status 0, promptly, whatever is still queued or still being recorded.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "livefuse/livefuse.hpp"
#include "monitor/monitor.hpp"

namespace lf = livefuse;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "joined";
  lf::monitor::ensure_started();
  if (!lf::monitor::Monitor::instance().running()) return 2;
  constexpr int kThreads = 4;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &stop, &mode] {
      const lf::Stream s = lf::Stream::create(lf::Device::cpu());
      lf::StreamGuard guard(s);
      lf::Tensor x = lf::rand_uniform({4, 8}, t, -0.5, 0.5);
      if (mode == "racing") {
        // Records straight into the monitor (the executor's hot path, without kernels), so
        // nothing but the monitor is in use while the process tears down around it.
        lf::Tensor y = lf::tanh(x);
        lf::OpCall call;
        call.op = lf::OpId::tanh;
        call.inputs.push_back(x);
        auto& m = lf::monitor::Monitor::instance();
        for (;;) {
          m.on_call(call, std::span<const lf::Tensor>(&y, 1), s.id());
          m.on_release(y.id());
        }
      }
      while (!stop.load()) x = lf::add(lf::tanh(lf::mul(x, x)), x);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  if (mode == "racing") {
    for (auto& th : threads) th.detach();
    return 0;  // exit() with the recording threads still running
  }
  stop.store(true);
  for (auto& th : threads) th.join();
  const auto c = lf::monitor::Monitor::instance().counters();
  std::printf("produced %llu events %llu\n", static_cast<unsigned long long>(c.produced),
              static_cast<unsigned long long>(c.events));
  return 0;  // exit() with events still queued
}
