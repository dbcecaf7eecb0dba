// The report's "cuda.attention" counters: how many of launch_attention's calls each kernel took
// (kernels/cuda/attention_kernels.hpp). A decode step's attention takes the tensor-core kernel
// only with LIVEFUSE_DECODE_TC=1 and where it fits, the streaming one from
// LIVEFUSE_DECODE_STREAM_KEYS keys read on; these say whether a run's steps did.
#include "kernels/cuda/attention_kernels.hpp"
#include "runtime/inspect_registry.hpp"

namespace livefuse::cuda {
namespace {

// Registered when the library loads (the registry is a function-local static: no order issue).
const bool g_registered = [] {
  register_counter_source("cuda.attention", [](CounterSink& sink) {
    const AttentionLaunchCounts c = attention_launch_counts();
    sink.add("decode_tc", c.decode_tc);
    sink.add("decode_fma", c.decode_fma);
    sink.add("mma", c.mma);
    sink.add("general", c.general);
    sink.add("decode_stream", c.decode_stream);
    sink.add("early_kv", c.early_kv);
    sink.add("prefill_f32", c.prefill_f32);
  });
  return true;
}();

}  // namespace
}  // namespace livefuse::cuda
