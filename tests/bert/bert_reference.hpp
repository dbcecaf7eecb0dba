#pragma once
// A float64 BERT encoder written independently of livefuse (plain loops), used as the
// reference for the tiny-config tests. Same math as Hugging Face BertModel in eval mode.
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "examples/bert/bert.hpp"

namespace bert_ref {

using Params = std::map<std::string, std::vector<double>>;
using Vec = std::vector<double>;

// y[n, out] = x[n, in] W[out, in]^T + b[out]
inline Vec linear(const Vec& x, int64_t n, int64_t in, const Vec& w, const Vec& b, int64_t out) {
  Vec y(static_cast<size_t>(n * out));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b[o];
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  return y;
}

inline void layer_norm(Vec& x, int64_t n, int64_t h, const Vec& w, const Vec& b, double eps) {
  for (int64_t r = 0; r < n; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < h; ++i) mean += x[r * h + i];
    mean /= static_cast<double>(h);
    for (int64_t i = 0; i < h; ++i) var += (x[r * h + i] - mean) * (x[r * h + i] - mean);
    var /= static_cast<double>(h);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < h; ++i) x[r * h + i] = (x[r * h + i] - mean) * inv * w[i] + b[i];
  }
}

inline double act(double x, const std::string& kind) {
  if (kind == "relu") return x > 0 ? x : 0;
  if (kind == "gelu") return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// ids, mask, types: [b, s] row-major (mask empty: no mask; types empty: zeros); returns
// last_hidden_state [b, s, H].
inline Vec forward(const livefuse::bert::BertConfig& c, const Params& p,
                   const std::vector<int64_t>& ids, const std::vector<int64_t>& mask, int64_t b,
                   int64_t s, double mask_min, const std::vector<int64_t>& types = {}) {
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, d = c.head_dim(), n = b * s;
  const int64_t I = c.intermediate_size;
  const auto& P = [&](const std::string& k) -> const Vec& { return p.at(k); };
  Vec h(static_cast<size_t>(n * H));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < H; ++i)
      h[t * H + i] =
          P("embeddings.word_embeddings.weight")[ids[t] * H + i] +
          P("embeddings.token_type_embeddings.weight")[(types.empty() ? 0 : types[t]) * H + i] +
          P("embeddings.position_embeddings.weight")[(t % s) * H + i];
  layer_norm(h, n, H, P("embeddings.LayerNorm.weight"), P("embeddings.LayerNorm.bias"),
             c.layer_norm_eps);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string pre = "encoder.layer." + std::to_string(l) + ".";
    const auto lin = [&](const Vec& x, int64_t in, const std::string& name, int64_t out) {
      return linear(x, n, in, P(pre + name + ".weight"), P(pre + name + ".bias"), out);
    };
    const Vec q = lin(h, H, "attention.self.query", H);
    const Vec k = lin(h, H, "attention.self.key", H);
    const Vec v = lin(h, H, "attention.self.value", H);
    Vec ctx(static_cast<size_t>(n * H), 0.0);
    Vec sc(static_cast<size_t>(s));
    for (int64_t bb = 0; bb < b; ++bb)
      for (int64_t hd = 0; hd < nh; ++hd)
        for (int64_t i = 0; i < s; ++i) {
          double mx = -INFINITY;
          for (int64_t j = 0; j < s; ++j) {
            double dot = 0;
            for (int64_t e = 0; e < d; ++e)
              dot += q[(bb * s + i) * H + hd * d + e] * k[(bb * s + j) * H + hd * d + e];
            sc[j] = dot * scale + (mask.empty() || mask[bb * s + j] ? 0.0 : mask_min);
            mx = std::max(mx, sc[j]);
          }
          double sum = 0;
          for (int64_t j = 0; j < s; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
          for (int64_t j = 0; j < s; ++j)
            for (int64_t e = 0; e < d; ++e)
              ctx[(bb * s + i) * H + hd * d + e] += sc[j] / sum * v[(bb * s + j) * H + hd * d + e];
        }
    Vec h1 = lin(ctx, H, "attention.output.dense", H);
    for (size_t i = 0; i < h1.size(); ++i) h1[i] += h[i];
    layer_norm(h1, n, H, P(pre + "attention.output.LayerNorm.weight"),
               P(pre + "attention.output.LayerNorm.bias"), c.layer_norm_eps);
    Vec inter = lin(h1, H, "intermediate.dense", I);
    for (double& x : inter) x = act(x, c.hidden_act);
    Vec out = lin(inter, I, "output.dense", H);
    for (size_t i = 0; i < out.size(); ++i) out[i] += h1[i];
    layer_norm(out, n, H, P(pre + "output.LayerNorm.weight"), P(pre + "output.LayerNorm.bias"),
               c.layer_norm_eps);
    h = std::move(out);
  }
  return h;
}

inline Params params_of(const livefuse::bert::BertModel& m) {
  Params p;
  for (const auto& [name, t] : m.named_parameters()) p[name] = t.to_doubles();
  return p;
}

}  // namespace bert_ref
