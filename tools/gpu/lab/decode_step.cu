// Decode-step lab (not part of the meson build; run on the GPU machine, no livefuse needed): a
// GPT-2-small-shaped (f16) and a Llama-3.2-1B-shaped (bf16, grouped-query, rotary, gated MLP)
// decode step with random weights, as ONE resident kernel whose phases meet at grid barriers,
// against the same phases as one launch each -- the decomposition livefuse's plans use today
// (a layer: Q/K/V with the norm inside and the cache append, attention, output + residual, the
// MLP's first product with the norm inside and its activation, the second + residual).
//   nvcc -O3 -arch=sm_90 -std=c++17 tools/gpu/lab/decode_step.cu -o decode_step
//   ./decode_step [reps] [--json PATH]        (or: bash tools/gpu/lab/decode_persistent.sh)
//
// The question (issue 20: GPT-2 <= 0.20 ms a token, livefuse 0.364 on the H200; Llama-1B <=
// 0.85, livefuse 1.074; their weights take 0.06 / 0.60 at the copy bandwidth): how much of a
// token is the chain of short kernels, and does a persistent step keep it? Everything a step
// needs lives on the device -- the cache length, the token the last step chose (its argmax,
// taken inside the head's phase) -- so ONE captured graph serves every step and every length:
// nothing is patched, nothing captured again.
//
// Phases of a step (tools/gpu/lab/lab_step.cuh has the GEMV and attention phases):
//   embed      x = wte[token] (+ wpe[len]: GPT-2); the token is the previous step's argmax
//   per layer: qkv   norm(x) into Q/K/V (+ bias); K and V rows written into the caches at len
//              attn  (K/V head, 32-key split) partial softmax(q kᵀ / 8) v, the split arriving
//                    last folding them (Llama: q and the new key rotated here)
//              out   xm = x + W_o attn (+ b_o)
//              mlp1  GPT-2: f = gelu_tanh(W_fc norm(xm) + b_fc); Llama: f = silu(gate) * up,
//                    gate and up as pairs of rows of one stacked weight
//              mlp2  x = xm + W_2 f (+ b)
//   head       logits = wte norm_f(x) (tied); the argmax by one 64-bit atomicMax; len += 1
// Forms: "launches" (2 + 5 a layer kernels, each over the same grid), "persistent" (one
// kernel), "persistent, no prefetch" (the persistent form loads each warp's first weight tile of
// the next GEMV phase before a barrier; weights are never written). Then the same with deeper
// GEMV phases -- a warp's tiles in groups of kDeep, the next group in flight while this one is
// summed, where the forms above keep one tile and the next: a warp that walks several rows
// waits one DRAM round trip a tile -- and with the barrier of flags (lab_grid.cuh) instead of
// the counting one. Checks: every persistent and deep form gives the launches form's tokens and
// logits bit for bit over `steps` steps; the launches
// form's tokens and last logits against a host reference (double accumulation, rounding where
// the GPU stores 16-bit values).
// Then the launches form's phases one kind at a time: us a launch, where its step's time goes
// (a phase's launches over the layers as one graph), beside two floors over the same grid: an
// empty launch, and one that only reads the input vector with its norm.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "decode_step_arch.cuh"
#include "decode_step_reference.hpp"
#include "lab_step.cuh"
#include "lab_timing.cuh"
#define CK LAB_CK

namespace {
using namespace step;

template <class A>
struct LayerW {
  using T = typename A::T;
  const T *n1_g, *n1_b, *w_qkv, *b_qkv, *w_o, *b_o, *n2_g, *n2_b, *w_1, *b_1, *w_2,
      *b_2;  // b: null without
  T *k, *v;  // caches [HKV][LMAX][kHD]
};
template <class A>
struct Params {
  using T = typename A::T;
  LayerW<A> l[kMaxLayers];
  const T *nf_g, *nf_b, *wte, *wpe;  // wte [V][D], the head too; wpe [LMAX][D] (GPT-2)
  T *x, *xm, *qkv, *attn, *f;        // activations
  float* part;                       // [HQ][kMaxSplits][2 + kHD]
  unsigned* count;                   // [HKV]: splits of a K/V head done
  unsigned long long* best;          // the step's argmax key (lab::best_key)
  int* len;       // keys in the caches before this step: the new token's position
  int* tokens;    // [LMAX]: the token each step embedded
  int* steps;     // steps taken
  float* logits;  // [V]
  unsigned* bar;    // grid barrier (lab_grid.cuh)
  unsigned* words;  // the barrier of flags' (lab_grid.cuh): kFlagWords
};

template <class T>
__device__ __forceinline__ float bias_of(const T* b, int r) {
  return b ? lab::El<T>::f(b[r]) : 0.f;
}

// ---- the phases ----
template <class A>
__device__ void phase_embed(const Params<A>& p) {
  using E = lab::El<typename A::T>;
  if (blockIdx.x != 0) return;
  // No head since the last embedding (a graph of embeddings alone, timed): token 0.
  const unsigned long long key = *reinterpret_cast<volatile unsigned long long*>(p.best);
  const int tok = key ? lab::token_of(key) : 0;
  const int pos = *reinterpret_cast<volatile int*>(p.len);
  for (int i = threadIdx.x; i < A::D; i += kThreads) {
    float v = E::f(p.wte[static_cast<int64_t>(tok) * A::D + i]);
    if (A::positions) v += E::f(p.wpe[static_cast<int64_t>(pos) * A::D + i]);
    p.x[i] = E::from(v);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    p.tokens[*p.steps] = tok;
    *p.best = 0ull;  // the head's phase takes the max into it
  }
}

template <class A, int kG>
__device__ void phase_qkv(const Params<A>& p, int l, lab::Smem<kSmemK<A>>& sm, const lab::Ctx& c,
                          lab::PreG<kG>& pre) {
  using T = typename A::T;
  using E = lab::El<T>;
  const LayerW<A>& w = p.l[l];
  const int pos = __ldcg(p.len);
  lab::load_input(p.x, A::D, A::norm, w.n1_g, w.n1_b, A::eps, sm);
  lab::gemv<1, kG>(w.w_qkv, kQkvRows<A>, A::D, sm, c, pre, [&](int r, float d, float) {
    const T y = E::from(d + bias_of(w.b_qkv, r));
    constexpr int q = A::HQ * kHD, kv = A::HKV * kHD;
    if (r < q) {
      p.qkv[r] = y;
    } else {
      const int j = (r - q) % kv, h = j / kHD, e = j % kHD;
      T* cache = r < q + kv ? w.k : w.v;
      cache[(static_cast<int64_t>(h) * LMAX + pos) * kHD + e] = y;
    }
  });
}

template <class A>
__device__ void phase_attn(const Params<A>& p, int l, const lab::Ctx& c) {
  const LayerW<A>& w = p.l[l];
  const lab::AttnArgs a{p.qkv,  w.k,  w.v,        p.attn,        p.part,  p.count,
                        A::HKV, LMAX, kMaxSplits, __ldcg(p.len), A::theta};
  lab::attention<typename A::T, A::HQ / A::HKV, A::rotary>(a, c);
}

template <class A, int kG>
__device__ void phase_out(const Params<A>& p, int l, lab::Smem<kSmemK<A>>& sm, const lab::Ctx& c,
                          lab::PreG<kG>& pre) {
  using E = lab::El<typename A::T>;
  const LayerW<A>& w = p.l[l];
  lab::load_input<typename A::T>(p.attn, A::D, lab::Norm::none, nullptr, nullptr, 0.f, sm);
  lab::gemv<1, kG>(w.w_o, A::D, A::D, sm, c, pre, [&](int r, float d, float) {
    p.xm[r] = E::from(lab::ld_f(p.x + r) + (d + bias_of(w.b_o, r)));
  });
}

template <class A, int kG>
__device__ void phase_mlp1(const Params<A>& p, int l, lab::Smem<kSmemK<A>>& sm, const lab::Ctx& c,
                           lab::PreG<kG>& pre) {
  using E = lab::El<typename A::T>;
  const LayerW<A>& w = p.l[l];
  lab::load_input(p.xm, A::D, A::norm, w.n2_g, w.n2_b, A::eps, sm);
  if constexpr (A::gated) {
    // Eager rounding: gate and up as the linears give them, silu(gate), then the product.
    lab::gemv<2, kG>(w.w_1, A::F, A::D, sm, c, pre, [&](int r, float g, float u) {
      const float gs = E::f(E::from(lab::silu(E::f(E::from(g)))));
      p.f[r] = E::from(gs * E::f(E::from(u)));
    });
  } else {
    lab::gemv<1, kG>(w.w_1, A::F, A::D, sm, c, pre, [&](int r, float d, float) {
      p.f[r] = E::from(lab::gelu_tanh(d + bias_of(w.b_1, r)));
    });
  }
}

template <class A, int kG>
__device__ void phase_mlp2(const Params<A>& p, int l, lab::Smem<kSmemK<A>>& sm, const lab::Ctx& c,
                           lab::PreG<kG>& pre) {
  using E = lab::El<typename A::T>;
  const LayerW<A>& w = p.l[l];
  lab::load_input<typename A::T>(p.f, A::F, lab::Norm::none, nullptr, nullptr, 0.f, sm);
  lab::gemv<1, kG>(w.w_2, A::D, A::F, sm, c, pre, [&](int r, float d, float) {
    p.x[r] = E::from(lab::ld_f(p.xm + r) + (d + bias_of(w.b_2, r)));
  });
}

template <class A, int kG>
__device__ void phase_head(const Params<A>& p, lab::Smem<kSmemK<A>>& sm, const lab::Ctx& c,
                           lab::PreG<kG>& pre) {
  lab::load_input(p.x, A::D, A::norm, p.nf_g, p.nf_b, A::eps, sm);
  unsigned long long mine = 0ull;
  lab::gemv<1, kG>(p.wte, A::V, A::D, sm, c, pre, [&](int r, float d, float) {
    p.logits[r] = d;
    mine = max(mine, lab::best_key(d, r));
  });
  if (c.lane == 0 && mine) atomicMax(p.best, mine);
  if (blockIdx.x == 0 && threadIdx.x == 0) {  // every phase that reads len is behind us
    *p.len += 1;
    *p.steps += 1;
  }
}

// ---- the two forms ----
// kEmpty and kInput are floors, timed alone: a launch over the grid that does nothing, and one
// that only reads the layer's input vector with its norm (load_input) -- what every GEMV phase
// pays before its first multiply.
enum Phase : int { kEmbed, kQkv, kAttn, kOut, kMlp1, kMlp2, kHead, kEmpty, kInput };

template <class A, int kG>
__global__ void __launch_bounds__(kThreads)
    one_phase(const __grid_constant__ Params<A> p, int phase, int l) {
  __shared__ lab::Smem<kSmemK<A>> sm;
  const lab::Ctx c = lab::ctx();
  lab::PreG<kG> pre;
  switch (phase) {
    case kEmbed:
      phase_embed(p);
      break;
    case kQkv:
      phase_qkv(p, l, sm, c, pre);
      break;
    case kAttn:
      phase_attn(p, l, c);
      break;
    case kOut:
      phase_out(p, l, sm, c, pre);
      break;
    case kMlp1:
      phase_mlp1(p, l, sm, c, pre);
      break;
    case kMlp2:
      phase_mlp2(p, l, sm, c, pre);
      break;
    case kHead:
      phase_head(p, sm, c, pre);
      break;
    case kEmpty:
      break;
    default:
      lab::load_input(p.x, A::D, A::norm, p.l[l].n1_g, p.l[l].n1_b, A::eps, sm);
      if (threadIdx.x == 0) p.part[blockIdx.x] = sm.x[blockIdx.x % A::D];  // kept: it is read
      break;
  }
}

// kG: the GEMV phases' tile groups (lab_step.cuh, gemv); kFlags: the barrier of flags
// (lab_grid.cuh: no contended atomic) instead of the counting one.
template <class A, bool kPrefetch, int kG = 1, bool kFlags = false>
__global__ void __launch_bounds__(kThreads) whole_step(const __grid_constant__ Params<A> p) {
  __shared__ lab::Smem<kSmemK<A>> sm;
  const lab::Ctx c = lab::ctx();
  lab::PreG<kG> pre;
  unsigned gen = kFlags ? flag_barrier_start(p.words) : 0u;
  const auto barrier = [&] {
    if constexpr (kFlags) flag_barrier(p.words, gen);
    else grid_barrier(p.bar);
  };
  constexpr int kMlp1Rows = A::gated ? 2 : 1;
  phase_embed(p);
  if (kPrefetch) lab::preload<1>(p.l[0].w_qkv, kQkvRows<A>, A::D, c, pre);
  barrier();
  for (int l = 0; l < A::LAYERS; ++l) {
    const LayerW<A>& w = p.l[l];
    phase_qkv(p, l, sm, c, pre);
    barrier();
    phase_attn(p, l, c);
    if (kPrefetch) lab::preload<1>(w.w_o, A::D, A::D, c, pre);
    barrier();
    phase_out(p, l, sm, c, pre);
    if (kPrefetch) lab::preload<kMlp1Rows>(w.w_1, A::F, A::D, c, pre);  // F rows, or F pairs when gated
    barrier();
    phase_mlp1(p, l, sm, c, pre);
    if (kPrefetch) lab::preload<1>(w.w_2, A::D, A::F, c, pre);
    barrier();
    phase_mlp2(p, l, sm, c, pre);
    if (kPrefetch) {
      if (l + 1 < A::LAYERS)
        lab::preload<1>(p.l[l + 1].w_qkv, kQkvRows<A>, A::D, c, pre);
      else
        lab::preload<1>(p.wte, A::V, A::D, c, pre);
    }
    barrier();
  }
  phase_head(p, sm, c, pre);
}

// ---- the device's model ----
constexpr int kStartToken = 464;

template <class A>
struct Model {
  using T = typename A::T;
  Params<A> p{};
  HostNet host;
  std::vector<void*> owned;
  std::vector<std::vector<T>> cache0;  // each layer's initial K and V caches
  size_t weight_bytes = 0;

  template <class U>
  U* alloc(size_t n) {
    void* d;
    CK(cudaMalloc(&d, n * sizeof(U)));
    CK(cudaMemset(d, 0, n * sizeof(U)));
    owned.push_back(d);
    return static_cast<U*>(d);
  }
  // Random values to the device (and their f32 copy to *h); none when n is 0 (no bias).
  const T* make(size_t n, float scale, uint64_t seed, std::vector<float>* h, float offset = 0.f,
                bool weight = false) {
    if (n == 0) return nullptr;
    const std::vector<T> v = lab::random_values<T>(n, scale, seed, offset);
    *h = lab::widen(v);
    T* d = alloc<T>(n);
    CK(cudaMemcpy(d, v.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    if (weight) weight_bytes += n * sizeof(T);
    return d;
  }
  ~Model() {
    for (void* d : owned) cudaFree(d);
  }

  void build() {
    uint64_t seed = 1;
    const float wd = 1.7f / std::sqrt(float(A::D)), wf = 1.7f / std::sqrt(float(A::F));
    const size_t nb = A::bias ? 1 : 0;
    host.l.resize(A::LAYERS);
    for (int l = 0; l < A::LAYERS; ++l) {
      HostLayer& h = host.l[l];
      LayerW<A>& w = p.l[l];
      w.n1_g = make(A::D, 0.2f, seed++, &h.n1_g, 1.f);
      w.n1_b = make(A::norm == lab::Norm::layer ? A::D : 0, 0.1f, seed++, &h.n1_b);
      w.w_qkv = make(size_t(kQkvRows<A>) * A::D, wd, seed++, &h.w_qkv, 0.f, true);
      w.b_qkv = make(nb * kQkvRows<A>, 0.1f, seed++, &h.b_qkv);
      w.w_o = make(size_t(A::D) * A::D, wd, seed++, &h.w_o, 0.f, true);
      w.b_o = make(nb * A::D, 0.1f, seed++, &h.b_o);
      w.n2_g = make(A::D, 0.2f, seed++, &h.n2_g, 1.f);
      w.n2_b = make(A::norm == lab::Norm::layer ? A::D : 0, 0.1f, seed++, &h.n2_b);
      w.w_1 = make(size_t(A::gated ? 2 : 1) * A::F * A::D, wd, seed++, &h.w_1, 0.f, true);
      w.b_1 = make(nb * A::F, 0.1f, seed++, &h.b_1);
      w.w_2 = make(size_t(A::D) * A::F, wf, seed++, &h.w_2, 0.f, true);
      w.b_2 = make(nb * A::D, 0.1f, seed++, &h.b_2);
      const size_t n = size_t(A::HKV) * LMAX * kHD;
      for (int kv = 0; kv < 2; ++kv) {
        std::vector<T> c = lab::random_values<T>(n, 1.f, seed++);
        (kv ? h.v : h.k) = lab::widen(c);
        (kv ? w.v : w.k) = alloc<T>(n);
        cache0.push_back(std::move(c));
      }
    }
    p.nf_g = make(A::D, 0.2f, seed++, &host.nf_g, 1.f);
    p.nf_b = make(A::norm == lab::Norm::layer ? A::D : 0, 0.1f, seed++, &host.nf_b);
    p.wte = make(size_t(A::V) * A::D, 1.f, seed++, &host.wte, 0.f, true);
    p.wpe = make(A::positions ? size_t(LMAX) * A::D : 0, 0.5f, seed++, &host.wpe);
    p.x = alloc<T>(A::D);
    p.xm = alloc<T>(A::D);
    p.qkv = alloc<T>(kQkvRows<A>);
    p.attn = alloc<T>(A::D);
    p.f = alloc<T>(A::F);
    p.part = alloc<float>(size_t(A::HQ) * kMaxSplits * (2 + kHD));
    p.count = alloc<unsigned>(A::HKV);
    p.best = alloc<unsigned long long>(1);
    p.len = alloc<int>(1);
    p.tokens = alloc<int>(LMAX);
    p.steps = alloc<int>(1);
    p.logits = alloc<float>(A::V);
    p.bar = alloc<unsigned>(4);
    p.words = alloc<unsigned>(kFlagWords);
  }

  // Back to the state before the first step: caches as generated, len L0, the start token.
  void reset() {
    for (int l = 0; l < A::LAYERS; ++l) {
      const size_t n = size_t(A::HKV) * LMAX * kHD * sizeof(T);
      CK(cudaMemcpy(p.l[l].k, cache0[2 * l].data(), n, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(p.l[l].v, cache0[2 * l + 1].data(), n, cudaMemcpyHostToDevice));
    }
    const int len = L0, zero = 0;
    const unsigned long long best = 0xffffffffull - kStartToken;  // a key whose row is the token
    CK(cudaMemcpy(p.len, &len, sizeof len, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p.steps, &zero, sizeof zero, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(p.best, &best, sizeof best, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
  }

  struct Run {
    std::vector<int> tokens;
    std::vector<float> logits;  // the last step's
  };
  Run read(int steps) {
    Run r;
    r.tokens.resize(steps);
    r.logits.resize(A::V);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(r.tokens.data(), p.tokens, steps * sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(r.logits.data(), p.logits, A::V * sizeof(float), cudaMemcpyDeviceToHost));
    return r;
  }
};

// Tile groups of the deep forms (lab_step.cuh, gemv): up to 2 * kDeep tiles in flight a warp.
constexpr int kDeep = 2;

struct Result {
  std::string model;
  int grid = 0, grid_deep = 0, kernels = 0, barriers = 0;
  double launches = 0, persistent = 0, no_prefetch = 0, floor = 0, err = 0, scale = 0;
  // The deep forms (kDeep tile groups, grid_deep) and the barrier of flags.
  double launches_deep = 0, persistent_deep = 0, flags = 0, deep_flags = 0;
  bool same = false, same_np = false, tokens_match = false, gave_up = false, len_ok = false;
  bool same_deep = false;  // every deep and flag form gave the launches form's bits
  // The launches form's phases one kind at a time (a graph of that kind's launches over the
  // layers; the embedding's and the head's alone): us a launch -- where its step goes.
  double phase_us[9] = {};
};
const char* const kPhaseNames[9] = {"embed", "qkv", "attn", "out", "mlp1", "mlp2", "head", "empty", "x+norm"};

template <class A>
Result run_model(int reps, int sms, cudaStream_t st) {
  Result res;
  res.model = A::name;
  Model<A> m;
  m.build();
  // Each persistent kernel's grid must be resident: the kG 1 forms share one grid, the deep
  // forms (more registers a thread) another; the launches forms use the grid of their kind.
  const auto resident = [&](auto kernel) {
    int n = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, 0));
    return n;
  };
  const int grid = std::min({resident(whole_step<A, true>), resident(whole_step<A, false>),
                             resident(whole_step<A, true, 1, true>)}) *
                   sms;
  const int grid_deep =
      std::min(resident(whole_step<A, true, kDeep, false>), resident(whole_step<A, true, kDeep, true>)) * sms;
  res.grid = grid;
  res.grid_deep = grid_deep;
  res.kernels = 2 + 5 * A::LAYERS;
  res.barriers = 1 + 5 * A::LAYERS;
  const Params<A>& p = m.p;
  const auto launches_of = [&](auto g, int gr) {
    constexpr int kG = decltype(g)::value;
    one_phase<A, kG><<<1, kThreads, 0, st>>>(p, kEmbed, 0);
    for (int l = 0; l < A::LAYERS; ++l)
      for (int ph : {kQkv, kAttn, kOut, kMlp1, kMlp2})
        one_phase<A, kG><<<gr, kThreads, 0, st>>>(p, ph, l);
    one_phase<A, kG><<<gr, kThreads, 0, st>>>(p, kHead, 0);
    CK(cudaGetLastError());
  };
  using One = std::integral_constant<int, 1>;
  using Deep = std::integral_constant<int, kDeep>;
  auto launches = [&] { launches_of(One{}, grid); };
  auto launches_deep = [&] { launches_of(Deep{}, grid_deep); };
  const auto whole = [&](void (*kernel)(Params<A>), int gr) {
    kernel<<<gr, kThreads, 0, st>>>(p);
    CK(cudaGetLastError());
  };
  auto persistent = [&](bool prefetch) { whole(prefetch ? whole_step<A, true> : whole_step<A, false>, grid); };
  auto persistent_deep = [&] { whole(whole_step<A, true, kDeep, false>, grid_deep); };
  auto flags = [&] { whole(whole_step<A, true, 1, true>, grid); };
  auto deep_flags = [&] { whole(whole_step<A, true, kDeep, true>, grid_deep); };
  // Checks: A::steps steps of each form from the same state, and on the host.
  m.reset();
  for (int i = 0; i < A::steps; ++i) launches();
  const auto want = m.read(A::steps);
  for (int pf = 0; pf < 2; ++pf) {
    m.reset();
    for (int i = 0; i < A::steps; ++i) persistent(pf == 1);
    const auto got = m.read(A::steps);
    (pf ? res.same : res.same_np) =
        got.tokens == want.tokens &&
        std::memcmp(got.logits.data(), want.logits.data(), A::V * sizeof(float)) == 0;
  }
  res.same_deep = true;
  for (const auto& form : std::vector<std::function<void()>>{launches_deep, persistent_deep, flags, deep_flags}) {
    m.reset();
    for (int i = 0; i < A::steps; ++i) form();
    const auto got = m.read(A::steps);
    res.same_deep = res.same_deep && got.tokens == want.tokens &&
                    std::memcmp(got.logits.data(), want.logits.data(), A::V * sizeof(float)) == 0;
  }
  std::vector<float> ref;
  std::vector<int> ref_tokens;
  int tok = kStartToken;
  for (int i = 0; i < A::steps; ++i) {
    ref_tokens.push_back(tok);
    tok = reference_step<A>(m.host, tok, L0 + i, ref);
  }
  for (int i = 0; i < A::V; ++i) {
    res.err = std::max(res.err, double(std::fabs(ref[i] - want.logits[i])));
    res.scale = std::max(res.scale, double(std::fabs(ref[i])));
  }
  res.tokens_match = ref_tokens == want.tokens;
  std::printf("%s: tokens", A::name);
  for (int t : want.tokens) std::printf(" %d", t);
  std::printf(" (host:");
  for (int t : ref_tokens) std::printf(" %d", t);
  std::printf(")\n");
  // Timings: each form's step as one graph, replayed (each replay one more key); two rounds.
  for (int round = 0; round < 2; ++round) {
    m.reset();
    res.launches = lab_time_graph_us(st, reps, launches);
    m.reset();
    res.persistent = lab_time_graph_us(st, reps, [&] { persistent(true); });
    m.reset();
    res.no_prefetch = lab_time_graph_us(st, reps, [&] { persistent(false); });
    m.reset();
    res.launches_deep = lab_time_graph_us(st, reps, launches_deep);
    m.reset();
    res.persistent_deep = lab_time_graph_us(st, reps, persistent_deep);
    m.reset();
    res.flags = lab_time_graph_us(st, reps, flags);
    m.reset();
    res.deep_flags = lab_time_graph_us(st, reps, deep_flags);
  }
  unsigned bar_flags[3], words[2];
  CK(cudaMemcpy(bar_flags, p.bar, sizeof bar_flags, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(words, p.words, sizeof words, cudaMemcpyDeviceToHost));
  int len = 0;
  CK(cudaMemcpy(&len, p.len, sizeof len, cudaMemcpyDeviceToHost));
  for (int ph = kEmbed; ph <= kInput; ++ph) {
    m.reset();
    const int n = ph == kEmbed || ph == kHead ? 1 : A::LAYERS;
    const double us = lab_time_graph_us(st, reps, [&] {
      for (int l = 0; l < n; ++l)
        one_phase<A, 1><<<ph == kEmbed ? 1 : grid, kThreads, 0, st>>>(p, ph, l);
      CK(cudaGetLastError());
    });
    res.phase_us[ph] = us / n;
  }
  res.gave_up = bar_flags[2] != 0 || words[1] != 0;
  res.len_ok = len == L0 + reps + 3;
  res.floor = m.weight_bytes / 4140e3;  // us at the H200's measured copy bandwidth
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 100;
  const char* json = nullptr;
  lab_args(argc, argv, &reps, &json);
  reps = std::min(reps, 300);  // each timing runs reps + 3 steps from L0: they must fit LMAX
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs; reps %d\n", prop.name, prop.multiProcessorCount, reps);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const std::vector<Result> rs = {run_model<Gpt2>(reps, prop.multiProcessorCount, st),
                                  run_model<Llama>(reps, prop.multiProcessorCount, st)};
  std::printf("\n%-14s %6s %9s %9s %11s %12s %9s  %s\n", "us a step", "grid", "launches",
              "(kernels)", "persistent", "no prefetch", "floor", "checks");
  bool ok = true;
  for (const Result& r : rs) {
    std::printf(
        "%-14s %6d %9.1f %9d %11.1f %12.1f %9.1f  persistent = launches: %s / %s; host tokens %s, "
        "logits "
        "err %.3g of %.3g%s%s\n",
        r.model.c_str(), r.grid, r.launches, r.kernels, r.persistent, r.no_prefetch, r.floor,
        r.same ? "yes" : "NO", r.same_np ? "yes" : "NO", r.tokens_match ? "same" : "DIFFER", r.err,
        r.scale, r.gave_up ? "; a barrier GAVE UP" : "",
        r.len_ok ? "" : "; the length did not advance as it should");
    ok &= r.same && r.same_np && r.same_deep && !r.gave_up && r.len_ok;
  }
  std::printf("\nthe deep forms (tile groups of %d: up to %d tiles in flight a warp) and the barrier of flags, us a step:\n"
              "%-14s %6s %9s %11s %14s %11s  %s\n",
              kDeep, 2 * kDeep, "", "grid", "launches", "persistent", "flags (grid)", "deep+flags", "checks");
  for (const Result& r : rs)
    std::printf("%-14s %6d %9.1f %11.1f %14.1f %11.1f  same bits as launches: %s\n", r.model.c_str(),
                r.grid_deep, r.launches_deep, r.persistent_deep, r.flags, r.deep_flags,
                r.same_deep ? "yes" : "NO");
  std::printf("\nthe launches form's phases alone, us a launch:\n%-14s", "");
  for (const char* n : kPhaseNames) std::printf(" %8s", n);
  std::printf("\n");
  for (const Result& r : rs) {
    std::printf("%-14s", r.model.c_str());
    for (double u : r.phase_us) std::printf(" %8.2f", u);
    std::printf("\n");
  }
  if (json) {
    FILE* f = std::fopen(json, "w");
    if (!f) return 2;
    std::fprintf(f, "{\"device\": \"%s\", \"reps\": %d, \"results\": [", prop.name, reps);
    for (size_t i = 0; i < rs.size(); ++i) {
      const Result& r = rs[i];
      std::fprintf(
          f,
          "%s{\"model\": \"%s\", \"grid\": %d, \"kernels\": %d, \"barriers\": %d, \"launches_us\": "
          "%.2f, "
          "\"persistent_us\": %.2f, \"no_prefetch_us\": %.2f, \"floor_us\": %.2f, \"same_bits\": "
          "%s, "
          "\"same_bits_no_prefetch\": %s, \"host_tokens_match\": %s, \"logits_max_err\": %.4g, "
          "\"gave_up\": %s, \"grid_deep\": %d, \"launches_deep_us\": %.2f, \"persistent_deep_us\": %.2f, "
          "\"flags_us\": %.2f, \"deep_flags_us\": %.2f, \"same_bits_deep\": %s, \"phase_us\": {",
          i ? ", " : "", r.model.c_str(), r.grid, r.kernels, r.barriers, r.launches, r.persistent,
          r.no_prefetch, r.floor, r.same ? "true" : "false", r.same_np ? "true" : "false",
          r.tokens_match ? "true" : "false", r.err, r.gave_up ? "true" : "false", r.grid_deep,
          r.launches_deep, r.persistent_deep, r.flags, r.deep_flags, r.same_deep ? "true" : "false");
      for (int ph = 0; ph < 9; ++ph)
        std::fprintf(f, "%s\"%s\": %.3f", ph ? ", " : "", kPhaseNames[ph], r.phase_us[ph]);
      std::fprintf(f, "}}");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return ok ? 0 : 1;
}
