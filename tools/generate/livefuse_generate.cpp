// livefuse-generate: greedy or sampled generation with a GPT-2 or Llama decoder, from Hugging
// Face weights or a random seed, timed. Exit status: 0 done, 2 bad command line, 1 anything
// else (bad file, bad input, runtime error).
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "examples/bert/npy.hpp"
#include "examples/decoder/generate.hpp"
#include "tools/generate/generate_args.hpp"
#include "tools/profiler_range.hpp"

namespace lfd = livefuse::decoder;
using nlohmann::json;

namespace {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i =
      std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

livefuse::Tensor prompt_of(const lfd::GenerateArgs& a, const lfd::DecoderConfig& cfg,
                           livefuse::Device device) {
  using namespace livefuse;
  std::vector<int64_t> v, shape;
  if (!a.ids.empty()) {
    const npy::Array arr = npy::read(a.ids);
    LF_CHECK(arr.kind == 'i' || arr.kind == 'u', "livefuse-generate", "--ids ", a.ids, ": dtype ",
             arr.descr(), " is not an integer type");
    LF_CHECK(arr.shape.size() == 2 && arr.shape[0] > 0 && arr.shape[1] > 0, "livefuse-generate",
             "--ids ", a.ids, ": expected a non-empty [batch, T] array");
    v = arr.to_int64s();
    shape = arr.shape;
  } else {
    shape = {a.batch, a.prompt_len};
    uint64_t s = a.prompt_seed * 0x9E3779B97F4A7C15ull + 7;
    for (int64_t i = 0; i < a.batch * a.prompt_len; ++i) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      v.push_back(static_cast<int64_t>(s % static_cast<uint64_t>(cfg.vocab_size)));
    }
  }
  for (size_t i = 0; i < v.size(); ++i)
    LF_CHECK(v[i] >= 0 && v[i] < cfg.vocab_size, "livefuse-generate", "token id ", v[i],
             " at flat index ", i, " is outside [0, vocab_size ", cfg.vocab_size, ")");
  return from_int64s(v, {shape[0], shape[1]}, DType::i64, device);
}

int run(const lfd::GenerateArgs& a) {
  using namespace livefuse;
  const Device device = a.device.empty() ? default_device() : parse_device(a.device);
  LF_CHECK(!device.is_cuda() || cuda_available(), "livefuse-generate", "--device ", a.device,
           ": no usable CUDA device (CPU-only build, or no GPU)");
  for (const std::string& path : {a.out, a.logits, a.json}) {
    if (path.empty()) continue;
    std::ofstream probe(path, std::ios::app);
    LF_CHECK(probe.good(), "livefuse-generate", path, ": cannot open for writing");
  }
  const auto t_load = std::chrono::steady_clock::now();
  const lfd::DecoderConfig cfg = a.config.empty() ? lfd::DecoderConfig::preset(a.preset)
                                                 : lfd::DecoderConfig::from_json_file(a.config);
  const DType dtype = parse_dtype(a.dtype);
  const lfd::DecoderModel model =
      a.random_seed ? lfd::DecoderModel::random(cfg, *a.random_seed, dtype, device)
                    : lfd::DecoderModel::from_safetensors(cfg, a.weights, dtype, device);
  synchronize(device);
  const double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_load).count();
  const Tensor prompt = prompt_of(a, cfg, device);
  const lfd::CacheKind kind = lfd::parse_cache_kind(a.cache);
  const bool keep_logits = !a.logits.empty();

  json runs = json::array();
  lfd::GenerateResult r, first;
  lfd::PlanUse before = lfd::plan_use(), after = before;
  // Warm-up: the time from the first run's prefill until plans first served (the decode steps
  // up to the probe that saw it, kServedProbeEvery steps apart; earlier runs whole), and the
  // slowest token until then.
  double to_served_ms = 0, warmup_max_step_ms = 0;
  bool served_yet = false;
  std::vector<double> first_run_step_ms;  // every token of the first run: what warm-up compares
  for (int i = 0; i < a.runs; ++i) {
    before = lfd::plan_use();
    r = lfd::generate(model, prompt, a.steps, kind, a.sample, keep_logits && i + 1 == a.runs);
    after = lfd::plan_use();
    if (i == 0) {
      first = r;
      first_run_step_ms = r.step_ms;
    }
    if (!served_yet) {
      to_served_ms += r.prefill_ms;
      const size_t upto = r.first_served_step >= 0 ? static_cast<size_t>(r.first_served_step) + 1 : r.step_ms.size();
      for (size_t k = 0; k < upto; ++k) {
        to_served_ms += r.step_ms[k];
        warmup_max_step_ms = std::max(warmup_max_step_ms, r.step_ms[k]);
      }
      served_yet = r.first_served_step >= 0;
    }
    runs.push_back({{"prefill_ms", r.prefill_ms},
                    {"step_median_ms", percentile(r.step_ms, 0.5)},
                    {"step_issue_median_ms", percentile(r.step_issue_ms, 0.5)},
                    {"served_calls", after.served_calls - before.served_calls}});
  }
  if (a.profile_final > 0) {
    livefuse::tools::profiler_range(true);
    (void)lfd::generate(model, prompt, a.profile_final, kind, a.sample, false);
    livefuse::tools::profiler_range(false);
  }
  const int64_t B = prompt.dim(0);
  double decode_ms = 0;
  for (double x : r.step_ms) decode_ms += x;
  const double median = percentile(r.step_ms, 0.5), p99 = percentile(r.step_ms, 0.99);
  const double tokens_per_s =
      decode_ms > 0 ? static_cast<double>(B) * r.step_ms.size() / decode_ms * 1e3 : 0;
  const bool same_as_first = first.tokens == r.tokens;

  json report = {{"tool", "livefuse-generate"},
                 {"mode", std::string(mode_name(config().mode))},
                 {"arch", cfg.arch == lfd::Arch::gpt2 ? "gpt2" : "llama"},
                 {"config", json::parse(cfg.to_json())},
                 {"weights", a.random_seed ? json(nullptr) : json(a.weights)},
                 {"dtype", a.dtype},
                 {"device", device.str()},
                 {"cache", a.cache},
                 {"batch", B},
                 {"prompt_len", prompt.dim(1)},
                 {"steps", a.steps},
                 {"greedy", a.sample.greedy()},
                 {"parameters", model.num_parameters()},
                 {"weight_bytes", model.weight_bytes()},
                 {"load_ms", load_ms},
                 {"prefill_ms", r.prefill_ms},
                 {"step_median_ms", median},
                 {"step_p99_ms", p99},
                 {"step_issue_median_ms", percentile(r.step_issue_ms, 0.5)},
                 {"step_ms", r.step_ms},
                 {"tokens_per_s", tokens_per_s},
                 {"served_calls", after.served_calls - before.served_calls},
                 {"active_plans", after.active_plans},
                 {"tokens_same_every_run", same_as_first},
                 {"warmup_to_served_ms", served_yet ? to_served_ms : -1.0},
                 {"warmup_max_step_ms", warmup_max_step_ms},
                 {"first_run_step_ms", first_run_step_ms},
                 {"first_run_first_served_step", first.first_served_step},
                 {"runs", runs},
                 {"tokens", r.tokens}};
  if (!a.out.empty()) {
    std::vector<int64_t> flat;
    for (const auto& row : r.tokens) flat.insert(flat.end(), row.begin(), row.end());
    npy::write(a.out, flat.data(), {B, a.steps}, 'i', 8);
  }
  if (keep_logits) {
    std::vector<float> flat;
    for (const auto& step : r.logits) flat.insert(flat.end(), step.begin(), step.end());
    npy::write_f32(a.logits, flat, {a.steps, B, cfg.vocab_size});
  }
  if (!a.json.empty()) {
    std::ofstream f(a.json, std::ios::trunc);
    f << report.dump(2) << "\n";
    LF_CHECK(f.good(), "livefuse-generate", "--json ", a.json, ": write failed");
  }
  if (!a.quiet)
    std::cout << std::fixed << std::setprecision(3)
              << (cfg.arch == lfd::Arch::gpt2 ? "gpt2" : "llama") << " (" << cfg.num_hidden_layers
              << " layers, hidden " << cfg.hidden_size << ") " << a.dtype << " on " << device.str()
              << ", mode " << mode_name(config().mode) << ", cache " << a.cache << ": batch " << B
              << ", prompt " << prompt.dim(1) << ", " << a.steps << " tokens; prefill "
              << r.prefill_ms << " ms, per token median " << median << " ms, p99 " << p99 << " ms, "
              << std::setprecision(1) << tokens_per_s << " tokens/s; plans served "
              << after.served_calls - before.served_calls << " calls (" << after.active_plans
              << " active plans)" << (same_as_first ? "" : "; WARNING: tokens differ between runs")
              << "\n";
  // Greedy f32 tokens must repeat exactly (the first run is mostly eager, the last fused). In
  // f16/bf16 a fused kernel rounds once where eager rounds at every op, which can flip a
  // near-tie: reported above and in the JSON, checked by the logits (bench/gpt/compare.py).
  return same_as_first || !a.sample.greedy() || dtype != DType::f32 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const lfd::GenerateArgs args = lfd::parse_generate_args({argv + 1, argv + argc});
    if (args.help) {
      std::cout << lfd::generate_usage();
      return 0;
    }
    return run(args);
  } catch (const lfd::UsageError& e) {
    std::cerr << "livefuse-generate: " << e.what() << "\n(see livefuse-generate --help)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "livefuse-generate: error: " << e.what() << "\n";
    return 1;
  }
}
