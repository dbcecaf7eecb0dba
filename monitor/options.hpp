#pragma once
// Tunables of the monitor and the counters that show its bounded state at work.
#include <cstdint>

namespace livefuse::monitor {

// Why hot defaults to 3. LIVEFUSE_HOT counts repeats: the first occurrence of a sequence
// defines its program path, and each later occurrence that follows that same path counts, so
// 3 means hot at the fourth occurrence. Repeats of one program path (not just of one
// structure) are strong evidence of a loop -- a chance match in unrelated code does not
// count -- so few are needed: three make the layers of a model hot within its first forward
// pass and a decode step hot at its fourth token. Planning and compilation then run off the
// hot path, and a plan only pays off once installed, so a higher value only delays the gain;
// a wrong guess costs one background compile and is undone by the planner's sampling and by
// decay. Two would also fire on a pattern that merely happened twice during warm-up.
inline constexpr int kDefaultHot = 3;

struct MonitorOptions {
  // Occurrences (of one program path, see structure_table.hpp) before a sequence is hot.
  // from_config(): LIVEFUSE_HOT, whose default (config.hpp) is kDefaultHot.
  int hot = kDefaultHot;
  // Longest sequence considered (LIVEFUSE_MAX_SEGMENT). Also the lookahead of the matcher.
  int max_segment = 64;
  // The seam (stream_window.hpp, note 3; LIVEFUSE_SEAM).
  bool seam = true;
  // Hot sequences go to the planner once their shape mix has settled (structure_table.cpp,
  // the Note); false: as soon as they are hot or gain a shape (LIVEFUSE_SETTLE=0).
  bool settle = true;
  // Repeats in one rhythm (no pause) that settle a shape mix: more than a decode step's run of
  // layers at one length in GPT-2 (12) or Llama-3.2-1B (16 layers, 15 repeats).
  uint32_t settled_run = 16;
  // Occurrences after which an owed hand-over goes even though the mix has not settled.
  uint32_t max_wait = 64;
  // Events each producer thread may have in flight; beyond it events are dropped and counted.
  // 8192 events (about 3 MB per recording thread) cover ~4 ms of the fastest CPU op stream
  // (tiny tensors, ~1 us per op, a call and a release each): the monitor thread may be
  // descheduled that long on a busy machine.
  uint32_t queue_capacity = 8192;
  // Positions of history per stream searched for earlier occurrences (power of two).
  uint32_t window = 4096;
  // Counts halve every 2^half_life_log2 ops of their stream ("time" is the stream's own work,
  // so an idle stream keeps its state and a busy one forgets its old patterns).
  uint32_t half_life_log2 = 12;
  uint32_t max_streams = 32;       // per-stream windows; the least recently active is evicted
  uint32_t max_structures = 1024;  // distinct sequences tracked; the coldest is evicted
  uint32_t max_shape_tuples = 16;  // concrete shape tuples kept per sequence
  uint32_t max_producers = 256;    // threads with a queue; events of further threads are dropped

  // From config() (LIVEFUSE_HOT, LIVEFUSE_MAX_SEGMENT), clamped to what the monitor supports.
  static MonitorOptions from_config();
};

struct MonitorCounters {
  uint64_t produced = 0;   // events pushed into the queues
  uint64_t drops = 0;      // events dropped (queue full, no queue, monitor stopped)
  uint64_t events = 0;     // op call events consumed
  uint64_t releases = 0;   // release events consumed
  uint64_t syncs = 0;      // sync events consumed
  uint64_t served = 0;     // windows served by plans, each one event (of a known shape)
  uint64_t replayed = 0;   // call events replayed from served windows (included in `events`)
  uint64_t served_unreplayed = 0;  // served windows of well-known structures counted, not replayed
  uint64_t quiet = 0;              // 1 while recording probes only (monitor.cpp, quiet recording)
  uint64_t quiet_periods = 0;      // times it went quiet
  uint64_t quiet_skipped = 0;      // events not recorded while quiet (live threads)
  uint64_t batches = 0;    // batches taken off the queues by the monitor thread
  uint64_t producers = 0;  // threads with a live queue
  uint64_t windows = 0;    // per-stream windows alive
  uint64_t window_evictions = 0;
  uint64_t program_point_evictions = 0;
  uint64_t value_evictions = 0;  // value-index entries overwritten while still tracked
  uint64_t segments = 0;         // sequences cut and examined
  uint64_t structures = 0;       // distinct sequences tracked now
  uint64_t structure_evictions = 0;
  uint64_t shape_evictions = 0;
  uint64_t shape_families = 0;  // shape families fitted (runtime/plan.hpp, the note)
  uint64_t hot = 0;  // sequences hot now
  uint64_t candidates_emitted = 0;
  uint64_t candidates_cooled = 0;
};

}  // namespace livefuse::monitor
