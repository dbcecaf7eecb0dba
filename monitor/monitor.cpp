#include "monitor/monitor.hpp"

#include <algorithm>
#include <boost/lockfree/spsc_queue.hpp>
#include <cstdlib>
#include <mutex>

#if defined(__linux__)
#include <pthread.h>
#endif

#include "livefuse/config.hpp"
#include "monitor/detector.hpp"
#include "monitor/hashing.hpp"
#include "monitor/trace_event.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/plan.hpp"

namespace livefuse::monitor {

// One per recording thread: only that thread pushes, only the monitor thread pops.
struct Producer {
  explicit Producer(size_t capacity) : queue(capacity) {}
  boost::lockfree::spsc_queue<TraceEvent> queue;
  // Written by the owner only (load + store, no read-modify-write on the hot path).
  alignas(64) std::atomic<uint64_t> pushed{0};
  std::atomic<uint64_t> dropped{0};
  std::atomic<bool> retired{false};  // the owner thread has exited
  std::atomic<uint64_t> quiet_skipped{0};  // events not recorded while the monitor was quiet
  uint64_t quiet_tick = 0;                 // the owner's events seen while quiet
  TraceEvent scratch{};              // the event being filled (keeps it off the user's stack)
  // on_served's shape tuple. Here, not in a thread_local: windows still complete from other
  // thread_local destructors at thread exit, after such a vector would have been destroyed.
  std::vector<int64_t> tuple;
};

namespace {

constexpr size_t kBatch = 256;  // events taken from one queue per round
constexpr int kNapUs = 50;      // the shortest nap between rounds ...
constexpr int kMaxNapUs = 4000;  // ... and the longest
constexpr size_t kFewEvents = 256;  // a nap that let in fewer: the next one doubles
constexpr int kNaps = 20;       // empty rounds before the 1 ms idle poll
// Quiet recording (Monitor::records): after kSettleEvents events that made no new sequence hot,
// each thread records one stretch of 2^kProbeLog2 events in kProbeEvery.
constexpr uint64_t kSettleEvents = uint64_t{1} << 14;
constexpr int kProbeLog2 = 12;
constexpr uint64_t kProbeEvery = 8;

thread_local Producer* t_producer = nullptr;
thread_local bool t_gone = false;  // this thread's destructors ran: record nothing more

// Marks the thread's queue retired when the thread exits; the monitor thread frees it once it
// has consumed what is left.
struct ProducerRetirer {
  Producer* p = nullptr;
  ~ProducerRetirer() {
    if (p) p->retired.store(true, std::memory_order_release);
    t_producer = nullptr;
    t_gone = true;
  }
};
thread_local ProducerRetirer t_retirer;

}  // namespace

MonitorOptions MonitorOptions::from_config() {
  const Config& cfg = config();
  MonitorOptions o;
  o.hot = std::max(2, cfg.hot);
  o.max_segment = std::clamp(cfg.max_segment, 2, 1024);
  o.seam = cfg.seam;
  o.settle = cfg.settle;
  o.window = std::max<uint32_t>(4096, 8u * static_cast<uint32_t>(o.max_segment));
  return o;
}

Monitor& Monitor::instance() {
  // Leaked on purpose (see monitor.hpp): user threads and the executor may call into it
  // during and after static destruction.
  static Monitor* m = new Monitor();
  return *m;
}

Monitor::Monitor() : options_(MonitorOptions::from_config()) {
  detector_ = std::make_unique<Detector>(options_);
  queue_capacity_ = options_.queue_capacity;
  max_producers_ = options_.max_producers;
}

void Monitor::stop_at_exit() { instance().stop(); }

void Monitor::start() {
  std::lock_guard<std::mutex> lk(lifecycle_mu_);
  if (running_.load()) return;
  stop_.store(false);
  thread_ = std::thread([this] { run(); });
  running_.store(true, std::memory_order_release);
  set_trace_sink(this);
  if (!atexit_registered_) {
    // Runs before the destructors of statics constructed before this point (the runtime's
    // registries among them), so the thread never sees them destroyed.
    std::atexit(&Monitor::stop_at_exit);
    atexit_registered_ = true;
  }
}

void Monitor::stop() {
  std::lock_guard<std::mutex> lk(lifecycle_mu_);
  if (!running_.load()) return;
  if (trace_sink() == this) set_trace_sink(nullptr);
  stop_.store(true, std::memory_order_release);
  {
    std::lock_guard<std::mutex> w(wake_mu_);
    wake_.store(true);
  }
  wake_cv_.notify_all();
  if (thread_.joinable()) {
    // exit() called from a consumer callback runs this on the monitor thread itself.
    if (thread_.get_id() == std::this_thread::get_id())
      thread_.detach();
    else
      thread_.join();
  }
  running_.store(false, std::memory_order_release);
}

// ---- hot path -------------------------------------------------------------------------------

Producer* Monitor::attach_producer() {
  if (t_gone || stop_.load(std::memory_order_relaxed)) {
    orphan_drops_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  std::lock_guard<std::mutex> lk(producers_mu_);
  if (producers_.size() >= max_producers_.load()) {
    orphan_drops_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  auto* p = new Producer(queue_capacity_.load());
  producers_.push_back(p);
  producers_gen_.fetch_add(1, std::memory_order_release);
  t_retirer.p = p;
  t_producer = p;
  return p;
}

inline void Monitor::push(Producer* p) {
  if (p->queue.push(p->scratch))
    p->pushed.store(p->pushed.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  else
    p->dropped.store(p->dropped.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

inline Producer* Monitor::producer() {
  Producer* p = t_producer;
  if (p == nullptr) [[unlikely]]
    p = attach_producer();
  return p;
}

// [ Note -- quiet recording ]
// A program in its steady state -- every hot sequence planned and decided, nothing new turning
// hot for kSettleEvents events (learns_something) -- teaches the monitor nothing new, yet
// recording every call costs its thread a fill and a push, and the monitor thread the detection
// work, which on a small machine competes with the program itself (on 2 cores the CPU decoder
// loop ran 20% slower under LIVEFUSE=trace than off). So the monitor then goes quiet: each thread records
// one stretch of 4096 events in eight -- probes, contiguous, so a new loop still shows its
// repeats within one -- and the first probe that makes a new sequence hot ends the quiet.
// What a probe cuts at its edges is what a full queue drops: the detector copes; a value whose
// release falls outside the probes looks alive to it, which errs on the side of keeping it in
// memory. Plans are not touched: they keep serving, and their structures, whose counts decay by
// the stream's own recorded events, stay hot.
//
// What ends the settling (and the quiet): a sequence turning hot that was never hot before with
// these shapes. A known one coming back -- the prefill of every generation, the phases of a
// program that alternates between models -- and any sequence turning cold is the steady state
// of a periodic program, not news: it once kept a decode loop from ever going quiet.
bool Monitor::learns_something(const std::vector<Candidate>& emitted) {
  bool news = false;
  for (const Candidate& c : emitted) {
    uint64_t k = hash_combine(c.signature, c.stream);
    uint64_t tuples = 0;  // order-independent: the same shapes in another order are the same mix
    for (const ShapeTuple& t : c.shapes.tuples) tuples += ShapeTupleKey::of(t.dims) * 0x9e3779b97f4a7c15ull;
    k = hash_combine(hash_combine(k, tuples), c.shapes.family.defined());
    if (known_.size() >= kMaxKnown) known_.clear();  // bounded: forgetting only costs a reset
    news |= known_.insert(k).second;
  }
  return news;
}

bool Monitor::records(Producer* p) {
  if (!quiet_.load(std::memory_order_relaxed)) return true;
  if ((p->quiet_tick++ >> kProbeLog2) % kProbeEvery == 0) return true;
  p->quiet_skipped.store(p->quiet_skipped.load(std::memory_order_relaxed) + 1,
                         std::memory_order_relaxed);
  return false;
}

void Monitor::on_call(const OpCall& call, std::span<const Tensor> outputs, uint32_t stream_id) {
  Producer* p = producer();
  if (p == nullptr || !records(p)) return;
  fill_call_event(p->scratch, call, outputs, stream_id);
  push(p);
}

void Monitor::on_window_open(uint32_t stream_id) {
  Producer* p = producer();
  if (p == nullptr || !records(p)) return;
  fill_window_open_event(p->scratch, stream_id);
  push(p);
}

bool Monitor::knows_shape(const Plan& plan, uint64_t tuple_key, std::span<const int64_t> tuple,
                          int64_t* family_n) {
  for (uint64_t known : plan.shape_tuples)
    if (known == tuple_key) return true;
  if (const std::optional<int64_t> n = plan.family.member(tuple)) {
    *family_n = *n;
    return true;
  }
  std::lock_guard<std::mutex> lk(new_shapes_mu_);
  if (new_shapes_.size() >= 4096) new_shapes_.clear();  // bounded; a tuple may be reported again
  return ++new_shapes_[{plan.id, tuple_key}] > kReportsOfNewShape;
}

void Monitor::on_served(const Plan& plan, const Window& w) {
  // No producer (this thread's destructors ran): nothing of this thread is recorded any more,
  // call by call or not.
  Producer* p = producer();
  if (p == nullptr || !records(p)) return;
  // The tuple as the canonicaliser lays it out: external slots, then every op's outputs.
  // A plan with a family also needs the tuple itself: the producer's buffer, grown to what the
  // window's tensors can hold (never shrunk), written through a pointer with the key hashed on
  // the way. Pushing each entry back and hashing them in a second pass cost 12% more on a
  // 10-call window (callgrind, bench/RESULTS.md, session 58); the saving is per entry.
  size_t n_out = 0;
  for (const TensorList& outs : w.outputs) n_out += outs.size();
  const size_t most = (w.externals.size() + n_out) * kMaxDims;
  if (p->tuple.size() < most) p->tuple.resize(most);
  int64_t* at = p->tuple.data();
  ShapeTupleKey hk;
  const auto put = [&](const Shape& s) {
    for (int d = 0; d < s.rank; ++d) hk.add(*at++ = s.v[d]);
  };
  for (const Tensor& e : w.externals) put(e.impl()->shape);
  for (const TensorList& outs : w.outputs)
    for (const Tensor& t : outs) put(t.impl()->shape);
  const std::span<const int64_t> tuple(p->tuple.data(), at);
  const uint64_t key = hk.h;
  const bool replayable = w.ids_begin != 0 && n_out <= 64;
  int64_t family_n = -1;
  if (!replayable || !knows_shape(plan, key, tuple, &family_n))
    return TraceSink::on_served(plan, w);
  const size_t ne = w.externals.size();
  for (size_t e = kServedIdsPerEvent; e < ne; e += kServedIdsPerEvent) {
    TraceEvent& ev = p->scratch;
    ev.kind = EventKind::served_ids;
    ev.stream = w.stream_id;
    ev.n_in = static_cast<uint8_t>(std::min<size_t>(kServedIdsPerEvent, ne - e));
    ev.n_out = 0;
    ev.flags = 0;
    for (int k = 0; k < ev.n_in; ++k) ev.served_ids[k] = w.externals[e + k].impl()->id;
    push(p);
  }
  TraceEvent& ev = p->scratch;
  fill_served_event(ev, plan.signature, plan.stream, static_cast<uint32_t>(w.calls.size()),
                    w.stream_id);
  const uint64_t all = n_out == 64 ? ~uint64_t{0} : (uint64_t{1} << n_out) - 1;
  ev.in_ids[2] = w.ids_begin;
  ev.in_ids[3] = key;
  ev.in_ids[4] = all & ~w.held;
  ev.in_ids[5] = ne;
  ev.out_ids[0] = n_out;
  ev.out_ids[1] = static_cast<ValueId>(family_n + 1);
  for (size_t e = 0; e < ne && e < kServedIdsPerEvent; ++e)
    ev.served_ids[e] = w.externals[e].impl()->id;
  push(p);
  // The monitor knows these values now: their releases are reported from here on (the
  // outputs released with the window were counted in the event).
  for (const Tensor& e : w.externals) e.impl()->mark_reported();
  size_t f = 0;
  for (const TensorList& outs : w.outputs)
    for (const Tensor& t : outs)
      if (w.held >> f++ & 1) t.impl()->mark_reported();
}

void Monitor::on_release(ValueId id) {
  Producer* p = producer();
  if (p == nullptr || !records(p)) return;
  fill_release_event(p->scratch, id);
  push(p);
}

void Monitor::on_sync(uint32_t stream_id) {
  Producer* p = producer();
  if (p == nullptr || !records(p)) return;
  fill_sync_event(p->scratch, stream_id);
  push(p);
}

// ---- the monitor thread ------------------------------------------------------------------------

size_t Monitor::consume_once() {
  if (const uint64_t gen = producers_gen_.load(std::memory_order_acquire); gen != local_gen_) {
    std::lock_guard<std::mutex> lk(producers_mu_);
    local_ = producers_;
    local_gen_ = producers_gen_.load();
  }
  size_t total = 0;
  uint64_t consumed = 0;
  std::vector<Candidate> emitted;
  std::vector<std::pair<uint64_t, uint32_t>> cooled;
  {
    std::lock_guard<std::mutex> lk(state_mu_);
    for (Producer* p : local_) {
      const size_t n = p->queue.pop(batch_.data(), kBatch);
      for (size_t k = 0; k < n; ++k) detector_->consume(batch_[k]);
      total += n;
    }
    // Published under the lock: drain() then sees the detector with these events applied.
    consumed = consumed_.fetch_add(total, std::memory_order_release) + total;
    emitted = detector_->take_emitted();
    cooled = detector_->take_cooled();
  }
  if (total) batches_.fetch_add(1, std::memory_order_relaxed);
  const bool was_reset = settle_reset_.exchange(false, std::memory_order_relaxed);
  if (was_reset) known_.clear();  // reset(): a new detector, nothing known
  if (learns_something(emitted) || was_reset) {
    settled_events_ = 0;
    quiet_.store(false, std::memory_order_relaxed);
  } else if ((settled_events_ += total) >= kSettleEvents && !quiet_.load(std::memory_order_relaxed)) {
    quiet_.store(true, std::memory_order_relaxed);
    quiet_periods_.fetch_add(1, std::memory_order_relaxed);
  }
  deliver(emitted, cooled);
  if (total) delivered_.store(consumed, std::memory_order_release);
  return total;
}

void Monitor::reap_retired() {
  std::lock_guard<std::mutex> lk(producers_mu_);
  bool changed = false;
  for (size_t k = 0; k < producers_.size();) {
    Producer* p = producers_[k];
    if (p->retired.load(std::memory_order_acquire) && p->queue.read_available() == 0) {
      retired_pushed_ += p->pushed.load();
      retired_dropped_ += p->dropped.load();
      producers_.erase(producers_.begin() + static_cast<std::ptrdiff_t>(k));
      delete p;
      changed = true;
    } else {
      ++k;
    }
  }
  if (changed) {
    producers_gen_.fetch_add(1, std::memory_order_release);
    local_ = producers_;
    local_gen_ = producers_gen_.load();
  }
}

void Monitor::run() {
  thread_id_.store(std::this_thread::get_id());
#if defined(__linux__)
  pthread_setname_np(pthread_self(), "lf-monitor");
#endif
  batch_.resize(kBatch);
  int idle = 0, nap_us = kNapUs;
  size_t since_nap = 0;  // events taken since the last nap
  // A nap on the wake-up condition: drain() (a test, a sync point waiting on the monitor) ends
  // it at once and the naps start short again.
  const auto nap = [&] {
    std::unique_lock<std::mutex> lk(wake_mu_);
    if (wake_cv_.wait_for(lk, std::chrono::microseconds(nap_us),
                          [this] { return wake_.load() || stop_.load(); })) {
      wake_.store(false);
      nap_us = kNapUs;
    }
  };
  while (!stop_.load(std::memory_order_acquire)) {
    const size_t n = paused_.load(std::memory_order_relaxed) ? 0 : consume_once();
    since_nap += n;
    if (n >= kBatch) {  // a queue gave a full batch: drain on
      idle = 0;
      continue;
    }
    // Naps instead of spinning: a monitor that spins on the queues takes a core while the
    // program runs ops, and on an SMT machine half the throughput of the core next to it. Each
    // nap is sized by what the last one let in: it doubles while fewer than kFewEvents came and
    // halves past a quarter of a queue (MonitorOptions::queue_capacity), so a busy program is
    // looked at every few milliseconds, in large rounds. Every wake-up preempts one of the
    // program's threads where its kernels keep the cores busy: on the 2-core CPU backend a
    // decode loop (470,000 calls a second) ran 20-25% slower recorded than not with naps reset
    // to 50 us on every busy round, 11% with this.
    if (since_nap > 0) {
      idle = 0;
      if (since_nap < kFewEvents)
        nap_us = std::min(2 * nap_us, kMaxNapUs);
      else if (since_nap > queue_capacity_.load(std::memory_order_relaxed) / 4)
        nap_us = std::max(nap_us / 2, kNapUs);
      since_nap = 0;
      nap();
      continue;
    }
    if (++idle < kNaps) {
      nap_us = std::min(2 * nap_us, kMaxNapUs);
      nap();
      continue;
    }
    reap_retired();
    // Idle: poll every millisecond (producers never notify: that would cost them a syscall).
    std::unique_lock<std::mutex> lk(wake_mu_);
    wake_cv_.wait_for(lk, std::chrono::milliseconds(1),
                      [this] { return wake_.load() || stop_.load(); });
    wake_.store(false);
    idle = kNaps / 2;
  }
}

void Monitor::deliver(std::vector<Candidate>& emitted,
                      std::vector<std::pair<uint64_t, uint32_t>>& cooled) {
  if (emitted.empty() && cooled.empty()) return;
  std::lock_guard<std::mutex> lk(consumer_mu_);
  if (consumer_ == nullptr) return;
  // A throwing planner must not take the monitor thread down with it.
  for (const Candidate& c : emitted) try {
      consumer_->on_candidate(c);
    } catch (...) {
    }
  for (const auto& [sig, stream] : cooled) try {
      consumer_->on_candidate_cold(sig, stream);
    } catch (...) {
    }
}

// ---- control ------------------------------------------------------------------------------

uint64_t Monitor::produced_total() const {
  std::lock_guard<std::mutex> lk(producers_mu_);
  uint64_t n = retired_pushed_;
  for (const Producer* p : producers_) n += p->pushed.load(std::memory_order_acquire);
  return n;
}

uint64_t Monitor::dropped_total() const {
  std::lock_guard<std::mutex> lk(producers_mu_);
  uint64_t n = retired_dropped_ + orphan_drops_.load(std::memory_order_relaxed);
  for (const Producer* p : producers_) n += p->dropped.load(std::memory_order_relaxed);
  return n;
}

bool Monitor::drain(std::chrono::milliseconds timeout, bool flush) {
  // From a consumer callback (the monitor thread itself) it could only wait for itself.
  if (std::this_thread::get_id() == thread_id_.load()) return false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const uint64_t target = produced_total();
  while (delivered_.load(std::memory_order_acquire) < target) {
    if (!running() || std::chrono::steady_clock::now() > deadline) return false;
    {
      std::lock_guard<std::mutex> w(wake_mu_);
      wake_.store(true);
    }
    wake_cv_.notify_all();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (!flush) return true;
  std::vector<Candidate> emitted;
  std::vector<std::pair<uint64_t, uint32_t>> cooled;
  {
    std::lock_guard<std::mutex> lk(state_mu_);
    detector_->flush();
    detector_->sweep();
    emitted = detector_->take_emitted();
    cooled = detector_->take_cooled();
  }
  deliver(emitted, cooled);
  return true;
}

void Monitor::reset() { reset(MonitorOptions::from_config()); }

void Monitor::reset(const MonitorOptions& o) {
  // Paused (tests): what is queued stays queued and goes to the new state after resuming.
  if (!paused_.load()) drain(std::chrono::seconds(5));
  std::lock_guard<std::mutex> lk(state_mu_);
  detector_ = std::make_unique<Detector>(o);
  options_ = o;
  queue_capacity_.store(std::max<uint32_t>(o.queue_capacity, 2));
  max_producers_.store(o.max_producers);
  base_produced_ = produced_total();
  base_drops_ = dropped_total();
  base_batches_ = batches_.load();
  quiet_.store(false, std::memory_order_relaxed);
  settle_reset_.store(true, std::memory_order_relaxed);
}

std::vector<Candidate> Monitor::candidates(bool hot_only) const {
  std::lock_guard<std::mutex> lk(state_mu_);
  return detector_->candidates(hot_only);
}

MonitorCounters Monitor::counters() const {
  MonitorCounters c;
  uint64_t bp, bd, bb;
  {
    std::lock_guard<std::mutex> lk(state_mu_);
    detector_->fill(c);
    bp = base_produced_, bd = base_drops_, bb = base_batches_;
  }
  c.produced = produced_total() - bp;
  c.drops = dropped_total() - bd;
  c.batches = batches_.load() - bb;
  c.quiet = quiet_.load(std::memory_order_relaxed);
  c.quiet_periods = quiet_periods_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lk(producers_mu_);
  c.producers = producers_.size();
  for (const Producer* p : producers_) c.quiet_skipped += p->quiet_skipped.load(std::memory_order_relaxed);
  return c;
}

MonitorOptions Monitor::options() const {
  std::lock_guard<std::mutex> lk(state_mu_);
  return options_;
}

void Monitor::set_consumer(CandidateConsumer* c) {
  std::lock_guard<std::mutex> lk(consumer_mu_);
  consumer_ = c;
}

void Monitor::pause_for_testing(bool paused) { paused_.store(paused); }

void ensure_started() {
  static std::atomic<bool> done{false};
  if (done.load(std::memory_order_acquire)) return;
  static std::once_flag once;
  std::call_once(once, [] {
    if (config().mode != Mode::off) Monitor::instance().start();
    // The monitor is leaked, so its counter source stays valid through the final report.
    register_counter_source("monitor", [](CounterSink& sink) {
      const MonitorCounters c = Monitor::instance().counters();
      sink.add("events", c.events);
      sink.add("produced", c.produced);
      sink.add("drops", c.drops);
      sink.add("releases", c.releases);
      sink.add("syncs", c.syncs);
      sink.add("served_windows", c.served);
      sink.add("replayed_calls", c.replayed);
      sink.add("served_unreplayed", c.served_unreplayed);
      sink.add("quiet", c.quiet);
      sink.add("quiet_periods", c.quiet_periods);
      sink.add("quiet_skipped", c.quiet_skipped);
      sink.add("batches", c.batches);
      sink.add("windows", c.windows);
      sink.add("window_evictions", c.window_evictions);
      sink.add("structures", c.structures);
      sink.add("structure_evictions", c.structure_evictions);
      sink.add("shape_evictions", c.shape_evictions);
      sink.add("shape_families", c.shape_families);
      sink.add("value_evictions", c.value_evictions);
      sink.add("hot", c.hot);
      sink.add("candidates_emitted", c.candidates_emitted);
      sink.add("candidates_cooled", c.candidates_cooled);
    });
    done.store(true, std::memory_order_release);
  });
}

}  // namespace livefuse::monitor
