#pragma once
// The weights of the demo's transformer layers (encoder_block.hpp, decoder_block.hpp): random,
// from one seed stream, so both layer kinds draw the same values in the same order.
#include <cmath>

#include "livefuse/livefuse.hpp"

namespace demo {

struct BlockWeights {
  int64_t hidden, heads, ffn;
  lf::Tensor wq, bq, wk, bk, wv, bv, wo, bo, ln1_w, ln1_b, w1, b1, w2, b2, ln2_w, ln2_b;

  BlockWeights(int64_t hidden_, int64_t heads_, int64_t ffn_, lf::DType dt, lf::Device dev,
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
};

}  // namespace demo
