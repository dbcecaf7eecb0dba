#pragma once
// The monitor: records every op call the executor reports (TraceSink) into per-thread
// lock-free queues and, on its own thread, finds hot op sequences (detector.hpp) and hands
// them to the planner as Candidates (candidate.hpp).
//
// Hot path: one thread-local load, a fill of a fixed-size TraceEvent and a push into the
// calling thread's own boost::lockfree::spsc_queue. A full queue drops the event and counts
// it; nothing blocks, nothing allocates (after a thread's first event, which creates its queue).
//
// Lifetime: Monitor::instance() is created on first use and intentionally never destroyed.
// Its thread is stopped by an std::atexit handler registered when it starts, before static
// destructors run; user threads that still record after that push into queues that stay
// valid (leaked with the monitor) or are dropped. A destroyed singleton would leave the
// executor, or a thread still running ops at exit, calling into freed memory.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "monitor/candidate.hpp"
#include "monitor/options.hpp"
#include "monitor/trace_event.hpp"
#include "runtime/trace_sink.hpp"

namespace livefuse::monitor {

class Detector;
struct Producer;

class Monitor final : public TraceSink {
 public:
  static Monitor& instance();

  // Starts the thread and installs this as the trace sink (idempotent).
  void start();
  // Stops the thread and uninstalls the sink (idempotent). Queued events stay queued.
  void stop();
  bool running() const { return running_.load(std::memory_order_acquire); }

  // TraceSink (any thread; never blocks).
  void on_call(const OpCall& call, std::span<const Tensor> outputs, uint32_t stream_id) override;
  void on_window_open(uint32_t stream_id) override;
  // One `served` event for the window (trace_event.hpp) when its shape tuple is known (see
  // Plan::shape_tuples) and its output ids are in order; otherwise its calls one by one
  // (a new tuple: kReportsOfNewShape times per plan and tuple, then `served` events).
  void on_served(const Plan& plan, const Window& w) override;
  void on_release(ValueId id) override;
  void on_sync(uint32_t stream_id) override;

  // Windows of a shape tuple the plan was not made with that are reported call by call: enough
  // for the detector to count the tuple (it counts the third occurrence of a stretch it has not
  // seen in a while: the first makes program points, the second registers their path).
  static constexpr int kReportsOfNewShape = 4;

  // Waits until every event pushed before the call has been consumed and the candidates it
  // gave delivered to the consumer (not from a consumer callback: that returns false at once);
  // with `flush`, then
  // assigns pending positions too (treats now as the end of the input: tests, inspection).
  // False on timeout (e.g. paused, or not running).
  bool drain(std::chrono::milliseconds timeout = std::chrono::seconds(30), bool flush = true);
  // Drains, then forgets everything detected and zeroes the counters; `o` applies from now
  // (queue_capacity: to threads whose first event comes after this).
  void reset(const MonitorOptions& o);
  void reset();  // with MonitorOptions::from_config()

  // Candidates (hot ones, or every tracked sequence), counts decayed to now.
  std::vector<Candidate> candidates(bool hot_only = true) const;
  MonitorCounters counters() const;
  MonitorOptions options() const;

  // The planner. Must stay valid until replaced; set_consumer(nullptr) returns only once no
  // call into the previous consumer is running.
  void set_consumer(CandidateConsumer* c);

  // Test hook: while paused the thread consumes nothing (queues fill, then drop).
  void pause_for_testing(bool paused);

 private:
  Monitor();
  ~Monitor() override = default;
  Producer* attach_producer();
  Producer* producer();
  // Whether this event of `p`'s thread is recorded (quiet recording: monitor.cpp, the note).
  bool records(Producer* p);
  void push(Producer* p);
  // Known: one of the plan's tuples, or of its family (then *family_n is its n).
  bool knows_shape(const Plan& plan, uint64_t tuple_key, std::span<const int64_t> tuple,
                   int64_t* family_n);
  void run();
  size_t consume_once();
  void deliver(std::vector<Candidate>& emitted, std::vector<std::pair<uint64_t, uint32_t>>& cooled);
  void reap_retired();
  uint64_t produced_total() const;
  uint64_t dropped_total() const;
  static void stop_at_exit();

  mutable std::mutex state_mu_;  // detector_, options_, baselines
  std::unique_ptr<Detector> detector_;
  MonitorOptions options_;
  uint64_t base_produced_ = 0, base_drops_ = 0, base_batches_ = 0;

  mutable std::mutex producers_mu_;
  std::vector<Producer*> producers_;
  std::atomic<uint64_t> producers_gen_{0};
  std::atomic<uint32_t> queue_capacity_{4096};
  std::atomic<uint32_t> max_producers_{256};
  uint64_t retired_pushed_ = 0, retired_dropped_ = 0;  // of reaped producers
  std::atomic<uint64_t> orphan_drops_{0};              // no queue could be used

  // Monitor thread only: its copy of producers_ and its batch buffer (members, not statics,
  // so nothing the thread uses is destroyed at exit).
  std::vector<Producer*> local_;
  uint64_t local_gen_ = ~0ull;
  std::vector<TraceEvent> batch_;

  std::atomic<uint64_t> consumed_{0};
  // consumed_ as of the last delivery to the consumer: drain() waits for this one, so that what
  // follows a drain (a wait for the planner to be idle) sees the candidates delivered.
  std::atomic<uint64_t> delivered_{0};
  std::atomic<uint64_t> batches_{0};
  std::atomic<bool> quiet_{false};           // steady state: record probes only
  std::atomic<uint64_t> quiet_periods_{0};   // times the monitor went quiet
  std::atomic<bool> settle_reset_{false};    // reset(): the monitor thread restarts its count
  uint64_t settled_events_ = 0;              // monitor thread: events since something new got hot
  // Monitor thread: the (structure, shape mix) pairs that turned hot so far (learns_something).
  std::unordered_set<uint64_t> known_;
  static constexpr size_t kMaxKnown = 4096;
  bool learns_something(const std::vector<Candidate>& emitted);
  std::atomic<bool> running_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> paused_{false};
  std::atomic<bool> wake_{false};
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};
  std::mutex lifecycle_mu_;
  bool atexit_registered_ = false;

  std::mutex consumer_mu_;
  CandidateConsumer* consumer_ = nullptr;

  // (plan id, shape tuple hash) -> windows reported call by call (bounded: cleared when full).
  struct PlanTupleHash {
    size_t operator()(const std::pair<uint64_t, uint64_t>& k) const {
      return k.first * 0x9e3779b97f4a7c15ull ^ k.second;
    }
  };
  std::mutex new_shapes_mu_;
  std::unordered_map<std::pair<uint64_t, uint64_t>, int, PlanTupleHash> new_shapes_;
};

// Starts the monitor once unless LIVEFUSE=off. The executor calls it; cheap after the first call.
void ensure_started();

}  // namespace livefuse::monitor
