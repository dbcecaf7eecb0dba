#pragma once
// Command line of livefuse-generate. A malformed input is a UsageError naming the flag and what
// was expected; main() prints it and exits with status 2.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "examples/decoder/generate.hpp"

namespace livefuse::decoder {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct GenerateArgs {
  std::string weights, config;          // --weights FILE.safetensors --config config.json
  std::optional<uint64_t> random_seed;  // --random SEED (with --preset or --config)
  std::string preset = "gpt2-tiny";
  bool preset_given = false;
  std::string ids;                    // --ids prompt.npy [batch, T] integers
  int64_t batch = 1, prompt_len = 8;  // random prompt when --ids is absent
  uint64_t prompt_seed = 1;
  int64_t steps = 16;
  std::string dtype = "f32", device;  // device empty: livefuse's default
  std::string cache = "concat";
  SampleOptions sample;
  int runs = 1;                   // --runs N: generations; timings are the last one's
  std::string out, logits, json;  // --out ids.npy --logits logits.npy --json timings.json
  // --profile-final N: after the timed runs, one more generation of N tokens in a profiler range
  int64_t profile_final = 0;
  bool quiet = false, help = false;
};

GenerateArgs parse_generate_args(const std::vector<std::string>& argv);
const char* generate_usage();

}  // namespace livefuse::decoder
