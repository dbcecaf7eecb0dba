#pragma once
// A small transformer encoder block written as plain eager code with livefuse ops -- exactly
// how existing code looks before livefuse: no fusion hints, no graphs.
#include <cmath>

#include "examples/block_weights.hpp"
#include "livefuse/livefuse.hpp"

namespace demo {

struct EncoderBlock : BlockWeights {
  using BlockWeights::BlockWeights;

  // x: [batch, seq, hidden]; mask: additive [batch, 1, 1, seq] or undefined.
  lf::Tensor operator()(const lf::Tensor& x, const lf::Tensor& mask) const {
    const int64_t B = x.dim(0), S = x.dim(1), D = hidden / heads;
    auto split = [&](const lf::Tensor& t) {
      return lf::permute(lf::reshape(t, {B, S, heads, D}), {0, 2, 1, 3});
    };
    lf::Tensor q = split(lf::linear(x, wq, bq));
    lf::Tensor k = split(lf::linear(x, wk, bk));
    lf::Tensor v = split(lf::linear(x, wv, bv));
    lf::Tensor p =
        lf::softmax(lf::matmul(q, lf::transpose(k, -1, -2)), 1.0 / std::sqrt(double(D)), mask);
    lf::Tensor ctx = lf::reshape(lf::permute(lf::matmul(p, v), {0, 2, 1, 3}), {B, S, hidden});
    lf::Tensor h = lf::layer_norm(lf::add(lf::linear(ctx, wo, bo), x), ln1_w, ln1_b, 1e-12);
    lf::Tensor f = lf::linear(lf::gelu(lf::linear(h, w1, b1)), w2, b2);
    return lf::layer_norm(lf::add(f, h), ln2_w, ln2_b, 1e-12);
  }
};

}  // namespace demo
