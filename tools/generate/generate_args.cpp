// Parsing of livefuse-generate's command line.
#include "tools/generate/generate_args.hpp"

#include <cmath>

namespace livefuse::decoder {
namespace {

int64_t to_int(const std::string& flag, const std::string& v, int64_t lo) {
  size_t used = 0;
  int64_t x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty() || x < lo)
    throw UsageError(flag + " expects an integer >= " + std::to_string(lo) + ", got '" + v + "'");
  return x;
}

double to_num(const std::string& flag, const std::string& v) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty() || !std::isfinite(x))
    throw UsageError(flag + " expects a number, got '" + v + "'");
  return x;
}

}  // namespace

const char* generate_usage() {
  return "usage: livefuse-generate (--weights FILE.safetensors --config config.json |\n"
         "                          --random SEED [--preset gpt2-tiny|llama-tiny|gpt2|llama-1b |\n"
         "                                         --config config.json])\n"
         "                         [--ids prompt.npy | --batch B --prompt-len T --prompt-seed S]\n"
         "                         [--steps N] [--dtype f32|f16|bf16] [--device cpu|cuda]\n"
         "                         [--cache concat|static] [--temperature X --top-k K --top-p P\n"
         "                         --seed S] [--runs N] [--out ids.npy] [--logits logits.npy]\n"
         "                         [--json timings.json] [--quiet] [--profile-final N]\n"
         "--random with --config: random weights in that config's shape.\n"
         "Generates N new tokens per prompt row (greedy unless --temperature > 0). --runs repeats\n"
         "the whole generation (so livefuse's plans form); the timings are the last run's.\n"
         "--out: the new tokens [batch, N] (int64); --logits: the logits each token was chosen\n"
         "from, [N, batch, vocab] (float32); --json: prefill time, per-token median / p99,\n"
         "tokens/s and the calls livefuse's plans served. --profile-final N: on CUDA, one more\n"
         "generation of N tokens after them between cuProfilerStart and cuProfilerStop, for\n"
         "`ncu --profile-from-start off` (tools/gpu/kernels.sh); it changes no timing.\n";
}

GenerateArgs parse_generate_args(const std::vector<std::string>& argv) {
  GenerateArgs a;
  bool batch_given = false, len_given = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& f = argv[i];
    const auto value = [&]() -> const std::string& {
      if (i + 1 >= argv.size()) throw UsageError(f + " needs a value");
      return argv[++i];
    };
    if (f == "--help" || f == "-h")
      a.help = true;
    else if (f == "--quiet")
      a.quiet = true;
    else if (f == "--weights")
      a.weights = value();
    else if (f == "--config")
      a.config = value();
    else if (f == "--random")
      a.random_seed = static_cast<uint64_t>(to_int(f, value(), 0));
    else if (f == "--preset")
      a.preset = value(), a.preset_given = true;
    else if (f == "--ids")
      a.ids = value();
    else if (f == "--batch")
      a.batch = to_int(f, value(), 1), batch_given = true;
    else if (f == "--prompt-len")
      a.prompt_len = to_int(f, value(), 1), len_given = true;
    else if (f == "--prompt-seed")
      a.prompt_seed = static_cast<uint64_t>(to_int(f, value(), 0));
    else if (f == "--steps")
      a.steps = to_int(f, value(), 1);
    else if (f == "--dtype")
      a.dtype = value();
    else if (f == "--device")
      a.device = value();
    else if (f == "--cache")
      a.cache = value();
    else if (f == "--temperature")
      a.sample.temperature = to_num(f, value());
    else if (f == "--top-k")
      a.sample.top_k = to_int(f, value(), 0);
    else if (f == "--top-p")
      a.sample.top_p = to_num(f, value());
    else if (f == "--seed")
      a.sample.seed = static_cast<uint64_t>(to_int(f, value(), 0));
    else if (f == "--runs")
      a.runs = static_cast<int>(to_int(f, value(), 1));
    else if (f == "--out")
      a.out = value();
    else if (f == "--logits")
      a.logits = value();
    else if (f == "--json")
      a.json = value();
    else if (f == "--profile-final")
      a.profile_final = to_int(f, value(), 1);
    else
      throw UsageError("unknown argument '" + f + "'");
  }
  if (a.help) return a;
  if (a.random_seed && !a.weights.empty())
    throw UsageError("--random and --weights exclude each other");
  if (a.random_seed && !a.config.empty() && a.preset_given)
    throw UsageError("--config and --preset both give the shape; drop one");
  if (!a.random_seed && (a.weights.empty() || a.config.empty()))
    throw UsageError("give --weights and --config, or --random SEED");
  if (!a.ids.empty() && (batch_given || len_given))
    throw UsageError("--ids sets the batch and prompt length; drop --batch / --prompt-len");
  if (a.cache != "concat" && a.cache != "static")
    throw UsageError("--cache expects concat or static, got '" + a.cache + "'");
  if (a.dtype != "f32" && a.dtype != "f16" && a.dtype != "bf16")
    throw UsageError("--dtype expects f32, f16 or bf16, got '" + a.dtype + "'");
  try {
    a.sample.validate();
  } catch (const std::exception& e) {
    throw UsageError(e.what());
  }
  return a;
}

}  // namespace livefuse::decoder
