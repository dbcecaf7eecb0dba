#pragma once
// The compile service: spec -> rendered source -> cache lookup -> NVRTC, as jobs on a TBB arena
// of config().compile_threads. Callers get a shared_future; nothing is compiled on the
// caller's thread, and every failure (render limits, NVRTC errors, spilling) comes back as a
// CompileResult with the reason and log, never as an exception.
//
// Kernels submitted together (submit_batch: compile_plan submits a plan's kernels so) are
// compiled as one NVRTC program per up to kMaxProgramKernels kernels:
// NVRTC's fixed cost per program -- front end start, NVVM and ptxas set-up; an empty kernel
// costs 40-60% of a small generated one -- is paid once, and NVRTC spreads the program's
// entries over its threads (-split-compile). Each kernel still has its own cache entry. A
// program that fails is compiled again kernel by kernel, so one bad kernel fails alone.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kernels/jit/kernel_cache.hpp"

namespace livefuse::jit {

struct CompileResult {
  std::shared_ptr<CompiledKernel> kernel;  // null on failure
  std::string error;                       // why, when !ok()
  std::string log;                         // NVRTC log (kept on failure)
  bool cache_hit = false;                  // served from memory or disk
  std::thread::id worker;                  // the arena thread that ran the job
  bool ok() const { return kernel != nullptr; }
};

// Options for the current device: its own SM version (sm_90 when there is no GPU), and
// LIVEFUSE_FMA.
CompileOptions default_compile_options();

inline constexpr int kMaxProgramKernels = 16;

struct CompilerStats {
  uint64_t submitted = 0, compiled = 0, failed = 0, cache_hits = 0, deduplicated = 0;
  uint64_t programs = 0;           // NVRTC programs compiled and links made (each may hold several kernels)
  uint64_t linked = 0;             // kernels linked from the op library (LIVEFUSE_JIT=lto)
  uint64_t link_fallbacks = 0;     // kernels the library route refused, compiled with NVRTC
  std::vector<double> compile_ms;  // most recent NVRTC times (bounded)
};

class KernelCompiler {
 public:
  KernelCompiler(int threads, std::string cache_dir, size_t memory_cap = 1024, size_t disk_cap = 4096);
  ~KernelCompiler();
  KernelCompiler(const KernelCompiler&) = delete;
  KernelCompiler& operator=(const KernelCompiler&) = delete;

  // The process-wide compiler (config().compile_threads, config().cache_dir). Never destroyed:
  // compile jobs and loaded modules may outlive static destruction order.
  static KernelCompiler& global();

  std::shared_future<CompileResult> submit(std::shared_ptr<const KernelSpec> spec, const CompileOptions& opts) {
    return submit_batch({std::move(spec)}, opts)[0];
  }
  // One job for all of `specs` (results in their order); specs already in flight join that job.
  std::vector<std::shared_future<CompileResult>> submit_batch(const std::vector<std::shared_ptr<const KernelSpec>>& specs,
                                                              const CompileOptions& opts);
  // submit(...).get(): still compiled on the arena; the caller only waits.
  CompileResult compile(std::shared_ptr<const KernelSpec> spec, const CompileOptions& opts) {
    return submit(std::move(spec), opts).get();
  }

  // What the first kernel would pay before its own compile, paid now on the arena: NVRTC's
  // first use and, with opts.lto, the op library's two flavours (read from the disk cache when
  // an earlier process compiled them) and libNVVM's and nvJitLink's first use. The planner
  // service starts it when it starts on a machine with a GPU, long before a sequence is hot.
  // The result carries no kernel; `error` says what failed (a later compile then fails or falls
  // back the usual way). Waited for at exit like any job.
  std::shared_future<CompileResult> warm_up(const CompileOptions& opts);

  KernelCache& cache() { return cache_; }
  CompilerStats stats() const;

 // Process exit: jobs not started are dropped (their result says so), running ones are waited
  // for up to `timeout` -- a job still inside NVRTC while its libraries are torn down would crash
  // the exiting process. Later submits fail at once.
  void drain_for_exit(std::chrono::milliseconds timeout);

 private:
  struct Job;
  void run_batch(std::vector<Job>& jobs, const CompileOptions& opts);
  // Compiles the kernels of `chunk` (indices into jobs, each rendered) as one program; false when
  // NVRTC failed (every job of the chunk then carries the error).
  bool compile_program(std::vector<Job>& jobs, const std::vector<size_t>& chunk, const CompileOptions& opts);
  // Kernels linked from the op library (lto_render.hpp), one exp flavour, into one cubin. A
  // chunk that fails is linked again kernel by kernel; a kernel that fails alone compiles with
  // NVRTC.
  void compile_linked(std::vector<Job>& jobs, const std::vector<size_t>& chunk, const CompileOptions& opts);
  // Makes the CompiledKernels of `chunk` from their program's output (one cubin, shared; each
  // kernel's compile_ms its share) and caches them.
  void install(std::vector<Job>& jobs, const std::vector<size_t>& chunk, const NvrtcOutput& out);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  KernelCache cache_;
  mutable std::mutex mu_;
  std::atomic<bool> exiting_{false};
  bool is_global_ = false;  // global(): drained at process exit
  std::unordered_map<std::string, std::shared_future<CompileResult>> inflight_;
  CompilerStats stats_;
};

}  // namespace livefuse::jit
