#include "examples/demo_decoder.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "examples/decoder_block.hpp"
#include "examples/demo_stats.hpp"

namespace demo {

namespace {
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}
}  // namespace

DecoderResult run_decoder_demo(const DecoderOptions& o) {
  const int64_t hidden = o.device.is_cuda() ? 768 : 256, heads = o.device.is_cuda() ? 12 : 4;
  std::vector<DecoderLayer> layers;
  for (int l = 0; l < o.layers; ++l)
    layers.emplace_back(hidden, heads, 4 * hidden, o.dtype, o.device, 5000 + 100 * l);
  // The token inputs of one sequence (the same each sequence: the work is what is timed).
  const lf::Tensor tokens =
      lf::rand_uniform({o.batch, o.tokens, hidden}, 11, -1, 1, o.dtype, o.device);
  std::printf(
      "livefuse-demo: %d-layer decoder, hidden %lld, heads %lld, batch %lld, %lld tokens a "
      "sequence, %s on %s, mode %s\n",
      o.layers, (long long)hidden, (long long)heads, (long long)o.batch, (long long)o.tokens,
      std::string(lf::dtype_name(o.dtype)).c_str(), o.device.str().c_str(),
      std::string(lf::mode_name(lf::config().mode)).c_str());
  std::fflush(stdout);

  DecoderResult r;
  std::vector<double> steady;
  for (int s = 0; s < o.sequences; ++s) {
    std::vector<lf::Tensor> k_cache(layers.size()), v_cache(layers.size());
    std::vector<double> per_token;
    lf::Tensor h;
    for (int64_t t = 0; t < o.tokens; ++t) {
      const auto t0 = std::chrono::steady_clock::now();
      h = lf::slice(tokens, 1, t, t + 1);
      for (size_t l = 0; l < layers.size(); ++l) h = layers[l].step(h, k_cache[l], v_cache[l]);
      lf::synchronize(o.device);
      per_token.push_back(std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - t0)
                              .count());
    }
    double total = 0;
    for (double ms : per_token) total += ms;
    if (s == 0) r.first_ms = total / static_cast<double>(per_token.size());
    if (s >= o.sequences / 2) steady.insert(steady.end(), per_token.begin(), per_token.end());
    if (s == o.sequences - 1) r.checksum = h.to_floats()[0];
    if (!o.quiet)
      std::printf("seq %3d  %8.3f ms/token (median %.3f)  %s\n", s,
                  total / static_cast<double>(per_token.size()), quantile(per_token, 0.5),
                  progress_note().c_str());
  }
  r.steady_ms = quantile(steady, 0.5);
  r.steady_p10_ms = quantile(steady, 0.1);
  return r;
}

}  // namespace demo
