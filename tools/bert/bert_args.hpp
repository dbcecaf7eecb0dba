#pragma once
// Command line of livefuse-bert. Every malformed input is a UsageError with a message that
// names the flag and what was expected; main() prints it and exits with status 2.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace livefuse::bert {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct BertArgs {
  std::string weights;                  // --weights FILE.safetensors (with --config)
  std::string config;                   // --config config.json
  std::optional<uint64_t> random_seed;  // --random SEED
  std::string preset = "base";          // --preset tiny|base|large (with --random)
  bool preset_given = false;
  std::optional<int64_t> batch, seq;  // defaults 1 and 128 unless --ids sets them
  std::string dtype = "f32";
  std::string ids, mask;         // --ids / --mask FILE.npy
  uint64_t input_seed = 1;       // random ids when --ids is absent
  std::string out;               // --out FILE.npy
  int iters = 0;                 // --iters N: timed steady-state iterations
  int warmup = 10;               // --warmup N
  double warmup_ms = 2000;       // --warmup-ms MS
  double max_warmup_ms = 60000;  // --max-warmup-ms MS
  std::string json;              // --json PATH
  std::string device;            // --device cpu|cuda (empty: livefuse's default)
  // --weights-memory owned|wrapped|wrapped-immutable: who owns the weights' memory -- the
  // runtime, or the program (wrapped over pointers it holds), declared immutable or not.
  std::string weights_memory = "owned";
  bool quiet = false;
  bool profile_final = false;  // --profile-final: the forward after timing in a profiler range
  bool help = false;
};

// Parses argv[1..]; throws UsageError.
BertArgs parse_bert_args(const std::vector<std::string>& argv);
const char* bert_usage();

}  // namespace livefuse::bert
