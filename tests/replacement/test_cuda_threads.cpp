// Threads on CUDA (issue 17, item 5): four threads, each on its own stream, each running a hot
// loop long enough that its plans are captured as graphs and replayed. One thread's capture
// must not disturb another's synchronize, host copy or event query (captures are thread-local
// and make no unsafe call), and every value must be eager's. Also: a window settled by another
// thread than its stream's (on the CPU too, where the same handing-over logic runs).
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "livefuse/inspect.hpp"
#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "test_plan_util.hpp"

namespace lf = livefuse;

namespace {
lf::Tensor block(const lf::Tensor& x, const lf::Tensor& w, const lf::Tensor& g) {
  lf::Tensor h = lf::add(lf::linear(x, w, lf::Tensor()), x);
  h = lf::gelu(lf::layer_norm(h, g, lf::Tensor(), 1e-5));
  return lf::tanh(lf::add(lf::mul(h, 0.5), x));
}

uint64_t graph_hits_on_cuda() {
  uint64_t hits = 0;
  for (const lf::PlanInfo& p : lf::inspect().plans) {
    if (p.device != "cuda") continue;
    for (const auto& [k, v] : p.details.notes)
      if (k == "graph_hits") hits += std::stoull(v);
  }
  return hits;
}
}  // namespace

LF_CUDA_TEST_CASE(
    "threads: 4 threads on 4 CUDA streams, plans captured and replayed, every value eager's") {
  const lf::Config saved = lf::config();
  lf::set_config_for_testing(lftest::fresh_unsampled(lf::Mode::on));
  const lf::Device gpu = lf::Device::cuda(0);
  constexpr int kThreads = 4, kIters = 600;
  struct Input {
    lf::Tensor x, w, g;
    std::vector<double> want;
  };
  std::vector<Input> in(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    // Different rows per thread: the threads share plans, not shapes.
    in[t].x = lf::rand_uniform({16 + 8 * t, 128}, 100 + t, -1, 1, lf::DType::f32, gpu);
    in[t].w = lf::rand_uniform({128, 128}, 200 + t, -0.1, 0.1, lf::DType::f32, gpu);
    in[t].g = lf::rand_uniform({128}, 300 + t, 0.5, 1.5, lf::DType::f32, gpu);
    in[t].want = lftest::eager_values([&] { return block(in[t].x, in[t].w, in[t].g); });
  }
  lf::synchronize(gpu);
  const uint64_t s0 = lf::inspect().counter("matcher", "served").value_or(0);
  std::atomic<int> mismatches{0};
  std::mutex err_mu;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        lf::Stream s = lf::Stream::create(gpu);
        lf::StreamGuard guard(s);
        lf::Tensor held;  // a result kept across iterations: the plan's binding sets rotate
        for (int it = 0; it < kIters; ++it) {
          lf::Tensor y = block(in[t].x, in[t].w, in[t].g);
          if (it % 3 == 0) held = y;
          if (it % 2 == 0) s.synchronize();  // a synchronize while other threads capture
          if (!lftest::allclose(y.to_doubles(), in[t].want, 1e-4, 1e-5)) mismatches.fetch_add(1);
          if (it == 20) {  // the plans are installed from here on
            lf::monitor::Monitor::instance().drain();
            lf::planner::wait_service_idle();
          }
        }
        if (!lftest::allclose(held.to_doubles(), in[t].want, 1e-4, 1e-5)) mismatches.fetch_add(1);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> g(err_mu);
        errors.push_back("thread " + std::to_string(t) + ": " + e.what());
      }
    });
  for (auto& th : threads) th.join();
  for (const std::string& e : errors) FAIL_CHECK(e);
  CHECK(mismatches == 0);
  CHECK(lf::inspect().counter("matcher", "served").value_or(0) > s0);
  CHECK(graph_hits_on_cuda() > 0);  // graphs were captured, and replayed
  lftest::reset_pipeline();
  lf::set_config_for_testing(saved);
}

// A result handed to another thread while still pending: that thread settles the producer's
// window (on the producer's stream) while the producer keeps launching work on it. Such a
// window must not capture: the capture would take in the producer's own launches.
namespace {
void handed_while_pending(lf::Device gpu) {
  const lf::Config saved = lf::config();
  lf::set_config_for_testing(lftest::fresh_unsampled(lf::Mode::on));
  const lf::Tensor x = lf::rand_uniform({32, 128}, 7, -1, 1, lf::DType::f32, gpu);
  const lf::Tensor w = lf::rand_uniform({128, 128}, 8, -0.1, 0.1, lf::DType::f32, gpu);
  const lf::Tensor g = lf::rand_uniform({128}, 9, 0.5, 1.5, lf::DType::f32, gpu);
  const std::vector<double> want = lftest::eager_values([&] { return block(x, w, g); });
  lf::synchronize(gpu);
  const uint64_t s0 = lf::inspect().counter("matcher", "served").value_or(0);
  std::mutex mu;
  std::condition_variable cv;
  std::deque<lf::Tensor> handed;
  bool done = false;
  std::atomic<int> mismatches{0}, read{0};
  std::vector<std::string> errors;
  std::thread consumer([&] {
    try {
      for (;;) {
        lf::Tensor y;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return done || !handed.empty(); });
          if (handed.empty()) return;
          y = std::move(handed.front());
          handed.pop_front();
        }
        if (!lftest::allclose(y.to_doubles(), want, 1e-4, 1e-5)) mismatches.fetch_add(1);
        read.fetch_add(1);
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu);
      errors.push_back(std::string("consumer: ") + e.what());
    }
  });
  try {
    lf::Stream s = lf::Stream::create(gpu);
    lf::StreamGuard guard(s);
    for (int it = 0; it < 600; ++it) {
      lf::Tensor y = block(x, w, g);  // its window still pending: completed by the next call
      {
        std::lock_guard<std::mutex> lock(mu);
        handed.push_back(std::move(y));
      }
      cv.notify_one();
      if (it == 20) {
        lf::monitor::Monitor::instance().drain();
        lf::planner::wait_service_idle();
      }
      if (it % 50 == 49) s.synchronize();
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu);
    errors.push_back(std::string("producer: ") + e.what());
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_one();
  consumer.join();
  for (const std::string& e : errors) FAIL_CHECK(e);
  CHECK(read == 600);
  CHECK(mismatches == 0);
  CHECK(lf::inspect().counter("matcher", "served").value_or(0) > s0);
  lftest::reset_pipeline();
  lf::set_config_for_testing(saved);
}
}  // namespace

TEST_CASE("threads: pending CPU results read by another thread while their producer keeps going") {
  handed_while_pending(lf::Device::cpu());
}

LF_CUDA_TEST_CASE(
    "threads: pending CUDA results read by another thread while their producer keeps going") {
  handed_while_pending(lf::Device::cuda(0));
}
