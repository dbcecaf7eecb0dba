#pragma once
// The decode-step lab's models (tools/gpu/lab/decode_step.cu): the cache's size and the two
// architectures' shapes and habits. Standalone (nvcc alone).
#include "lab_step.cuh"

namespace step {

using lab::kHD;
using lab::kThreads;

constexpr int kMaxLayers = 16;
constexpr int L0 = 32;           // the prompt's keys already in the caches
constexpr int LMAX = L0 + 1024;  // cache capacity (steps run: checks + timing rounds)
constexpr int kMaxSplits = (LMAX + lab::kSplitKeys - 1) / lab::kSplitKeys;

struct Gpt2 {
  using T = __half;
  static constexpr const char* name = "gpt2 f16";
  static constexpr int D = 768, HQ = 12, HKV = 12, F = 3072, V = 50257, LAYERS = 12;
  static constexpr lab::Norm norm = lab::Norm::layer;
  static constexpr bool bias = true, gated = false, rotary = false, positions = true;
  static constexpr float eps = 1e-5f, theta = 0.f;
  static constexpr int steps = 6;  // steps checked against the host
};
struct Llama {
  using T = __nv_bfloat16;
  static constexpr const char* name = "llama-1b bf16";
  static constexpr int D = 2048, HQ = 32, HKV = 8, F = 8192, V = 128256, LAYERS = 16;
  static constexpr lab::Norm norm = lab::Norm::rms;
  static constexpr bool bias = false, gated = true, rotary = true, positions = false;
  static constexpr float eps = 1e-5f, theta = 500000.f;
  static constexpr int steps = 3;
};
template <class A>
constexpr int kQkvRows = (A::HQ + 2 * A::HKV) * kHD;
template <class A>
constexpr int kSmemK = A::F > A::D ? A::F : A::D;

}  // namespace step
