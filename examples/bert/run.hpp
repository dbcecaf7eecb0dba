#pragma once
// Driving the encoder: deterministic random inputs, a steady-state timing loop shared by
// the livefuse-bert tool and the demo, and run_bert_demo() itself.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "examples/bert/bert.hpp"

namespace livefuse::bert {

// Token ids uniform in [0, vocab) from `seed` (splitmix64 on the host: identical everywhere),
// as i64 [batch, seq] on `device`.
Tensor random_input_ids(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed, Device device);
// A padding mask [batch, seq] (i64): row r keeps its first seq - r * seq / (2 * batch) tokens,
// so row 0 is unpadded and later rows are padded more and more.
Tensor padding_mask(int64_t batch, int64_t seq, Device device);

struct TimingOptions {
  int warmup = 10;               // at least this many untimed iterations ...
  double warmup_ms = 1000;       // ... and at least this long (fusion compiles in the background)
  double max_warmup_ms = 30000;  // then until latency stops improving, at most this long
  int iters = 20;                // timed iterations
};

// Every iteration is forward + synchronize, so a time is the latency of one forward pass.
struct Timing {
  std::vector<double> warmup_ms;  // per warm-up iteration
  std::vector<double> iter_ms;    // per timed iteration
  double mean_ms = 0, median_ms = 0, min_ms = 0, p90_ms = 0;
  double first_ms = 0;  // the very first forward (cold: allocations, first launches)
  // Estimated from latencies alone: the first iteration from which >= 90% of the rest run
  // within 1.25x of the steady median, and the wall time spent before it ended.
  int iters_to_steady = 0;
  double time_to_steady_ms = 0;
};

Timing time_forward(const BertModel& model, const Tensor& ids, const Tensor& mask,
                    const TimingOptions& opt);

struct DemoOptions {
  std::string preset;  // empty: "tiny" on the CPU, "base" on a GPU
  int64_t batch = 1;
  int64_t seq = 32;
  DType dtype = DType::f32;
  Device device = default_device();
  int iters = 20;
  double warmup_ms = 500;  // see TimingOptions
  uint64_t seed = 0;
};

struct DemoResult {
  BertConfig config;
  Timing timing;
  std::vector<int64_t> out_shape;
  double mean_abs = 0;  // mean |last_hidden_state|: a quick sanity figure (LayerNorm'd: ~0.8)
};

// Builds a random BERT of the preset, runs it on random ids with a padding mask, times the
// steady state and prints a short summary to `log` (when given).
DemoResult run_bert_demo(const DemoOptions& opt, std::ostream* log = nullptr);

}  // namespace livefuse::bert
