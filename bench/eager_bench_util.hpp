#pragma once
// Printing and timing for livefuse-bench-eager (records: bench_record.hpp): medians of host time (steady
// clock, synchronised between batches) or of device time (CUDA events around batches).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_record.hpp"
#include "livefuse/livefuse.hpp"
#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace eager_bench {

using Clock = std::chrono::steady_clock;

using lfbench::json_escape;
using lfbench::median;
using lfbench::Record;
using lfbench::write_json;

inline void print_record(const Record& r) {
  std::printf("%-22s %-22s %-22s %12.3f", r.name.c_str(), r.variant.c_str(), r.size.c_str(),
              r.median_us);
  for (const auto& [k, v] : r.derived) std::printf("  %s=%.4g", k.c_str(), v);
  std::printf("\n");
}

// Host time of `fn` per call: `reps` batches of `batch` calls, synchronised between batches.
inline double host_us_per_call(lf::Device dev, int reps, int batch,
                               const std::function<void()>& fn) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    lf::synchronize(dev);
    const auto t0 = Clock::now();
    for (int i = 0; i < batch; ++i) fn();
    const auto t1 = Clock::now();
    t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / batch);
  }
  lf::synchronize(dev);
  return median(t);
}

// The same, for several variants measured in turn within each rep (a drift of the host's clock
// or load over the run then hits every variant alike): one median per variant.
inline std::vector<double> host_us_interleaved(lf::Device dev, int reps, int batch,
                                               const std::vector<std::function<void()>>& fns) {
  std::vector<std::vector<double>> t(fns.size());
  for (int r = 0; r < reps; ++r)
    for (size_t k = 0; k < fns.size(); ++k) {
      lf::synchronize(dev);
      const auto t0 = Clock::now();
      for (int i = 0; i < batch; ++i) fns[k]();
      const auto t1 = Clock::now();
      t[k].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / batch);
    }
  lf::synchronize(dev);
  std::vector<double> med;
  for (auto& v : t) med.push_back(median(v));
  return med;
}

#if LIVEFUSE_HAS_CUDA
#define BENCH_CUDA(call)                                                                \
  do {                                                                                  \
    const cudaError_t e_ = (call);                                                      \
    if (e_ != cudaSuccess)                                                              \
      throw lf::Error(std::string("[bench] ") + #call + ": " + cudaGetErrorString(e_)); \
  } while (0)

// Device time of `fn` per call, from CUDA events around batches on the current stream.
inline double device_us_per_call(lf::Device dev, int reps, int batch,
                                 const std::function<void()>& fn) {
  cudaStream_t s = static_cast<cudaStream_t>(lf::Stream::current(dev).handle());
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  fn();  // warm-up (first-call setup: plans, workspaces)
  lf::synchronize(dev);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    BENCH_CUDA(cudaEventRecord(e0, s));
    for (int i = 0; i < batch; ++i) fn();
    BENCH_CUDA(cudaEventRecord(e1, s));
    BENCH_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(1000.0 * ms / batch);
  }
  lf::synchronize(dev);
  BENCH_CUDA(cudaEventDestroy(e0));
  BENCH_CUDA(cudaEventDestroy(e1));
  return median(t);
}
#endif

inline double time_per_call(lf::Device dev, int reps, int batch, const std::function<void()>& fn) {
#if LIVEFUSE_HAS_CUDA
  if (dev.is_cuda()) return device_us_per_call(dev, reps, batch, fn);
#endif
  fn();
  return host_us_per_call(dev, reps, batch, fn);
}

}  // namespace eager_bench
