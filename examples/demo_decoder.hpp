#pragma once
// livefuse-demo --model decoder: token-by-token decoding through a few DecoderLayers.
#include "livefuse/livefuse.hpp"

namespace demo {

struct DecoderOptions {
  lf::Device device = lf::Device::cpu();
  lf::DType dtype = lf::DType::f32;
  int layers = 4, sequences = 8;
  int64_t batch = 1, tokens = 64;  // tokens a sequence: the KV cache grows to this length
  bool quiet = false;
};

struct DecoderResult {
  double first_ms = 0;   // per token, the first sequence (plans not yet in)
  double steady_ms = 0;  // per token, median over the tokens of the last half of the sequences
  double steady_p10_ms = 0;
  float checksum = 0;
};

DecoderResult run_decoder_demo(const DecoderOptions& o);

}  // namespace demo
