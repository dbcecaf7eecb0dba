#pragma once
// Where the executor sends what it sees (runtime -> monitor, DESIGN.md "The walk").
// The monitor installs one sink at start; the hot path does one atomic load and, when a sink
// is installed, one virtual call per eager op, per plan window and per released value. Sinks
// must never block.
//
// [ Note -- what a sink is told about deferred calls ]
// A call the matcher defers is not reported when it is made: on_window_open marks where its
// window began, and the window is reported when it ends -- call by call (on_call) when it is
// flushed eagerly, or as a whole (on_served) when a plan served it. So a plan that serves
// costs the sink one report per window, not one per op. on_release is called only for values
// that appeared in a reported call (TensorImpl::reported): nobody else can know their ids.
#include <atomic>
#include <cstdint>
#include <span>

#include "runtime/op_call.hpp"

namespace livefuse {

class Plan;
struct Window;

class TraceSink {
 public:
  virtual ~TraceSink() = default;
  // Called after `call` was validated and its outputs exist (storage may still be pending).
  // Use report_call (below), which marks the values as reported.
  virtual void on_call(const OpCall& call, std::span<const Tensor> outputs, uint32_t stream_id) = 0;
  // A window of deferred calls opened on `stream_id` (see the note).
  virtual void on_window_open(uint32_t stream_id) { (void)stream_id; }
  // `plan` ran the complete window `w` (calls in order, every needed output bound). The default
  // reports each call through on_call, as if the window had run eagerly.
  virtual void on_served(const Plan& plan, const Window& w);
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

// Reports one call: its inputs and outputs become values the sink knows (their releases are
// reported from now on).
inline void report_call(TraceSink& sink, const OpCall& call, std::span<const Tensor> outputs,
                        uint32_t stream_id) {
  for (const Tensor& t : call.inputs) t.impl()->mark_reported();
  for (const Tensor& t : outputs) t.impl()->mark_reported();
  sink.on_call(call, outputs, stream_id);
}

}  // namespace livefuse
