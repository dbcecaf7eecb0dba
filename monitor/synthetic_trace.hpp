#pragma once
// EventSynth: builds TraceEvents the way the executor would report them, without running ops.
// For the detector's tests and the monitor benchmark (which must measure detection alone).
#include <unordered_map>
#include <utility>
#include <vector>

#include "monitor/trace_event.hpp"

namespace livefuse::monitor {

class EventSynth {
 public:
  explicit EventSynth(uint32_t stream = 0) : stream_(stream) {}

  void set_stream(uint32_t s) { stream_ = s; }
  std::vector<TraceEvent>& events() { return events_; }

  // A value from outside the traced code (a weight, an input).
  ValueId value(const Shape& s, DType dt = DType::f32) {
    const ValueId id = next_++;
    shapes_[id] = {s, dt};
    return id;
  }

  // One op call with inputs `ins` and one output of shape `out`; returns the output's id.
  ValueId call(OpId op, std::initializer_list<ValueId> ins, const Shape& out, Attrs a = {},
               DType out_dtype = DType::f32) {
    TraceEvent ev{};
    ev.kind = EventKind::call;
    ev.timestamp_ns = ++clock_;
    ev.stream = stream_;
    ev.op = op;
    ev.attrs = a;
    int nd = 0;
    for (ValueId id : ins) {
      const auto& [s, dt] = shapes_.at(id);
      const int m = ev.n_in++;
      ev.in_ids[m] = id;
      ev.in_dtype[m] = static_cast<uint8_t>(dt);
      ev.in_rank[m] = static_cast<uint8_t>(s.rank);
      for (int k = 0; k < s.rank; ++k) ev.dims[nd++] = static_cast<int32_t>(s[k]);
    }
    const ValueId out_id = value(out, out_dtype);
    ev.n_out = 1;
    ev.out_ids[0] = out_id;
    ev.out_dtype[0] = static_cast<uint8_t>(out_dtype);
    ev.out_rank[0] = static_cast<uint8_t>(out.rank);
    for (int k = 0; k < out.rank; ++k) ev.dims[nd++] = static_cast<int32_t>(out[k]);
    events_.push_back(ev);
    return out_id;
  }

  void release(ValueId id) {
    TraceEvent ev{};
    ev.kind = EventKind::release;
    ev.value = id;
    events_.push_back(ev);
    shapes_.erase(id);
  }

  void sync() {
    TraceEvent ev{};
    ev.kind = EventKind::sync;
    ev.stream = stream_;
    ev.timestamp_ns = ++clock_;
    events_.push_back(ev);
  }

 private:
  uint32_t stream_;
  ValueId next_ = 1;
  uint64_t clock_ = 0;
  std::vector<TraceEvent> events_;
  std::unordered_map<ValueId, std::pair<Shape, DType>> shapes_;
};

}  // namespace livefuse::monitor
