#pragma once
// livefuse-demo --model gpt: a GPT-2 (examples/decoder) generating token by token with a KV
// cache -- tiny on the CPU, GPT-2 small on a GPU -- printing tokens/s as plans come in.
#include "livefuse/livefuse.hpp"

namespace demo {

struct GptOptions {
  lf::Device device = lf::Device::cpu();
  lf::DType dtype = lf::DType::f32;
  int sequences = 8;        // generate calls, one after another
  int64_t tokens = 64;      // new tokens each
  int64_t prompt = 16;      // prompt length
  bool static_cache = false;  // --cache static: preallocated, written in place
  bool quiet = false;
};

struct GptResult {
  double first_ms = 0;   // per token, the first sequence
  double steady_ms = 0;  // per token, median of the last sequence's steps
  double tokens_per_s = 0;
  int64_t last_token = 0;
};

GptResult run_gpt_demo(const GptOptions& o);

}  // namespace demo
