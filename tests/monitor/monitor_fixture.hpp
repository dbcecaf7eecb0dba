#pragma once
// Shared setup of the monitor tests that run real ops: trace mode (record + monitor only, so no
// plan changes what is recorded), the monitor started and reset with the given options.
#include <cmath>
#include <vector>

#include "livefuse/livefuse.hpp"
#include "monitor/monitor.hpp"
#include "test_util.hpp"

namespace lfmon {

namespace lf = livefuse;
using livefuse::monitor::Candidate;
using livefuse::monitor::Monitor;
using livefuse::monitor::MonitorOptions;

inline void setup(const MonitorOptions& o = MonitorOptions{}) {
  static const bool once = [] {
    lf::Config c = lf::config();
    c.mode = lf::Mode::trace;
    lf::set_config_for_testing(c);
    return true;
  }();
  (void)once;
  lf::monitor::ensure_started();
  REQUIRE(Monitor::instance().running());
  Monitor::instance().pause_for_testing(false);
  Monitor::instance().reset(o);
}

// Lets the monitor catch up without ending its input (long loops on a busy machine would
// otherwise overflow the queue: drops are by design, but not what these tests are about).
inline void catch_up() { REQUIRE(Monitor::instance().drain(std::chrono::seconds(60), false)); }

inline std::vector<Candidate> drained_candidates() {
  REQUIRE(Monitor::instance().drain());
  return Monitor::instance().candidates();
}

struct EncoderLayer {
  std::vector<lf::Tensor> w;  // ln1 w/b, q w/b, k w/b, v w/b, o w/b, ln2 w/b, up w/b, down w/b
};

inline EncoderLayer make_layer(int64_t d, uint64_t seed) {
  EncoderLayer l;
  const lf::Shape shapes[] = {{d},    {d}, {d, d}, {d}, {d, d},     {d},     {d, d},     {d},
                              {d, d}, {d}, {d},    {d}, {4 * d, d}, {4 * d}, {d, 4 * d}, {d}};
  for (const lf::Shape& s : shapes) l.w.push_back(lf::rand_uniform(s, seed++, -0.2, 0.2));
  return l;
}

// A pre-LN encoder layer: 22 ops.
inline constexpr int kLayerOps = 22;
inline const std::vector<lf::OpId> kLayerOpIds = {
    lf::OpId::layer_norm, lf::OpId::linear,     lf::OpId::linear,  lf::OpId::linear,
    lf::OpId::reshape,    lf::OpId::permute,    lf::OpId::reshape, lf::OpId::permute,
    lf::OpId::reshape,    lf::OpId::permute,    lf::OpId::matmul,  lf::OpId::softmax,
    lf::OpId::matmul,     lf::OpId::permute,    lf::OpId::reshape, lf::OpId::linear,
    lf::OpId::add,        lf::OpId::layer_norm, lf::OpId::linear,  lf::OpId::gelu,
    lf::OpId::linear,     lf::OpId::add};

inline lf::Tensor encoder_layer(const lf::Tensor& x, const EncoderLayer& L, int64_t heads = 2) {
  const auto& w = L.w;
  const int64_t S = x.dim(0), D = x.dim(1), Dh = D / heads;
  lf::Tensor h = lf::layer_norm(x, w[0], w[1]);
  lf::Tensor q = lf::linear(h, w[2], w[3]);
  lf::Tensor k = lf::linear(h, w[4], w[5]);
  lf::Tensor v = lf::linear(h, w[6], w[7]);
  q = lf::permute(lf::reshape(q, {S, heads, Dh}), {1, 0, 2});
  k = lf::permute(lf::reshape(k, {S, heads, Dh}), {1, 2, 0});
  v = lf::permute(lf::reshape(v, {S, heads, Dh}), {1, 0, 2});
  lf::Tensor a = lf::softmax(lf::matmul(q, k), 1.0 / std::sqrt(static_cast<double>(Dh)));
  lf::Tensor o = lf::reshape(lf::permute(lf::matmul(a, v), {1, 0, 2}), {S, D});
  lf::Tensor x1 = lf::add(x, lf::linear(o, w[8], w[9]));
  lf::Tensor m = lf::linear(lf::gelu(lf::linear(lf::layer_norm(x1, w[10], w[11]), w[12], w[13])),
                            w[14], w[15]);
  return lf::add(x1, m);
}

// prelude (1 op) -> layers -> head (1 op) -> host read (sync). Returns the host values.
inline std::vector<float> encoder_forward(const lf::Tensor& input,
                                          const std::vector<EncoderLayer>& layers) {
  lf::Tensor x = lf::mul(input, 0.5);
  for (const EncoderLayer& L : layers) x = encoder_layer(x, L);
  return lf::sum(x, 1).to_floats();
}

}  // namespace lfmon
