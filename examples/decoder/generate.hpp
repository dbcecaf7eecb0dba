#pragma once
// The generate loop over a DecoderModel: prefill the prompt, then one decode step per new
// token, greedy or sampled, with either KV-cache style. Each step's token is read back to the
// host (a sync point), as a streaming generate loop does.
#include <cstdint>
#include <vector>

#include "examples/decoder/decoder.hpp"

namespace livefuse::decoder {

// temperature 0: greedy (argmax on the device). Otherwise softmax(logits / temperature) on the
// host, restricted to the top_k most likely tokens (0: all; chosen on the device by lf::topk)
// and to the smallest set whose probability reaches top_p (1: all), sampled from a generator
// seeded with `seed`.
struct SampleOptions {
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0; }
  void validate() const;  // throws livefuse::Error naming the bad option
};

struct GenerateResult {
  std::vector<std::vector<int64_t>> tokens;  // [batch][steps] new tokens
  double prefill_ms = 0;                     // prompt forward up to its first token on the host
  std::vector<double> step_ms;               // each decode step, token on the host (steps - 1)
  // The part of each step the program's thread spends issuing it: until the forward returned its
  // (maybe deferred) logits, before the token is read back. Near step_ms: the step is bound by
  // the host's calls, not by the GPU.
  std::vector<double> step_issue_ms;
  // The first decode step (index into step_ms) after which plans had served calls of this run,
  // looked at every kServedProbeEvery steps outside the timed spans; -1: none by the end.
  int64_t first_served_step = -1;
  // With keep_logits: the logits each token was chosen from, [steps][batch * vocab], as f32.
  std::vector<std::vector<float>> logits;
};

inline constexpr int64_t kServedProbeEvery = 8;

// prompt [batch, T] (i32/i64). The cache is made here with capacity T + steps.
GenerateResult generate(const DecoderModel& model, const Tensor& prompt, int64_t steps,
                        CacheKind cache, const SampleOptions& sample = {},
                        bool keep_logits = false);

// One token per row of logits [batch, vocab] (any float dtype): greedy or sampled.
std::vector<int64_t> pick_tokens(const Tensor& logits, const SampleOptions& sample,
                                 std::vector<uint64_t>& rng_state, std::vector<float>* kept);

// Calls served by livefuse's plans so far (the matcher's `served` counter of inspect()) and the
// plans currently active: how much of a run fusion took over.
struct PlanUse {
  uint64_t served_calls = 0;
  int active_plans = 0;
};
PlanUse plan_use();
// The served calls alone, from livefuse::counters(): cheap enough to poll during a run.
uint64_t served_calls();

// The host-side sampler on one row of probabilities' logits (exposed for tests).
int64_t sample_row(const float* logits, int64_t vocab, const SampleOptions& o, uint64_t& state);

}  // namespace livefuse::decoder
