#pragma once
// TraceEvent: what the executor's hot path hands the monitor for one op call, one released
// value or one sync point. Fixed size and trivially copyable, so recording is a fill plus one
// copy into a preallocated ring: no heap allocation, no lock.
//
// [ Note -- what an event holds ]
//   call     op, its full Attrs (the planner needs the values; the structural hash is taken on
//            the monitor thread, off the hot path), dtypes, ranks and dims of inputs then
//            outputs, the ValueIds of inputs and outputs, the stream and a timestamp.
//   release  `value`: the last handle to it is gone (liveness).
//   sync     a host sync point on `stream`.
//   window_open  the matcher opened a window of deferred calls on `stream`: its calls come
//            later (runtime/trace_sink.hpp), so a release seen meanwhile came after its first op.
//   served   a plan served a window on `stream` whose calls are not reported one by one; the
//            monitor replays them from the plan's structure (the ops, their wiring, the shape
//            tuple) and these ids. `value`: the plan's signature; in_ids: [0] the stream it
//            was planned from, [1] ops, [2] the id of output 0 (the window's output f has id
//            in_ids[2] + f), [3] the ShapeTupleKey, [4] bit f: output f was released with the
//            window, [5] external slots; out_ids[0]: outputs, [1]: n + 1 when the tuple is
//            the plan's family's at n (runtime/plan.hpp), else 0; `served_ids`: the external
//            slots' ids, the first kServedIdsPerEvent of them (the others in served_ids
//            events just before, in order).
//   served_ids  more external slot ids of the served event that follows on `stream`: n_in of
//            them in `served_ids`.
// Calls that do not fit (more than kMaxEventInputs inputs, kMaxEventOutputs outputs,
// kMaxEventDims dims in all, or a dim beyond int32) are flagged kEventTruncated: the monitor
// keeps them in the stream (they still split sequences) but never puts them in a candidate.
#include <cstdint>
#include <span>
#include <type_traits>

#include "livefuse/tensor.hpp"
#include "runtime/op_call.hpp"

namespace livefuse::monitor {

inline constexpr int kMaxEventInputs = 6;
inline constexpr int kMaxEventOutputs = 4;
inline constexpr int kMaxEventDims = 32;

enum class EventKind : uint8_t { call, release, sync, window_open, served, served_ids };

inline constexpr uint8_t kEventTruncated = 1;

struct TraceEvent {
  uint64_t timestamp_ns;
  ValueId value;  // release: the value released
  uint32_t stream;
  OpId op;
  EventKind kind;
  uint8_t flags;
  uint8_t n_in;
  uint8_t n_out;
  uint8_t in_dtype[kMaxEventInputs];
  uint8_t in_rank[kMaxEventInputs];
  uint8_t out_dtype[kMaxEventOutputs];
  uint8_t out_rank[kMaxEventOutputs];
  Attrs attrs;
  ValueId in_ids[kMaxEventInputs];
  ValueId out_ids[kMaxEventOutputs];
  union {
    // Dims of input 0, input 1, ..., output 0, ... (each `rank` entries), packed.
    int32_t dims[kMaxEventDims];
    ValueId served_ids[kMaxEventDims / 2];  // served, served_ids
  };

  // Offset of input m's / output o's dims inside `dims`.
  int in_dims_offset(int m) const {
    int off = 0;
    for (int k = 0; k < m; ++k) off += in_rank[k];
    return off;
  }
  int out_dims_offset(int o) const {
    int off = in_dims_offset(n_in);
    for (int k = 0; k < o; ++k) off += out_rank[k];
    return off;
  }
};

inline constexpr int kServedIdsPerEvent = kMaxEventDims / 2;

static_assert(std::is_trivially_copyable_v<TraceEvent>,
              "TraceEvent is copied into a lock-free ring");
static_assert(sizeof(TraceEvent) <= 384, "keep TraceEvent small: it is copied once per op");

// Hot path fills (record.cpp). They never allocate and never throw.
void fill_call_event(TraceEvent& ev, const OpCall& call, std::span<const Tensor> outputs,
                     uint32_t stream_id);
void fill_release_event(TraceEvent& ev, ValueId id);
void fill_sync_event(TraceEvent& ev, uint32_t stream_id);
void fill_window_open_event(TraceEvent& ev, uint32_t stream_id);
// The header of a served event; the caller sets in_ids[2..5], out_ids[0] and served_ids.
void fill_served_event(TraceEvent& ev, uint64_t signature, uint32_t plan_stream,
                       uint32_t n_ops, uint32_t stream_id);

uint64_t now_ns();

}  // namespace livefuse::monitor
