#pragma once
// Where the executor sends what it sees (runtime -> monitor, DESIGN.md "The walk").
// The monitor installs one sink at start; the hot path does one atomic load and, when a sink
// is installed, one virtual call per op and per released value. Sinks must never block.
#include <atomic>
#include <cstdint>
#include <span>

#include "runtime/op_call.hpp"

namespace livefuse {

class TraceSink {
 public:
  virtual ~TraceSink() = default;
  // Called after `call` was validated and its outputs exist (storage may still be pending).
  virtual void on_call(const OpCall& call, std::span<const Tensor> outputs, uint32_t stream_id) = 0;
  // Called when the last handle to value `id` is released.
  virtual void on_release(ValueId id) = 0;
  // A host sync point on `stream_id` (data_ptr, host copy, synchronize, stream switch).
  virtual void on_sync(uint32_t stream_id) = 0;
};

namespace detail {
extern std::atomic<TraceSink*> g_trace_sink;
}
inline TraceSink* trace_sink() { return detail::g_trace_sink.load(std::memory_order_acquire); }
inline void set_trace_sink(TraceSink* s) {
  detail::g_trace_sink.store(s, std::memory_order_release);
}

}  // namespace livefuse
