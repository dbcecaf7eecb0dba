#include "examples/demo_gpt.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "examples/demo_stats.hpp"
#include "examples/decoder/generate.hpp"

namespace demo {

namespace dec = lf::decoder;

GptResult run_gpt_demo(const GptOptions& o) {
  const dec::DecoderConfig cfg = dec::DecoderConfig::preset(o.device.is_cuda() ? "gpt2" : "gpt2-tiny");
  const dec::DecoderModel model = dec::DecoderModel::random(cfg, 1, o.dtype, o.device);
  std::vector<int64_t> ids(static_cast<size_t>(o.prompt));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7919 + 13) % cfg.vocab_size);
  const lf::Tensor prompt = lf::from_int64s(ids, {1, o.prompt}, lf::DType::i64, o.device);
  std::printf("livefuse-demo: GPT-2 (%lld layers, hidden %lld), %s on %s, %s cache, prompt %lld, "
              "%lld new tokens a sequence, mode %s\n",
              (long long)cfg.num_hidden_layers, (long long)cfg.hidden_size,
              std::string(lf::dtype_name(o.dtype)).c_str(), o.device.str().c_str(),
              o.static_cache ? "static" : "concat", (long long)o.prompt, (long long)o.tokens,
              std::string(lf::mode_name(lf::config().mode)).c_str());
  GptResult r;
  for (int s = 0; s < o.sequences; ++s) {
    const dec::GenerateResult g =
        dec::generate(model, prompt, o.tokens, o.static_cache ? dec::CacheKind::fixed : dec::CacheKind::concat);
    std::vector<double> steps = g.step_ms;
    std::sort(steps.begin(), steps.end());
    const double med = steps.empty() ? 0 : steps[steps.size() / 2];
    if (s == 0) r.first_ms = med;
    r.steady_ms = med;
    r.tokens_per_s = med > 0 ? 1000.0 / med : 0;
    r.last_token = g.tokens[0].back();
    if (!o.quiet)
      std::printf("sequence %2d  prefill %8.3f ms  %8.3f ms/token  %9.1f tokens/s  %s\n", s,
                  g.prefill_ms, med, r.tokens_per_s, progress_note().c_str());
  }
  return r;
}

}  // namespace demo
