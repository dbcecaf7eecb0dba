#include "planner/counter_sources.hpp"

#include <cstdint>

#include "kernels/jit/kernel_compiler.hpp"
#include "planner/fused_plan.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/plan.hpp"
#if LIVEFUSE_HAS_CUDA
#include "graphs/cuda_graph.hpp"
#endif

namespace livefuse::planner {

void register_kernel_cache_counters() {
  register_counter_source("kernel_cache", [](CounterSink& sink) {
    jit::KernelCompiler& k = jit::KernelCompiler::global();
    const jit::CompilerStats s = k.stats();
    const jit::CacheCounters c = k.cache().counters();
    sink.add("compiled", s.compiled);
    sink.add("compile_failed", s.failed);
    sink.add("deduplicated", s.deduplicated);
    // NVRTC programs and links made, and of the kernels, how many were linked from the op
    // library (LIVEFUSE_JIT=lto) and how many it refused (compiled with NVRTC instead).
    sink.add("programs", s.programs);
    sink.add("linked", s.linked);
    sink.add("link_fallbacks", s.link_fallbacks);
    sink.add("memory_hits", c.memory_hits);
    sink.add("memory_misses", c.memory_misses);
    sink.add("memory_evictions", c.memory_evictions);
    sink.add("disk_hits", c.disk_hits);
    sink.add("disk_misses", c.disk_misses);
    sink.add("disk_writes", c.disk_writes);
    sink.add("disk_rejected", c.disk_rejected);
    sink.add("disk_evictions", c.disk_evictions);
  });
}

void register_graph_counters() {
  register_counter_source("graphs", [](CounterSink& sink) {
    uint64_t sum[6] = {0, 0, 0, 0, 0, 0};
    for (const auto& p : PlanTable::get().plans()) {
      if (const auto* f = dynamic_cast<const FusedPlan*>(p.get())) {
        uint64_t c[6];
        f->graph_counters(c);
        for (int i = 0; i < 6; ++i) sum[i] += c[i];
      }
    }
    sink.add("replays", sum[0]);
    sink.add("captures", sum[1]);
    sink.add("instantiations", sum[2]);
    sink.add("updates", sum[3]);
    sink.add("evictions", sum[4]);
    sink.add("captures_deferred", sum[5]);  // graphs/capture_budget.hpp
#if LIVEFUSE_HAS_CUDA
    const graphs::CaptureCounts cc = graphs::capture_counts();
    sink.add("captures_abandoned", cc.abandoned);         // a step threw: the window ran eagerly
    sink.add("captures_holding_memory", cc.held_memory);  // the plan launches directly since
#endif
  });
}

}  // namespace livefuse::planner
