#include "kernels/jit/kernel_compiler.hpp"

#include <tbb/info.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "kernels/jit/cuda_driver.hpp"
#include "kernels/jit/lto_compiler.hpp"
#include "kernels/jit/lto_render.hpp"
#include "livefuse/config.hpp"
#include "livefuse/error.hpp"
#include "runtime/background.hpp"
#include "runtime/exit_hooks.hpp"

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
  o.fast_compile = config().fast_compile;
  o.lto = config().jit_lto;
  return o;
}

namespace {
// NVRTC allocates and frees tens of MB per program; with glibc's default top pad (128 KiB) the
// heap is trimmed after each compile and the next one faults the same pages in again: 10% of a
// small kernel's compile time locally (kernel time in clear_page and page faults). A 16 MiB pad
// keeps that much free memory at the top of each heap instead (peak RSS unchanged). A
// MALLOC_TOP_PAD_ set by the user is left alone.
void keep_compile_heap() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!std::getenv("MALLOC_TOP_PAD_")) mallopt(M_TOP_PAD, 16 << 20);
  });
}
}  // namespace

KernelCompiler::KernelCompiler(int threads, std::string cache_dir, size_t memory_cap, size_t disk_cap)
    : impl_(std::make_unique<Impl>(threads < 1 ? 1 : threads)), cache_(std::move(cache_dir), memory_cap, disk_cap) {
  keep_compile_heap();
}

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
    exit_hooks::add(drain_global_at_exit);  // before exit's handlers (runtime/exit_hooks.hpp)
    std::atexit(drain_global_at_exit);      // exit() on another thread
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

struct KernelCompiler::Job {
  std::shared_ptr<const KernelSpec> spec;
  std::string key;  // in inflight_
  std::shared_ptr<std::promise<CompileResult>> promise;
  RenderedKernel rk;
  KernelKey kernel_key;
  CompileResult result;
};

namespace {
std::string job_key(const KernelSpec& spec, const CompileOptions& opts) {
  return hex64(structure_hash(spec)) + "|" + opts.str();
}

// [ Note -- exit while compiling ]
// NVRTC builds statics of its own on the first use of a code path (its first compile, its first
// split compile; on a GPU host the driver it looks for), and so may libNVVM and nvJitLink; their
// destructors run at exit before every atexit handler registered earlier: a drain registered
// before them runs after them, with a job still inside the library (a crash at exit, seen on the
// GPU after split compiles came in, and again when the warm-up made first uses happen at start).
// So the first program of the process is preceded by two empty ones, plain and split; the drain
// is registered again after every program or link whose flags are new; and while such a first
// use runs, a helper thread registers it every millisecond (DrainTicker): an exit in the middle
// of it finds a drain registered after the statics it made, except within a millisecond of
// their making.
std::mutex drain_mu;
std::vector<std::string> drain_flags_seen;  // flags of the programs compiled so far

std::string drain_flags(const CompileOptions& o) { return o.str() + (o.split > 1 ? " split" : ""); }

bool seen_locked(const std::string& flags) {
  return std::find(drain_flags_seen.begin(), drain_flags_seen.end(), flags) != drain_flags_seen.end();
}

bool first_use(const CompileOptions& o) {
  std::lock_guard<std::mutex> g(drain_mu);
  return !seen_locked(drain_flags(o));
}

class DrainTicker {
 public:
  DrainTicker()
      : thread_([this] {
          while (!stop_.load()) {
            std::atexit(drain_global_at_exit);
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        }) {}
  ~DrainTicker() {
    stop_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

void before_program(const CompileOptions& opts) {
  std::lock_guard<std::mutex> g(drain_mu);
  if (!drain_flags_seen.empty()) return;
  CompileOptions o = opts;
  for (int split : {0, 2}) {
    o.split = split;
    (void)nvrtc_compile("extern \"C\" __global__ void lf_warm_up() {}\n", "lf_warm_up", o);
    drain_flags_seen.push_back(drain_flags(o));
  }
  std::atexit(drain_global_at_exit);
}

void after_program(const CompileOptions& o) {
  const std::string flags = drain_flags(o);
  std::lock_guard<std::mutex> g(drain_mu);
  if (seen_locked(flags)) return;
  drain_flags_seen.push_back(flags);
  std::atexit(drain_global_at_exit);
}

// The global compiler's scope around one program or link: the empty programs before the
// process's first, the ticker while `o`'s flags are new, the drain registered after.
class ExitSafe {
 public:
  ExitSafe(bool global, const CompileOptions& o, const CompileOptions& warm) : global_(global), o_(o) {
    if (!global_) return;
    if (first_use(o_)) ticker_.emplace();
    before_program(warm);
  }
  ~ExitSafe() {
    if (global_) after_program(o_);
  }

 private:
  const bool global_;
  const CompileOptions o_;
  std::optional<DrainTicker> ticker_;
};
}  // namespace

std::vector<std::shared_future<CompileResult>> KernelCompiler::submit_batch(
    const std::vector<std::shared_ptr<const KernelSpec>>& specs, const CompileOptions& opts) {
  std::vector<std::shared_future<CompileResult>> futures;
  auto jobs = std::make_shared<std::vector<Job>>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& spec : specs) {
      ++stats_.submitted;
      auto promise = std::make_shared<std::promise<CompileResult>>();
      if (exiting_.load()) {
        CompileResult r;
        r.error = "[jit] " + spec->name + ": not compiled, the process is exiting";
        promise->set_value(std::move(r));
        futures.push_back(promise->get_future().share());
        continue;
      }
      std::string key = job_key(*spec, opts);
      if (auto it = inflight_.find(key); it != inflight_.end()) {
        ++stats_.deduplicated;
        futures.push_back(it->second);
        continue;
      }
      futures.push_back(promise->get_future().share());
      inflight_[key] = futures.back();
      jobs->push_back(Job{spec, std::move(key), std::move(promise), {}, {}, {}});
    }
  }
  if (jobs->empty()) return futures;
  impl_->arena.enqueue([this, jobs, opts] {
    const BackgroundWork busy;
    try {
      if (!exiting_.load()) run_batch(*jobs, opts);
    } catch (const std::exception& e) {
      for (Job& j : *jobs)
        if (!j.result.ok() && j.result.error.empty()) j.result.error = "[jit] " + j.spec->name + ": " + e.what();
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (Job& j : *jobs) {
      CompileResult& r = j.result;
      if (!r.ok() && r.error.empty()) r.error = "[jit] " + j.spec->name + ": not compiled, the process is exiting";
      r.worker = std::this_thread::get_id();
      if (r.cache_hit) ++stats_.cache_hits;
      else if (r.ok()) ++stats_.compiled;
      if (!r.ok()) ++stats_.failed;
      if (r.ok() && !r.cache_hit) {
        stats_.compile_ms.push_back(r.kernel->compile_ms);
        if (stats_.compile_ms.size() > 512) stats_.compile_ms.erase(stats_.compile_ms.begin());
      }
      inflight_.erase(j.key);
      j.promise->set_value(std::move(r));
    }
  });
  return futures;
}

std::shared_future<CompileResult> KernelCompiler::warm_up(const CompileOptions& opts) {
  auto promise = std::make_shared<std::promise<CompileResult>>();
  std::shared_future<CompileResult> f = promise->get_future().share();
  const std::string key = "warm-up|" + opts.str();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = inflight_.find(key); it != inflight_.end()) return it->second;
    if (exiting_.load()) {
      promise->set_value(CompileResult{nullptr, "[jit] warm-up: the process is exiting", {}, false, {}});
      return f;
    }
    inflight_[key] = f;  // drain_for_exit waits for it like any job
  }
  impl_->arena.enqueue([this, opts, promise, key] {
    const BackgroundWork busy;
    CompileResult r;
    try {
      CompileOptions nvrtc = opts;
      nvrtc.lto = false;
      if (!exiting_.load()) {
        const ExitSafe guard(is_global_, nvrtc, nvrtc);  // NVRTC's first use: its empty programs
      }
      if (opts.lto && lto_available() && !exiting_.load()) {
        CompileOptions linked = opts;
        linked.split = 0;  // compile_linked's flags
        const ExitSafe guard(is_global_, linked, nvrtc);
        const NvrtcOutput out = lto_warm_up(linked, &cache_.disk());
        if (!out.ok) {
          r.error = "[jit] warm-up: " + out.error;
          r.log = out.log;
        }
      }
    } catch (const std::exception& e) {
      r.error = std::string("[jit] warm-up: ") + e.what();
    }
    r.worker = std::this_thread::get_id();
    std::lock_guard<std::mutex> lock(mu_);
    inflight_.erase(key);
    promise->set_value(std::move(r));
  });
  return f;
}

namespace {
// A group of job indices in chunks of at most kMaxProgramKernels: one program (or link) each.
std::vector<std::vector<size_t>> chunks_of(const std::vector<size_t>& group) {
  std::vector<std::vector<size_t>> out;
  for (size_t b = 0; b < group.size(); b += kMaxProgramKernels)
    out.emplace_back(group.begin() + b, group.begin() + std::min(group.size(), b + kMaxProgramKernels));
  return out;
}
}  // namespace

void KernelCompiler::run_batch(std::vector<Job>& jobs, const CompileOptions& opts) {
  // Render and look up every kernel; the misses go to NVRTC, in programs of kernels that agree
  // on the program head's fast_exp.
  std::vector<size_t> misses[2], linked[2];
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& j = jobs[i];
    try {
      j.rk = render_cuda(*j.spec);
    } catch (const std::exception& e) {
      j.result.error = "[jit] " + j.spec->name + ": " + e.what();
      continue;
    }
    CompileOptions o = opts;
    o.lto = opts.lto && ir_covers(*j.spec) && lto_available();
    j.kernel_key = make_key(*j.spec, j.rk, o);
    if (auto hit = cache_.find(j.kernel_key, j.rk)) {
      j.result.kernel = hit;
      j.result.cache_hit = true;
      j.result.log = hit->log;
    } else if (o.lto) {
      linked[j.rk.head.fast_exp ? 1 : 0].push_back(i);
    } else {
      misses[j.rk.head.fast_exp ? 1 : 0].push_back(i);
    }
  }
  CompileOptions nvrtc_opts = opts;
  nvrtc_opts.lto = false;
  // Links and NVRTC programs are independent (disjoint jobs): links run beside the programs
  // on another of the arena's threads when one is free.
  tbb::task_group links;
  links.run([&] {
    for (const std::vector<size_t>& group : linked)
      for (const std::vector<size_t>& chunk : chunks_of(group)) compile_linked(jobs, chunk, opts);
  });
  for (const std::vector<size_t>& group : misses)
    for (const std::vector<size_t>& chunk : chunks_of(group)) {
      if (!compile_program(jobs, chunk, nvrtc_opts) && chunk.size() > 1)
        for (size_t i : chunk) {
          jobs[i].result = {};
          compile_program(jobs, {i}, nvrtc_opts);  // alone: its own error, the others' kernels
        }
    }
  links.wait();
  for (Job& j : jobs) {
    CompileResult& r = j.result;
    if (!r.ok()) continue;
    bool any = false;
    int spill = 0;
    for (size_t i = 0; i < r.kernel->variant_ok.size(); ++i) {
      any |= r.kernel->variant_ok[i];
      spill = std::max(spill, r.kernel->stats[i].spill_bytes);
    }
    if (!any) {
      r.error = "[jit] " + j.spec->name + ": every variant spills registers (" + std::to_string(spill) + " bytes)";
      r.kernel.reset();
    }
  }
}

bool KernelCompiler::compile_program(std::vector<Job>& jobs, const std::vector<size_t>& chunk,
                                     const CompileOptions& opts) {
  std::vector<const RenderedKernel*> kernels;
  size_t entries = 0;
  bool rows = false;
  for (size_t i : chunk) {
    kernels.push_back(&jobs[i].rk);
    entries += jobs[i].rk.variants.size();
    rows = rows || jobs[i].rk.head.rows;
  }
  // Several heavy bodies (a program of several kernels, a row kernel's plain and pipelined
  // bodies): NVRTC may work on them at once. A program of one light kernel only pays the
  // split's threads (3-7 ms locally).
  CompileOptions o = opts;
  if (entries >= 2 && (chunk.size() > 1 || rows)) o.split = split_threads(entries);
  const Job& first = jobs[chunk[0]];
  NvrtcOutput out;
  {
    const ExitSafe guard(is_global_, o, o);
    out = chunk.size() == 1 ? nvrtc_compile(first.rk.source, first.rk.prefix, o)
                            : nvrtc_compile(program_source(kernels), first.rk.prefix + "_program", o);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.programs;
  }
  if (!out.ok) {
    for (size_t i : chunk) {
      jobs[i].result.error = "[jit] " + jobs[i].spec->name + ": " + out.error;
      jobs[i].result.log = out.log;
    }
    return false;
  }
  install(jobs, chunk, out);
  return true;
}

void KernelCompiler::install(std::vector<Job>& jobs, const std::vector<size_t>& chunk, const NvrtcOutput& out) {
  auto program = std::make_shared<CompiledProgram>(out.cubin, static_cast<int>(chunk.size()));
  for (size_t i : chunk) {
    Job& j = jobs[i];
    auto k = std::make_shared<CompiledKernel>();
    k->key = j.kernel_key;
    k->rendered = std::move(j.rk);
    k->program = program;
    k->log = out.log;
    k->compile_ms = out.compile_ms / static_cast<double>(chunk.size());  // its share of the program
    for (Variant v : k->rendered.variants) {
      const std::string name = k->rendered.entry(v);
      EntryStats st{name, 0, 0};
      for (const auto& e : out.entries)
        if (e.name == name) st = e;
      k->stats.push_back(st);
      k->variant_ok.push_back(st.spill_bytes == 0);
    }
    cache_.insert(k);
    j.result.kernel = k;
    j.result.log = out.log;
  }
}

void KernelCompiler::compile_linked(std::vector<Job>& jobs, const std::vector<size_t>& chunk, const CompileOptions& opts) {
  CompileOptions o = opts;
  o.lto = true;
  o.split = 0;
  std::vector<std::string> irs;
  for (size_t i : chunk) irs.push_back(render_pointwise_ir(*jobs[i].spec, jobs[i].rk));
  std::vector<LinkInput> inputs;
  for (size_t k = 0; k < chunk.size(); ++k) inputs.push_back({&irs[k], jobs[chunk[k]].rk.prefix, custom_ops_of(*jobs[chunk[k]].spec)});
  // libNVVM's and nvJitLink's statics, like NVRTC's (Note: exit while compiling): the first
  // link has new flags (the empty programs before it take NVRTC's).
  CompileOptions warm = o;
  warm.lto = false;
  NvrtcOutput out;
  {
    const ExitSafe guard(is_global_, o, warm);
    out = lto_compile(inputs, o, jobs[chunk[0]].rk.head.fast_exp, &cache_.disk());
  }
  if (out.ok) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.linked += chunk.size();
      ++stats_.programs;
    }
    install(jobs, chunk, out);
    return;
  }
  if (chunk.size() > 1) {
    for (size_t i : chunk) compile_linked(jobs, {i}, opts);  // alone: the others still link
    return;
  }
  // Not linked (IR the library or libNVVM refuses): the same kernel from C++, keyed so; the
  // log says why.
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.link_fallbacks;
  }
  Job& j = jobs[chunk[0]];
  o.lto = false;
  j.kernel_key = make_key(*j.spec, j.rk, o);
  compile_program(jobs, chunk, o);
  j.result.log = "[jit] linking from the op library failed (" + out.error + "); compiled with NVRTC\n" + out.log +
                 "\n" + j.result.log;
}

}  // namespace livefuse::jit
