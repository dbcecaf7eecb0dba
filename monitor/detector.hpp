#pragma once
// Detector: the monitor thread's whole state. Consumes TraceEvents one by one: per-stream
// windows (stream_window.hpp), value tracking (value_index.hpp), canonical sequences
// (canon.hpp) and their counts (structure_table.hpp). Single-threaded; the Monitor serialises
// access. Usable on its own (benchmarks, tests feed it synthetic events).
#include <memory>
#include <unordered_map>
#include <vector>

#include "monitor/canon.hpp"
#include "monitor/options.hpp"
#include "monitor/structure_table.hpp"
#include "monitor/value_index.hpp"

namespace livefuse::monitor {

class Detector final : public SegmentSink {
 public:
  explicit Detector(const MonitorOptions& o);

  void consume(const TraceEvent& ev);
  // End of input for now: every pending position of every stream is assigned.
  void flush();
  // Applies decay: hot sequences whose count fell below hot/2 go cold.
  void sweep();

  std::vector<Candidate> candidates(bool hot_only);
  std::vector<Candidate> take_emitted() { return structures_.take_emitted(); }
  std::vector<std::pair<uint64_t, uint32_t>> take_cooled() { return structures_.take_cooled(); }
  void fill(MonitorCounters& c) const;
  const MonitorOptions& options() const { return opts_; }

  void on_segment(StreamWindow& w, uint64_t begin, uint64_t end, uint64_t path_hash) override;

 private:
  struct WindowEntry {
    uint32_t stream;
    uint64_t last_active;
    std::unique_ptr<StreamWindow> w;
  };

  StreamWindow* find_window(uint32_t stream);
  StreamWindow& window(uint32_t stream);
  uint32_t epoch_of(uint32_t stream);
  void on_call_event(const TraceEvent& ev);
  void on_release_event(ValueId id);
  void on_sync_event(const TraceEvent& ev);
  void on_served_event(const TraceEvent& ev);
  bool replay_served(const TraceEvent& ev);
  void mark_use(const ValueEntry& e, ValueId id, const StreamWindow& user, uint64_t pos);

  MonitorOptions opts_;
  WindowParams wparams_;
  ValueIndex values_;
  std::vector<WindowEntry> windows_;
  size_t last_hit_ = 0;
  StructureTable structures_;
  Canonicalizer canonicalizer_;
  Canon canon_;
  std::vector<std::pair<uint32_t, ValueId>> served_ids_;  // (stream, id) of served_ids events
  std::vector<int> value_dims_;                           // replay_served's scratch
  std::vector<int> release_after_;                        // replay_served's scratch
  // replay_served's events, all built before the first is consumed: consuming one may change
  // the structure table the replay reads (a new shape tuple reallocates the tuples).
  std::vector<TraceEvent> replay_;

  uint64_t stamp_ = 0;
  uint64_t events_ = 0, releases_ = 0, syncs_ = 0, served_ = 0, replayed_ = 0;
  uint64_t served_unreplayed_ = 0;  // served windows counted without a replay (on_served_event)
  static constexpr uint64_t kReplayedServed = 256, kReplayEvery = 16;
  uint64_t window_evictions_ = 0;
  uint64_t evicted_pp_evictions_ = 0, evicted_segments_ = 0;  // of windows evicted since
};

// Structural attrs hash: Attrs::hash(), except reshape's target (see candidate.hpp).
uint64_t structural_attrs_hash(OpId op, const Attrs& a);

}  // namespace livefuse::monitor
