#pragma once
// A GPT-style decoder layer run token by token, as plain eager code: pre-norm attention over a
// KV cache that grows by one position per token (concat), then a gelu MLP. The shapes change
// every token (the cache length), which is what a decode loop looks like to livefuse.
#include <cmath>

#include "livefuse/livefuse.hpp"

namespace demo {

struct DecoderLayer {
  int64_t hidden, heads, ffn;
  lf::Tensor ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2;

  DecoderLayer(int64_t hidden_, int64_t heads_, int64_t ffn_, lf::DType dt, lf::Device dev,
               uint64_t seed)
      : hidden(hidden_), heads(heads_), ffn(ffn_) {
    const double s = 1.0 / std::sqrt(static_cast<double>(hidden));
    auto w = [&](int64_t o, int64_t i) { return lf::rand_uniform({o, i}, seed++, -s, s, dt, dev); };
    auto b = [&](int64_t o) { return lf::rand_uniform({o}, seed++, -0.1, 0.1, dt, dev); };
    wq = w(hidden, hidden), bq = b(hidden), wk = w(hidden, hidden), bk = b(hidden);
    wv = w(hidden, hidden), bv = b(hidden), wo = w(hidden, hidden), bo = b(hidden);
    w1 = w(ffn, hidden), b1 = b(ffn), w2 = w(hidden, ffn), b2 = b(hidden);
    ln1_w = lf::full({hidden}, 1.0, dt, dev), ln1_b = b(hidden);
    ln2_w = lf::full({hidden}, 1.0, dt, dev), ln2_b = b(hidden);
  }

  // x: [batch, 1, hidden], the current token; k_cache / v_cache: [batch, heads, t, head_dim]
  // (undefined before the first token), extended by this token.
  lf::Tensor step(const lf::Tensor& x, lf::Tensor& k_cache, lf::Tensor& v_cache) const {
    const int64_t B = x.dim(0), D = hidden / heads;
    auto split = [&](const lf::Tensor& t) {
      return lf::permute(lf::reshape(t, {B, 1, heads, D}), {0, 2, 1, 3});
    };
    const lf::Tensor h = lf::layer_norm(x, ln1_w, ln1_b, 1e-5);
    const lf::Tensor q = split(lf::linear(h, wq, bq));
    const lf::Tensor k = split(lf::linear(h, wk, bk));
    const lf::Tensor v = split(lf::linear(h, wv, bv));
    k_cache = k_cache.defined() ? lf::concat({k_cache, k}, 2) : lf::contiguous(k);
    v_cache = v_cache.defined() ? lf::concat({v_cache, v}, 2) : lf::contiguous(v);
    const lf::Tensor p =
        lf::softmax(lf::matmul(q, lf::transpose(k_cache, -1, -2)), 1.0 / std::sqrt(double(D)));
    const lf::Tensor ctx =
        lf::reshape(lf::permute(lf::matmul(p, v_cache), {0, 2, 1, 3}), {B, 1, hidden});
    const lf::Tensor a = lf::add(x, lf::linear(ctx, wo, bo));
    const lf::Tensor f =
        lf::linear(lf::gelu(lf::linear(lf::layer_norm(a, ln2_w, ln2_b, 1e-5), w1, b1)), w2, b2);
    return lf::add(a, f);
  }
};

}  // namespace demo
