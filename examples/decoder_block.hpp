#pragma once
// A GPT-style decoder layer run token by token, as plain eager code: pre-norm attention over a
// KV cache that grows by one position per token (concat), then a gelu MLP. The shapes change
// every token (the cache length), which is what a decode loop looks like to livefuse.
#include <cmath>

#include "examples/block_weights.hpp"
#include "livefuse/livefuse.hpp"

namespace demo {

struct DecoderLayer : BlockWeights {
  using BlockWeights::BlockWeights;

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
