#include "tools/bert/bert_args.hpp"

#include <charconv>
#include <cmath>
#include <functional>
#include <map>

namespace livefuse::bert {
namespace {

template <class T>
T parse_number(const std::string& flag, const std::string& s, T lo, T hi) {
  T v{};
  const char* end = s.data() + s.size();
  const auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc() || p != end || s.empty())
    throw UsageError(flag + ": expected a number, got '" + s + "'");
  if (v < lo || v > hi)
    throw UsageError(flag + ": " + s + " is out of range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return v;
}

double parse_ms(const std::string& flag, const std::string& s) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty() || !std::isfinite(v) || v < 0)
    throw UsageError(flag + ": expected a non-negative number of milliseconds, got '" + s + "'");
  return v;
}

}  // namespace

const char* bert_usage() {
  return R"(usage: livefuse-bert (--weights FILE.safetensors --config config.json | --random SEED [--preset tiny|base|large])
                     [--batch N] [--seq N] [--dtype f32|f16|bf16] [--device cpu|cuda]
                     [--ids FILE.npy] [--mask FILE.npy] [--input-seed N] [--out FILE.npy]
                     [--iters N] [--warmup N] [--warmup-ms MS] [--max-warmup-ms MS] [--json PATH] [--quiet]
                     [--weights-memory owned|wrapped|wrapped-immutable] [--profile-final]

Runs a BERT encoder (Hugging Face BertModel, last_hidden_state) with livefuse.
  --weights, --config   Hugging Face weights (.safetensors, keys with or without "bert.") and config.json
  --random SEED         random weights from SEED instead, of size --preset (default base)
  --batch, --seq        input size (default 1 x 128); taken from --ids when given
  --dtype               compute/storage dtype of weights and activations (default f32)
  --ids, --mask         int32/int64 .npy [batch, seq]: token ids, and attention mask (1 keep, 0 pad);
                        without --ids, ids are random from --input-seed (default 1) and no mask is used
  --out                 writes last_hidden_state as float32 .npy [batch, seq, hidden] (after timing,
                        so it comes from the steady, fused state)
  --iters N             times N steady-state forward passes (each followed by a synchronize),
                        after --warmup passes / --warmup-ms and until latency stops improving
  --json PATH           writes the run's settings and timings as JSON
  --profile-final       on CUDA, the forward after timing (the fused state) runs between
                        cuProfilerStart and cuProfilerStop: `ncu --profile-from-start off`
                        then times that forward's kernels alone (tools/gpu/kernels.sh)
  LIVEFUSE=off runs plain eager; see the livefuse README for the other LIVEFUSE_* variables.
)";
}

BertArgs parse_bert_args(const std::vector<std::string>& argv) {
  BertArgs a;
  std::map<std::string, std::function<void(const std::string&)>> with_value = {
      {"--weights", [&](const std::string& v) { a.weights = v; }},
      {"--config", [&](const std::string& v) { a.config = v; }},
      {"--random",
       [&](const std::string& v) {
         a.random_seed = parse_number<uint64_t>("--random", v, 0, UINT64_MAX);
       }},
      {"--preset",
       [&](const std::string& v) {
         if (v != "tiny" && v != "base" && v != "large")
           throw UsageError("--preset: expected tiny, base or large, got '" + v + "'");
         a.preset = v;
         a.preset_given = true;
       }},
      {"--batch",
       [&](const std::string& v) { a.batch = parse_number<int64_t>("--batch", v, 1, 1 << 20); }},
      {"--seq",
       [&](const std::string& v) { a.seq = parse_number<int64_t>("--seq", v, 1, 1 << 20); }},
      {"--dtype",
       [&](const std::string& v) {
         if (v != "f32" && v != "f16" && v != "bf16")
           throw UsageError("--dtype: expected f32, f16 or bf16, got '" + v + "'");
         a.dtype = v;
       }},
      {"--ids", [&](const std::string& v) { a.ids = v; }},
      {"--mask", [&](const std::string& v) { a.mask = v; }},
      {"--input-seed",
       [&](const std::string& v) {
         a.input_seed = parse_number<uint64_t>("--input-seed", v, 0, UINT64_MAX);
       }},
      {"--out", [&](const std::string& v) { a.out = v; }},
      {"--iters",
       [&](const std::string& v) { a.iters = parse_number<int>("--iters", v, 0, 10000000); }},
      {"--warmup",
       [&](const std::string& v) { a.warmup = parse_number<int>("--warmup", v, 0, 10000000); }},
      {"--warmup-ms", [&](const std::string& v) { a.warmup_ms = parse_ms("--warmup-ms", v); }},
      {"--max-warmup-ms",
       [&](const std::string& v) { a.max_warmup_ms = parse_ms("--max-warmup-ms", v); }},
      {"--json", [&](const std::string& v) { a.json = v; }},
      {"--weights-memory",
       [&](const std::string& v) {
         if (v != "owned" && v != "wrapped" && v != "wrapped-immutable")
           throw UsageError("--weights-memory: expected owned, wrapped or wrapped-immutable, got '" + v + "'");
         a.weights_memory = v;
       }},
      {"--device",
       [&](const std::string& v) {
         if (v != "cpu" && v != "cuda" && v.rfind("cuda:", 0) != 0)
           throw UsageError("--device: expected cpu or cuda, got '" + v + "'");
         a.device = v;
       }},
  };
  std::map<std::string, int> seen;
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string flag = argv[i], value;
    bool inline_value = false;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inline_value = true;
    }
    if (flag == "--help" || flag == "-h") {
      a.help = true;
      continue;
    }
    if (flag == "--quiet") {
      a.quiet = true;
      continue;
    }
    if (flag == "--profile-final") {
      a.profile_final = true;
      continue;
    }
    const auto it = with_value.find(flag);
    if (it == with_value.end()) throw UsageError("unknown argument '" + argv[i] + "'");
    if (++seen[flag] > 1) throw UsageError(flag + " given more than once");
    if (!inline_value) {
      if (i + 1 >= argv.size()) throw UsageError(flag + " needs a value");
      value = argv[++i];
    }
    it->second(value);
  }
  if (a.help) return a;

  const bool have_weights = !a.weights.empty() || !a.config.empty();
  if (have_weights && a.random_seed)
    throw UsageError("--weights/--config and --random are exclusive");
  if (!have_weights && !a.random_seed)
    throw UsageError("give --weights FILE --config FILE, or --random SEED");
  if (have_weights && (a.weights.empty() || a.config.empty()))
    throw UsageError("--weights and --config go together (the config gives the model's sizes)");
  if (have_weights && a.preset_given)
    throw UsageError("--preset goes with --random; with --weights the sizes come from --config");
  if (!a.ids.empty() && seen.count("--input-seed"))
    throw UsageError("--input-seed makes random ids; it cannot go with --ids");
  return a;
}

}  // namespace livefuse::bert
