#pragma once
// Float64 references of GPT-2 and Llama written from Hugging Face's modeling code, with no
// livefuse op in them: the whole sequence is recomputed for every position (no cache), so
// neither cache style nor any fusion can leak into the expected values.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "examples/decoder/decoder.hpp"

namespace decoder_ref {

namespace lfd = livefuse::decoder;
using Params = std::map<std::string, std::vector<double>>;
using Mat = std::vector<std::vector<double>>;  // [positions][features]

inline Params params_of(const lfd::DecoderModel& m) {
  Params p;
  for (const auto& [name, t] : m.named_parameters()) p[name] = t.to_doubles();
  return p;
}

// y[t] = x[t] @ W (+ b); W stored [in, out] (Conv1D) or [out, in] (nn.Linear).
inline Mat dense(const Mat& x, const std::vector<double>& w, const std::vector<double>* b,
                 int64_t in, int64_t out, bool in_out) {
  Mat y(x.size(), std::vector<double>(static_cast<size_t>(out)));
  for (size_t t = 0; t < x.size(); ++t)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b ? (*b)[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) acc += x[t][i] * (in_out ? w[i * out + o] : w[o * in + i]);
      y[t][o] = acc;
    }
  return y;
}

inline Mat layer_norm(const Mat& x, const std::vector<double>& w, const std::vector<double>* b,
                      double eps, bool rms) {
  Mat y = x;
  for (auto& row : y) {
    const double n = static_cast<double>(row.size());
    double mean = 0, var = 0;
    if (!rms) {
      for (double v : row) mean += v;
      mean /= n;
    }
    for (double v : row) var += (v - mean) * (v - mean);
    var /= n;
    const double r = 1 / std::sqrt(var + eps);
    for (size_t i = 0; i < row.size(); ++i)
      row[i] = (row[i] - mean) * r * w[i] + (b ? (*b)[i] : 0.0);
  }
  return y;
}

// Causal attention of q [T][H*D] over k / v [T][Hkv*D].
inline Mat attention(const Mat& q, const Mat& k, const Mat& v, int64_t H, int64_t Hkv, int64_t D) {
  const size_t T = q.size();
  Mat o(T, std::vector<double>(static_cast<size_t>(H * D), 0.0));
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / Hkv);
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> s(t + 1);
      double mx = -1e300;
      for (size_t j = 0; j <= t; ++j) {
        double acc = 0;
        for (int64_t d = 0; d < D; ++d) acc += q[t][h * D + d] * k[j][g * D + d];
        s[j] = acc / std::sqrt(static_cast<double>(D));
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (double& x : s) sum += x = std::exp(x - mx);
      for (size_t j = 0; j <= t; ++j)
        for (int64_t d = 0; d < D; ++d) o[t][h * D + d] += s[j] / sum * v[j][g * D + d];
    }
  }
  return o;
}

inline void rope(Mat& x, int64_t heads, int64_t D, double theta) {
  for (size_t t = 0; t < x.size(); ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < D / 2; ++i) {
        const double a = static_cast<double>(t) /
                         std::pow(theta, 2.0 * static_cast<double>(i) / static_cast<double>(D));
        double& x1 = x[t][h * D + i];
        double& x2 = x[t][h * D + i + D / 2];
        const double r1 = x1 * std::cos(a) - x2 * std::sin(a),
                     r2 = x2 * std::cos(a) + x1 * std::sin(a);
        x1 = r1, x2 = r2;
      }
}

// Logits [vocab] of the last position of `tokens` (one sequence).
inline std::vector<double> last_logits(const lfd::DecoderConfig& c, const Params& P,
                                       const std::vector<int64_t>& tokens) {
  const int64_t C = c.hidden_size, F = c.intermediate_size, H = c.num_attention_heads;
  const int64_t Hkv = c.num_key_value_heads, D = c.head_size(), V = c.vocab_size;
  const bool gpt2 = c.arch == lfd::Arch::gpt2;
  const auto& emb = P.at(gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight");
  Mat h(tokens.size(), std::vector<double>(static_cast<size_t>(C)));
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int64_t i = 0; i < C; ++i)
      h[t][i] = emb[tokens[t] * C + i] + (gpt2 ? P.at("transformer.wpe.weight")[t * C + i] : 0.0);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const auto p = [&](const std::string& s) -> const std::vector<double>& {
      return P.at((gpt2 ? "transformer.h." : "model.layers.") + std::to_string(l) + "." + s);
    };
    Mat o;
    if (gpt2) {
      const Mat a = layer_norm(h, p("ln_1.weight"), &p("ln_1.bias"), c.norm_eps, false);
      const Mat qkv = dense(a, p("attn.c_attn.weight"), &p("attn.c_attn.bias"), C, 3 * C, true);
      Mat q(h.size()), k(h.size()), v(h.size());
      for (size_t t = 0; t < h.size(); ++t) {
        q[t].assign(qkv[t].begin(), qkv[t].begin() + C);
        k[t].assign(qkv[t].begin() + C, qkv[t].begin() + 2 * C);
        v[t].assign(qkv[t].begin() + 2 * C, qkv[t].end());
      }
      o = dense(attention(q, k, v, H, H, D), p("attn.c_proj.weight"), &p("attn.c_proj.bias"), C, C,
                true);
    } else {
      const Mat a = layer_norm(h, p("input_layernorm.weight"), nullptr, c.norm_eps, true);
      Mat q = dense(a, p("self_attn.q_proj.weight"), nullptr, C, H * D, false);
      Mat k = dense(a, p("self_attn.k_proj.weight"), nullptr, C, Hkv * D, false);
      const Mat v = dense(a, p("self_attn.v_proj.weight"), nullptr, C, Hkv * D, false);
      rope(q, H, D, c.rope_theta);
      rope(k, Hkv, D, c.rope_theta);
      o = dense(attention(q, k, v, H, Hkv, D), p("self_attn.o_proj.weight"), nullptr, H * D, C,
                false);
    }
    for (size_t t = 0; t < h.size(); ++t)
      for (int64_t i = 0; i < C; ++i) h[t][i] += o[t][i];
    Mat m;
    if (gpt2) {
      Mat f = dense(layer_norm(h, p("ln_2.weight"), &p("ln_2.bias"), c.norm_eps, false),
                    p("mlp.c_fc.weight"), &p("mlp.c_fc.bias"), C, F, true);
      for (auto& row : f)
        for (double& x : row)
          x = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      m = dense(f, p("mlp.c_proj.weight"), &p("mlp.c_proj.bias"), F, C, true);
    } else {
      const Mat a = layer_norm(h, p("post_attention_layernorm.weight"), nullptr, c.norm_eps, true);
      Mat g = dense(a, p("mlp.gate_proj.weight"), nullptr, C, F, false);
      const Mat u = dense(a, p("mlp.up_proj.weight"), nullptr, C, F, false);
      for (size_t t = 0; t < g.size(); ++t)
        for (int64_t i = 0; i < F; ++i) g[t][i] = g[t][i] / (1 + std::exp(-g[t][i])) * u[t][i];
      m = dense(g, p("mlp.down_proj.weight"), nullptr, F, C, false);
    }
    for (size_t t = 0; t < h.size(); ++t)
      for (int64_t i = 0; i < C; ++i) h[t][i] += m[t][i];
  }
  const Mat last{h.back()};
  const Mat n = gpt2 ? layer_norm(last, P.at("transformer.ln_f.weight"),
                                  &P.at("transformer.ln_f.bias"), c.norm_eps, false)
                     : layer_norm(last, P.at("model.norm.weight"), nullptr, c.norm_eps, true);
  const auto& head = c.tie_word_embeddings ? emb : P.at("lm_head.weight");
  return dense(n, head, nullptr, C, V, false)[0];
}

}  // namespace decoder_ref
