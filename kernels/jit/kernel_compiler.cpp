#include "kernels/jit/kernel_compiler.hpp"

#include <tbb/info.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstdlib>

#include <cstdio>

#include "kernels/jit/cuda_driver.hpp"
#include "livefuse/config.hpp"
#include "livefuse/error.hpp"

namespace livefuse::jit {

struct KernelCompiler::Impl {
  // No slot is reserved for callers (they never run a job); more slots than TBB has workers
  // would only make TBB complain.
  explicit Impl(int threads) : arena(std::max(1, std::min(threads, tbb::info::default_concurrency() - 1)), 0) {}
  tbb::task_arena arena;
};

CompileOptions default_compile_options() {
  CompileOptions o;
  const int arch = current_device_arch();
  o.arch = arch > 0 ? arch : 90;
  o.fma = config().fma;
  return o;
}

KernelCompiler::KernelCompiler(int threads, std::string cache_dir, size_t memory_cap, size_t disk_cap)
    : impl_(std::make_unique<Impl>(threads < 1 ? 1 : threads)), cache_(std::move(cache_dir), memory_cap, disk_cap) {}

KernelCompiler::~KernelCompiler() {
  // Wait for queued jobs: they reference this object.
  std::vector<std::shared_future<CompileResult>> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [k, f] : inflight_) pending.push_back(f);
  }
  for (auto& f : pending) f.wait();
}

namespace {
void drain_global_at_exit() { KernelCompiler::global().drain_for_exit(std::chrono::seconds(10)); }
}  // namespace

KernelCompiler& KernelCompiler::global() {
  static KernelCompiler* g = [] {
    auto* c = new KernelCompiler(config().compile_threads, config().cache_dir);
    c->is_global_ = true;
    std::atexit(drain_global_at_exit);
    return c;
  }();
  return *g;
}

void KernelCompiler::drain_for_exit(std::chrono::milliseconds timeout) {
  exiting_.store(true);
  std::vector<std::shared_future<CompileResult>> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [k, f] : inflight_) pending.push_back(f);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto& f : pending) f.wait_until(deadline);
}

CompilerStats KernelCompiler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::shared_future<CompileResult> KernelCompiler::submit(std::shared_ptr<const KernelSpec> spec,
                                                         const CompileOptions& opts) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(structure_hash(*spec)));
  const std::string job_key = std::string(buf) + "|" + opts.str();
  auto promise = std::make_shared<std::promise<CompileResult>>();
  std::shared_future<CompileResult> fut;
  if (exiting_.load()) {
    CompileResult r;
    r.error = "[jit] " + spec->name + ": not compiled, the process is exiting";
    promise->set_value(std::move(r));
    return promise->get_future().share();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.submitted;
    if (auto it = inflight_.find(job_key); it != inflight_.end()) {
      ++stats_.deduplicated;
      return it->second;
    }
    fut = promise->get_future().share();
    inflight_[job_key] = fut;
  }
  impl_->arena.enqueue([this, spec, opts, promise, job_key] {
    CompileResult r;
    try {
      if (exiting_.load())
        r.error = "[jit] " + spec->name + ": not compiled, the process is exiting";
      else
        r = run_job(*spec, opts);
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    // NVRTC loads libraries of its own at its first compile, and their teardown is registered
    // then: a drain registered only before that would run after it, with a job still inside
    // NVRTC (a crash at exit, seen on the GPU). Registered again after the first job, the drain
    // runs first.
    if (is_global_) {
      static std::once_flag once;
      std::call_once(once, [] { std::atexit(drain_global_at_exit); });
    }
    r.worker = std::this_thread::get_id();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (r.cache_hit) ++stats_.cache_hits;
      else if (r.ok()) ++stats_.compiled;
      if (!r.ok()) ++stats_.failed;
      if (r.ok() && !r.cache_hit) {
        stats_.compile_ms.push_back(r.kernel->compile_ms);
        if (stats_.compile_ms.size() > 512) stats_.compile_ms.erase(stats_.compile_ms.begin());
      }
      inflight_.erase(job_key);
    }
    promise->set_value(std::move(r));
  });
  return fut;
}

CompileResult KernelCompiler::run_job(const KernelSpec& spec, const CompileOptions& opts) {
  CompileResult r;
  RenderedKernel rk = render_cuda(spec);
  const KernelKey key = make_key(spec, rk, opts);
  if (auto hit = cache_.find(key, rk)) {
    r.kernel = hit;
    r.cache_hit = true;
    r.log = hit->log;
  } else {
    // Row kernels carry two heavy bodies (plain and pipelined): NVRTC may work on them at once.
    // (A program of one entry point only pays the split's threads: 3-7 ms locally.)
    CompileOptions o = opts;
    if (spec.kind == SpecKind::Row && rk.variants.size() >= 2)
      o.split = static_cast<int>(std::min<size_t>(rk.variants.size(), std::max(2u, std::thread::hardware_concurrency())));
    NvrtcOutput out = nvrtc_compile(rk.source, rk.prefix, o);
    r.log = out.log;
    if (!out.ok) {
      r.error = "[jit] " + spec.name + ": " + out.error;
      return r;
    }
    auto k = std::make_shared<CompiledKernel>();
    k->key = key;
    k->rendered = std::move(rk);
    k->cubin = std::move(out.cubin);
    k->log = out.log;
    k->compile_ms = out.compile_ms;
    for (Variant v : k->rendered.variants) {
      const std::string name = k->rendered.entry(v);
      EntryStats st{name, 0, 0};
      for (const auto& e : out.entries)
        if (e.name == name) st = e;
      k->stats.push_back(st);
      k->variant_ok.push_back(st.spill_bytes == 0);
    }
    cache_.insert(k);
    r.kernel = k;
  }
  bool any = false;
  int spill = 0;
  for (size_t i = 0; i < r.kernel->variant_ok.size(); ++i) {
    any |= r.kernel->variant_ok[i];
    spill = std::max(spill, r.kernel->stats[i].spill_bytes);
  }
  if (!any) {
    r.error = "[jit] " + spec.name + ": every variant spills registers (" + std::to_string(spill) + " bytes)";
    r.kernel.reset();
  }
  return r;
}

}  // namespace livefuse::jit
