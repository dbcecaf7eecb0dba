#pragma once
// A small transformer encoder block written as plain eager code with livefuse ops -- exactly
// how existing code looks before livefuse: no fusion hints, no graphs.
#include <cmath>

#include "livefuse/livefuse.hpp"

namespace demo {

struct EncoderBlock {
  int64_t hidden, heads, ffn;
  lf::Tensor wq, bq, wk, bk, wv, bv, wo, bo, ln1_w, ln1_b, w1, b1, w2, b2, ln2_w, ln2_b;

  EncoderBlock(int64_t hidden_, int64_t heads_, int64_t ffn_, lf::DType dt, lf::Device dev,
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
