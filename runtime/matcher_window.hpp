#pragma once
// The matcher's per-stream window of deferred calls, shared by its three files:
// runtime/src/matcher.cpp (follow plans, defer), runtime/src/matcher_end.cpp (complete, flush)
// and runtime/src/matcher_checks.cpp (live sampling and LIVEFUSE_VERIFY). Internal to runtime/.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "livefuse/config.hpp"
#include "livefuse/stream.hpp"
#include "runtime/infer_memo.hpp"
#include "runtime/plan.hpp"

namespace livefuse::matcher::detail {

// Completions of a new plan run alternately eagerly and through the plan, timed, before the
// plan is kept (active) or rejected: config().sample pairs (LIVEFUSE_SAMPLE, default 5: enough
// for a median that ignores the first, cold run, short enough that a slower plan costs little;
// a close verdict samples on, record_sample in matcher_checks.cpp).
inline size_t sample_pairs() { return static_cast<size_t>(config().sample); }

// The samples' clock: microseconds since `t0`.
inline double us_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

struct Candidate {
  Plan* plan;
  std::vector<Tensor> externals;  // bound slots (undefined = not yet bound)
};

struct StreamWindow {
  // Taken by the owning thread for each call, and by any thread that reaches a sync point on
  // one of the window's values (a result handed to another thread before the owner synced).
  // Recursive: a plan's own steps may reach a sync point on the window they are completing.
  std::recursive_mutex mu;
  Stream stream;
  std::vector<Candidate> candidates;
  Window w;
  bool active = false;
  // Read without the lock by the owner thread when no plan is installed (try_defer): set when a
  // window starts (by the owner), cleared (release) only once its calls have all run.
  std::atomic<bool> open{false};
  // Set when the last call of a plan was deferred. The plan runs at the next call or sync
  // point, not inside the completing call: only then have the caller's argument temporaries
  // died, so reference counts tell which intermediates the user really still holds.
  std::optional<Candidate> ready;
  std::shared_ptr<const PlanTable::Snapshot> keep;  // plans stay alive while a window uses them
  Plan* early_plan = nullptr;  // the plan launched at the window's first call (w.early)
  // Inputs the program could rewrite (Storage::may_change), each with the copy the window's
  // calls read instead (snapshot_reachable); one copy per input per window, so a value read by
  // two calls stays one external.
  std::vector<std::pair<Tensor, Tensor>> snapshots;
  // The owner thread's calls on this stream, shaped by position in their window
  // (matcher::infer_memo). Owner-only: a thread settling the window never touches it.
  InferMemo memo;
  // CPU, while one of the window's candidates samples: the host time its calls spent being
  // deferred (matched, given pending outputs). A plan's side of a sample pays it on top of its
  // run -- the alternative to keeping the plan is eager execution at each call, which defers
  // nothing -- so a plan that saves less than its deferral costs is not kept.
  bool timing_defer = false;
  double defer_us = 0;
  // CUDA samples whose end event the GPU has not reached yet (SampleClock): read later, in
  // stream order, so sampling never waits on the GPU.
  struct PendingSample {
    int slot = 0;
    Plan* plan = nullptr;
    std::shared_ptr<const PlanTable::Snapshot> keep;  // the plan stays alive until it is read
    bool via_plan = false;
    uint64_t stratum = 0;
    double host_us = 0;
  };
  // flush()'s order of deaths: for output f of the window (ids_begin + f), the call that reads
  // it last -- or makes it, when none reads it -- as a list per call (matcher_end.cpp).
  struct LastUses {
    std::vector<int> head, next;             // per call, the first f; per f, the next one
    std::vector<std::pair<int, int>> where;  // per f: (call, output)
  };
  LastUses flush_uses;
  std::vector<long> own_refs;  // window_refs()' counts, kept: no allocation per completion
  static constexpr int kSampleSlots = 8;
  void* sample_events[kSampleSlots][2] = {};  // cudaEvent_t pairs, made at the first CUDA sample
  std::vector<PendingSample> pending_samples;  // oldest first
};

// Ends the window: counts its calls, untags its outputs, drops an early launch it still holds.
void clear(StreamWindow& sw);

// How a window ends (matcher_end.cpp). complete(): sw.ready's plan runs the window (or, while it
// samples, eager execution does), and the user's handles get their values. flush(): every
// deferred call runs eagerly, in order, into the handles the user holds, counted under `reason`;
// `sink_us`, when given, adds up the host time of reporting the calls to the trace sink.
void complete(StreamWindow& sw);
void flush(StreamWindow& sw, std::atomic<uint64_t>& reason, double* sink_us = nullptr);
// The window's own references to each of its outputs (flat index f: calls in order, outputs
// in order): its handle in the window and the later deferred calls that read it. An output whose
// use_count() is above its count is referenced beyond the window: the user can still observe it.
// One pass over the window: a scan of the window per output was quadratic in its length, 16.6 M
// of a 6-step CPU decode's instructions (the served decode layers' completions).
void window_refs(const StreamWindow& sw, std::vector<long>& refs);

// A copy of `t`'s bytes as they are now (the span its view covers, same layout), made on
// `stream` in stream order: what a deferred call reads in place of memory the program can
// write behind livefuse's back (runtime/src/reachable.cpp).
Tensor snapshot_reachable(const Tensor& t, const Stream& stream);

// Times one sampled completion (a plan run or the eager flush it is compared with). What a
// completion costs a program that keeps calling is the larger of the host time it blocks the
// caller and the device time it occupies the stream: eager execution is mostly the former
// (launch after launch), a graph replay mostly the latter, and it overlaps with the calls that
// follow it. So on CUDA the sample is max(host, device), the device time measured between two
// events; on the CPU it is the host time.
//
// On CUDA the end event is read later (poll_samples, at the stream's next completions), not
// waited for: waiting would stall the program's thread until the GPU caught up, at every
// sampled completion of every new plan. With every event pair still in flight the completion
// goes unsampled (started() is false).
class SampleClock {
 public:
  explicit SampleClock(StreamWindow& sw);
  bool started() const { return slot_ >= 0 || !cuda_; }
  // Records the sample now (CPU) or once the GPU is past it (CUDA); `extra_host_us` is host time
  // the sample's side paid before the completion (StreamWindow::defer_us).
  void finish(Plan& plan, bool via_plan, uint64_t stratum, double extra_host_us = 0);

 private:
  StreamWindow& sw_;
  std::shared_ptr<const PlanTable::Snapshot> keep_;  // the window's plans (clear() drops sw.keep)
  std::chrono::steady_clock::time_point t0_;
  bool cuda_ = false;
  int slot_ = -1;
};

// Records the samples of `sw` whose end event has completed, oldest first.
void poll_samples(StreamWindow& sw);

// [ Note -- samples by stratum ]
// Live sampling times plan and eager runs of a plan's windows in turn. Strictly in turn, the two
// sides aliased with the program's loop: a plan that serves every layer of a 4-layer decoder
// was timed on layers 0 and 2 and eager on layers 1 and 3, in every process (traced on the CPU
// decoder demo), so two kinds of windows of different cost -- a layer whose window also holds
// the embeddings, a period of the program's own -- would decide the verdict instead of the plan.
// No fixed order is free of this for every period (Thue-Morse, say, gives the plan's side 13 of
// the 14 windows at multiples of 3 in 40). So the windows are split into strata -- the storages
// of the tensors that feed a parameter input (a linear's weight and bias, a norm's, an
// embedding's table: one stratum per layer) -- and within each stratum the sides take turns (a
// stratum in balance takes the side that has fewer samples overall). The verdict then compares
// matched samples: per stratum, as many of each side as the other has, so both medians hold
// each layer's windows alike even while a stratum is one ahead (two kinds of window at 50 and
// 100 us in five pairs: 3 + 2 of them against 2 + 3 would make a plan no faster look twice as
// fast). A plan with no parameter inputs is one stratum: in turn, as before.

// The stratum of a completion whose externals are `externals` (the note above): a hash of the
// storages of the slots that feed a parameter input, 0 when there are none.
uint64_t sample_stratum(const Plan& p, const std::vector<Tensor>& externals);
// Live sampling: whether this completion, of `stratum`, should run through the plan (else
// eagerly). Counted as chosen: a run that then goes untimed leaves its stratum one off. Past
// kMaxSampleStrata strata a new one is recorded as stratum 0, where the windows beyond the
// table take turns overall: a parameter fed by a new tensor every window (weights dequantised
// per call) makes every window a stratum of its own, never matched, and the verdict then comes
// from stratum 0 once the table is full.
bool sample_choice(Plan& p, uint64_t& stratum);
inline constexpr size_t kMaxSampleStrata = 64;
// Whether a sampling plan's completion now goes unsampled (through the plan): while
// livefuse's own threads work (runtime/background.hpp), for at most kSamplePutOffMs a plan.
inline constexpr int64_t kSamplePutOffMs = 500;
bool put_sample_off(Plan& p);
// Sampled runs through a plan that were cold (a capture, module loads: not what a run costs)
// and so went untimed; past this many a plan's cold runs are timed too -- a plan whose every
// run is cold costs just that, and one never timed would stay sampling for good (complete()).
inline constexpr int kColdUntimedAtMost = 16;
// Adds a sample of `stratum`; after sample_pairs() matched pairs (the note above), a verdict:
// the plan becomes active, or is sampled once more before it is rejected (and sampled again
// later: retry_rejected).
void record_sample(Plan& p, bool via_plan, double us, uint64_t stratum = 0);
// A rejected plan is sampled again, from fresh samples, once its first op has opened
// kRetryWindows windows since the rejection (4x as many after each further one; at most
// kMaxRetries times). Sampling early in a process can mislead: a Llama decode layer plan that
// replays in 106 us sampled at 286-346 us in one process of the H200 and ran every token of it
// eagerly, 3.4x slower. A plan that is slower loses a few sampled windows per retry.
inline constexpr int kRetryWindows = 256;
inline constexpr int kMaxRetries = 2;
// Called by the matcher when `p`'s first op opens a window while p is not usable: true when p
// is a rejected plan whose retry is due -- it is sampling again, and usable.
bool retry_rejected(Plan& p);
// LIVEFUSE_VERIFY (see matcher_checks.cpp). Ends the window.
void verify_against_eager(StreamWindow& sw, const std::vector<std::pair<int, int>>& needed, Plan& plan);

}  // namespace livefuse::matcher::detail
