#pragma once
// Timing inside a CUDA graph: what `enqueue` puts on `s` is captured once and the graph replayed;
// the result is the median microseconds of a replay over `reps`, divided by `per` (the launches
// it holds). That is what work costs inside a plan's graph -- single launches timed between two
// events measure the launch (~5 us) as much as the kernel. `before`, when given, is enqueued
// ahead of each timed replay outside the graph (a spin kernel, so the host's enqueueing is
// hidden behind it).
#include <vector>

#include "bench/bench_cuda.hpp"
#include "bench/bench_record.hpp"

namespace lfbench {

// (Callables as template parameters: <functional> would bring std::bind into the benches'
// unqualified calls of their own `bind`.)
struct Nothing {
  void operator()() const {}
};
// Median microseconds, divided by `per`, of what `launch` enqueues on `s` between two events,
// over `reps` rounds after `warmup` untimed ones; `before` goes ahead of each round, outside the
// events.
template <class Launch, class Before = Nothing>
double events_median_us(cudaStream_t s, int reps, int warmup, double per, Launch&& launch,
                        Before&& before = Before{}) {
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  std::vector<double> us;
  for (int r = -warmup; r < reps; ++r) {
    before();
    BENCH_CUDA(cudaEventRecord(e0, s));
    launch();
    BENCH_CUDA(cudaEventRecord(e1, s));
    BENCH_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 0) us.push_back(1000.0 * ms / per);
  }
  BENCH_CUDA(cudaEventDestroy(e0));
  BENCH_CUDA(cudaEventDestroy(e1));
  return median(us);
}

template <class Enqueue, class Before = Nothing>
double graph_median_us(cudaStream_t s, int reps, double per, Enqueue&& enqueue,
                       Before&& before = Before{}) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  enqueue();
  BENCH_CUDA(cudaStreamEndCapture(s, &g));
  BENCH_CUDA(cudaGraphInstantiate(&ge, g, 0));
  const double us = events_median_us(
      s, reps, 3, per, [&] { BENCH_CUDA(cudaGraphLaunch(ge, s)); }, before);
  BENCH_CUDA(cudaGraphExecDestroy(ge));
  BENCH_CUDA(cudaGraphDestroy(g));
  return us;
}

}  // namespace lfbench
