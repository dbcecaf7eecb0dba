// The recording half of the monitor: runs on the user's thread for every op, so it only
// copies fields out of the OpCall and the TensorImpls (no virtual calls, no allocation).
#include <chrono>
#include <limits>

#include "monitor/trace_event.hpp"

namespace livefuse::monitor {

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

namespace {

// Appends `t`'s rank/dtype/dims; returns false when they do not fit the event.
inline bool put_tensor(TraceEvent& ev, const TensorImpl* t, int* nd, uint8_t* dtype, uint8_t* rank,
                       ValueId* id) {
  if (t == nullptr) {
    *dtype = 0;
    *rank = 0;
    *id = 0;
    return true;
  }
  *id = t->id;
  *dtype = static_cast<uint8_t>(t->dtype);
  const int r = t->shape.rank;
  *rank = static_cast<uint8_t>(r);
  if (*nd + r > kMaxEventDims) {
    *rank = 0;
    return false;
  }
  bool ok = true;
  for (int k = 0; k < r; ++k) {
    const int64_t d = t->shape.v[k];
    ok &= d <= std::numeric_limits<int32_t>::max();
    ev.dims[*nd + k] = static_cast<int32_t>(d);
  }
  *nd += r;
  return ok;
}

}  // namespace

void fill_call_event(TraceEvent& ev, const OpCall& call, std::span<const Tensor> outputs,
                     uint32_t stream_id) {
  ev.kind = EventKind::call;
  ev.timestamp_ns = now_ns();
  ev.value = 0;
  ev.stream = stream_id;
  ev.op = call.op;
  ev.attrs = call.attrs;
  uint8_t flags = 0;
  const size_t ni = call.inputs.size();
  const size_t no = outputs.size();
  if (ni > kMaxEventInputs || no > kMaxEventOutputs) flags |= kEventTruncated;
  ev.n_in = static_cast<uint8_t>(ni < kMaxEventInputs ? ni : kMaxEventInputs);
  ev.n_out = static_cast<uint8_t>(no < kMaxEventOutputs ? no : kMaxEventOutputs);
  int nd = 0;
  for (int m = 0; m < ev.n_in; ++m)
    if (!put_tensor(ev, call.inputs[m].impl(), &nd, &ev.in_dtype[m], &ev.in_rank[m], &ev.in_ids[m]))
      flags |= kEventTruncated;
  for (int o = 0; o < ev.n_out; ++o)
    if (!put_tensor(ev, outputs[o].impl(), &nd, &ev.out_dtype[o], &ev.out_rank[o], &ev.out_ids[o]))
      flags |= kEventTruncated;
  ev.flags = flags;
}

void fill_release_event(TraceEvent& ev, ValueId id) {
  ev.kind = EventKind::release;
  ev.value = id;
  ev.stream = 0;
  ev.n_in = ev.n_out = 0;
  ev.flags = 0;
}

void fill_sync_event(TraceEvent& ev, uint32_t stream_id) {
  ev.kind = EventKind::sync;
  ev.timestamp_ns = now_ns();
  ev.value = 0;
  ev.stream = stream_id;
  ev.n_in = ev.n_out = 0;
  ev.flags = 0;
}

void fill_window_open_event(TraceEvent& ev, uint32_t stream_id) {
  ev.kind = EventKind::window_open;
  ev.value = 0;
  ev.stream = stream_id;
  ev.n_in = ev.n_out = 0;
  ev.flags = 0;
}

void fill_served_event(TraceEvent& ev, uint64_t signature, uint32_t plan_stream, uint32_t n_ops,
                       uint32_t stream_id) {
  ev.kind = EventKind::served;
  ev.timestamp_ns = now_ns();
  ev.value = signature;
  ev.stream = stream_id;
  ev.in_ids[0] = plan_stream;
  ev.in_ids[1] = n_ops;
  for (int k = 2; k < kMaxEventInputs; ++k) ev.in_ids[k] = 0;  // no output ids: not replayable
  ev.out_ids[0] = ev.out_ids[1] = 0;
  ev.n_in = ev.n_out = 0;
  ev.flags = 0;
}

}  // namespace livefuse::monitor
