#pragma once
// The decode-step lab's phases (tools/gpu/lab/decode_step.cu), each a function of
// (warp, warps) so that one code serves both forms: a kernel a phase over the grid, or one
// resident kernel whose phases meet at grid barriers (lab_grid.cuh).
//  * GEMV phases: each block writes its input vector (normalized: layer_norm or rms_norm) into
//    shared memory in f32; each warp takes whole weight rows (16-byte loads, kU a lane in
//    flight, the next tile's loads issued before this one's math) -- or pairs of rows (gate and
//    up of a gated MLP, stacked as one weight) -- and hands each row's dot to an epilogue.
//  * The attention phase: (K/V head, 32-key split) items, the G query heads of a K/V head in one
//    warp (grouped-query); lane j scores key j of the split; a split's partial softmax goes to a
//    workspace and the split of a K/V head that arrives last folds them (an atomic count).
//    Optionally rotary (rotate-half): q rotated as loaded, the step's new key rotated by the warp
//    whose split holds it, which writes it back into the cache (its later readers see it so).
// Standalone (nvcc alone).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "lab_grid.cuh"

namespace lab {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kU = 4, kTile = 32 * kU;  // a lane's 16-byte weight loads a tile; a warp's tile
constexpr int kHD = 64;                 // head dim
constexpr int kSplitKeys = 32;          // keys a warp scores in the attention phase

// ---- element types ----
template <class T>
struct El;
template <>
struct El<__half> {
  using T2 = __half2;
  static __host__ __device__ float f(__half v) { return __half2float(v); }
  static __host__ __device__ __half from(float v) { return __float2half(v); }
  static __device__ float2 f2(__half2 v) { return __half22float2(v); }
  static __device__ __half2 from2(float a, float b) { return __floats2half2_rn(a, b); }
};
template <>
struct El<__nv_bfloat16> {
  using T2 = __nv_bfloat162;
  static __host__ __device__ float f(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __host__ __device__ __nv_bfloat16 from(float v) { return __float2bfloat16(v); }
  static __device__ float2 f2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
  static __device__ __nv_bfloat162 from2(float a, float b) { return __floats2bfloat162_rn(a, b); }
};
template <class T>
__device__ __forceinline__ float ld_f(const T* p) {  // written by another block: through L2
  return El<T>::f(__ldcg(p));
}

struct Ctx {
  int warp, warps, lane;  // this warp in the grid, the grid's warps
};
__device__ __forceinline__ Ctx ctx() {
  return Ctx{static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / 32,
             static_cast<int>(gridDim.x) * kWarps, static_cast<int>(threadIdx.x) % 32};
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum over the block in a fixed order (every block gets the same bits).
__device__ inline float block_sum(float v, float* red) {
  v = warp_sum(v);
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float s = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) s += red[w];
  return s;
}
__device__ __forceinline__ float gelu_tanh(float x) {
  return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float silu(float x) { return x / (1.f + __expf(-x)); }

// ---- GEMV phases ----
enum class Norm { none, layer, rms };
template <int K>
struct alignas(16) Smem {
  float x[K];
  float red[kWarps];
};
// The block's copy of a phase's input vector (k elements) in f32, normalized: layer_norm (two
// passes) or rms_norm, then * g (+ b).
template <class T, int K>
__device__ void load_input(const T* x, int k, Norm norm, const T* g, const T* b, float eps,
                           Smem<K>& sm) {
  __syncthreads();  // the block's last phase is done with sm.x
  for (int i = threadIdx.x; i < k; i += kThreads) sm.x[i] = ld_f(x + i);
  if (norm == Norm::none) {
    __syncthreads();
    return;
  }
  float mean = 0.f;
  if (norm == Norm::layer) {
    float s = 0.f;
    for (int i = threadIdx.x; i < k; i += kThreads) s += sm.x[i];
    mean = block_sum(s, sm.red) / k;
  }
  float q = 0.f;
  for (int i = threadIdx.x; i < k; i += kThreads) {
    const float d = sm.x[i] - mean;
    q += d * d;
  }
  const float rstd = rsqrtf(block_sum(q, sm.red) / k + eps);
  for (int i = threadIdx.x; i < k; i += kThreads)
    sm.x[i] = (sm.x[i] - mean) * rstd * El<T>::f(g[i]) + (b ? El<T>::f(b[i]) : 0.f);
  __syncthreads();
}

// A weight tile, or a group of kG tiles, loaded ahead (before a barrier, for the phase after it).
template <int kG>
struct PreG {
  uint4 w[kG][kU];
  bool have = false;
};
using Pre = PreG<1>;
template <class T>
__device__ __forceinline__ void load_tile(const T* w, int k, int row, int tile, int lane,
                                          uint4 (&out)[kU]) {
  const int chunks = k / 8;
  const uint4* r = reinterpret_cast<const uint4*>(w) + static_cast<int64_t>(row) * chunks;
  const int c0 = tile * kTile + lane;
#pragma unroll
  for (int u = 0; u < kU; ++u)
    if (c0 + u * 32 < chunks) out[u] = load_weight(r + c0 + u * 32);
}
// A warp's walk over one GEMV phase: its items (rows, or pairs of rows with kRows 2) c.warp,
// c.warp + c.warps, ..., each tiles_a_row tiles a row; tile t of the walk is `row`'s `tile`.
template <int kRows>
struct GemvWalk {
  int items, tiles_a_row, tiles_an_item, tiles;
  __device__ GemvWalk(int items_, int k, const Ctx& c) : items(items_) {
    tiles_a_row = (k / 8 + kTile - 1) / kTile;
    tiles_an_item = kRows * tiles_a_row;
    const int mine = c.warp < items ? (items - 1 - c.warp) / c.warps + 1 : 0;
    tiles = mine * tiles_an_item;
  }
  __device__ void where(int t, const Ctx& c, int* row, int* tile) const {
    const int item = c.warp + (t / tiles_an_item) * c.warps, within = t % tiles_an_item;
    *row = item + (within / tiles_a_row) * items;
    *tile = within % tiles_a_row;
  }
};
// Tiles t0 .. t0 + kG - 1 of the walk (those that exist) into g.
template <int kRows, int kG, class T>
__device__ __forceinline__ void load_group(const T* w, int k, const GemvWalk<kRows>& wk, int t0,
                                           const Ctx& c, uint4 (&g)[kG][kU]) {
#pragma unroll
  for (int j = 0; j < kG; ++j) {
    if (t0 + j >= wk.tiles) break;
    int row, tile;
    wk.where(t0 + j, c, &row, &tile);
    load_tile(w, k, row, tile, c.lane, g[j]);
  }
}
// The first tiles gemv<kRows, kG>() below will want from this warp.
template <int kRows, int kG, class T>
__device__ __forceinline__ void preload(const T* w, int items, int k, const Ctx& c,
                                        PreG<kG>& pre) {
  const GemvWalk<kRows> wk(items, k, c);
  pre.have = wk.tiles > 0;
  if (pre.have) load_group<kRows, kG>(w, k, wk, 0, c, pre.w);
}
template <class T>
__device__ __forceinline__ float dot_tile(const uint4 (&w)[kU], const float* xs, int k, int tile,
                                          int lane, float acc) {
  const int chunks = k / 8;
  const int c0 = tile * kTile + lane;
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int c = c0 + u * 32;
    if (c >= chunks) break;
    const auto* h = reinterpret_cast<const typename El<T>::T2*>(&w[u]);
    const float4 a = *reinterpret_cast<const float4*>(xs + c * 8);
    const float4 b = *reinterpret_cast<const float4*>(xs + c * 8 + 4);
    const float2 h0 = El<T>::f2(h[0]), h1 = El<T>::f2(h[1]), h2 = El<T>::f2(h[2]),
                 h3 = El<T>::f2(h[3]);
    acc = fmaf(h0.x, a.x, acc);
    acc = fmaf(h0.y, a.y, acc);
    acc = fmaf(h1.x, a.z, acc);
    acc = fmaf(h1.y, a.w, acc);
    acc = fmaf(h2.x, b.x, acc);
    acc = fmaf(h2.y, b.y, acc);
    acc = fmaf(h3.x, b.z, acc);
    acc = fmaf(h3.y, b.w, acc);
  }
  return acc;
}
// y = W x over the block's sm.x. kRows 1: items are rows c.warp, c.warp + c.warps, ... of W
// (items x k); epi(row, dot, 0). kRows 2: item i is the pair of rows i and i + items of W
// (2 * items x k: gate and up stacked); epi(i, dot of row i, dot of row i + items). At lane 0.
// kG: the warp's tiles in groups of kG, the next group's loads issued before this one's math --
// up to 2 * kG tiles in flight a warp. kG 1 is one tile and the next (a chain of one DRAM round
// trip a tile where a warp walks several); every kG sums each row's tiles in the same order, so
// gives the same bits.
template <int kRows, int kG, class T, int K, class Epi>
__device__ void gemv(const T* w, int items, int k, const Smem<K>& sm, const Ctx& c, PreG<kG>& pre,
                     Epi epi) {
  const GemvWalk<kRows> wk(items, k, c);
  uint4 cur[kG][kU], next[kG][kU];
  if (wk.tiles > 0) {
    if (pre.have) {
#pragma unroll
      for (int j = 0; j < kG; ++j)
#pragma unroll
        for (int u = 0; u < kU; ++u) cur[j][u] = pre.w[j][u];
    } else {
      load_group<kRows, kG>(w, k, wk, 0, c, cur);
    }
  }
  pre.have = false;
  float acc = 0.f, first = 0.f;
  for (int t0 = 0; t0 < wk.tiles; t0 += kG) {
    if (t0 + kG < wk.tiles) load_group<kRows, kG>(w, k, wk, t0 + kG, c, next);
#pragma unroll
    for (int j = 0; j < kG; ++j) {
      const int t = t0 + j;
      if (t >= wk.tiles) break;
      int row, tile;
      wk.where(t, c, &row, &tile);
      acc = dot_tile<T>(cur[j], sm.x, k, tile, c.lane, acc);
      if (tile == wk.tiles_a_row - 1) {
        const float s = warp_sum(acc);
        acc = 0.f;
        if (kRows == 1 || row >= items) {
          const int item = kRows == 1 ? row : row - items;
          if (c.lane == 0) epi(item, kRows == 1 ? s : first, kRows == 1 ? 0.f : s);
        } else {
          first = s;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kG; ++j)
#pragma unroll
      for (int u = 0; u < kU; ++u) cur[j][u] = next[j][u];
  }
}

// ---- attention ----
// cos / sin of rotary pair e (0 .. kHD / 2) at position pos: theta^(-2e / kHD) radians a position.
__device__ __forceinline__ float2 rope(int pos, int e, float theta) {
  const float inv = exp2f(-2.f * e / kHD * log2f(theta));
  float s, c;
  sincosf(static_cast<float>(pos) * inv, &s, &c);
  return {c, s};
}
struct AttnArgs {
  const void* q;    // [HKV * G][kHD], the step's query rows (unrotated when rotary)
  void *k, *v;      // caches [HKV][lmax][kHD]; the step's key / value already at row pos
  void* out;        // [HKV * G][kHD]
  float* part;      // [HKV * G][max_splits][2 + kHD]
  unsigned* count;  // [HKV]: splits of a K/V head done
  int hkv, lmax, max_splits, pos;  // pos: the step's position; keys 0 .. pos
  float theta;                     // rotary base (rotary only)
};
template <class T, int G, bool kRotary>
__device__ void attention(const AttnArgs& a, const Ctx& c) {
  using E = El<T>;
  using T2 = typename E::T2;
  const int keys = a.pos + 1, splits = (keys + kSplitKeys - 1) / kSplitKeys;
  const T* qb = static_cast<const T*>(a.q);
  T* kc = static_cast<T*>(a.k);
  const T* vc = static_cast<const T*>(a.v);
  for (int item = c.warp; item < a.hkv * splits; item += c.warps) {
    const int kvh = item / splits, sp = item % splits, k0 = sp * kSplitKeys;
    const int nk = min(kSplitKeys, keys - k0);
    // Lane l holds dims 2l, 2l + 1 of each query head of the group (rotated, then rounded as an
    // eager rotary's result is).
    float2 q[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      q[g] = E::f2(__ldcg(reinterpret_cast<const T2*>(qb + (kvh * G + g) * kHD) + c.lane));
      if (kRotary) {
        const float2 other = {__shfl_xor_sync(0xffffffffu, q[g].x, 16),
                              __shfl_xor_sync(0xffffffffu, q[g].y, 16)};
        const float sign =
            c.lane < 16 ? -1.f : 1.f;  // dims < 32 take -x[e + 32], the rest +x[e - 32]
        const float2 r0 = rope(a.pos, (2 * c.lane) % (kHD / 2), a.theta);
        const float2 r1 = rope(a.pos, (2 * c.lane + 1) % (kHD / 2), a.theta);
        q[g] = E::f2(
            E::from2(q[g].x * r0.x + sign * other.x * r0.y, q[g].y * r1.x + sign * other.y * r1.y));
      }
    }
    // Lane j scores key k0 + j: its K row in registers (zeros past nk).
    uint4 kv[kHD / 8];
#pragma unroll
    for (int i = 0; i < kHD / 8; ++i) kv[i] = make_uint4(0u, 0u, 0u, 0u);
    const int64_t krow = (static_cast<int64_t>(kvh) * a.lmax + k0 + c.lane) * kHD;
    if (c.lane < nk) {
      const uint4* kr = reinterpret_cast<const uint4*>(kc + krow);
#pragma unroll
      for (int i = 0; i < kHD / 8; ++i) kv[i] = __ldcg(kr + i);
      if (kRotary && k0 + c.lane == a.pos) {  // the step's key: rotate it, and keep it rotated
        T* h = reinterpret_cast<T*>(kv);
#pragma unroll
        for (int e = 0; e < kHD / 2; ++e) {
          const float2 r = rope(a.pos, e, a.theta);
          const float x0 = E::f(h[e]), x1 = E::f(h[e + kHD / 2]);
          h[e] = E::from(x0 * r.x - x1 * r.y);
          h[e + kHD / 2] = E::from(x1 * r.x + x0 * r.y);
        }
        uint4* kw = reinterpret_cast<uint4*>(kc + krow);
#pragma unroll
        for (int i = 0; i < kHD / 8; ++i) kw[i] = kv[i];
      }
    }
    float score[G];
#pragma unroll
    for (int g = 0; g < G; ++g) score[g] = 0.f;
#pragma unroll
    for (int i = 0; i < kHD / 8; ++i) {
      const T2* hk = reinterpret_cast<const T2*>(&kv[i]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int pair = i * 4 + j;  // dims 2 * pair, 2 * pair + 1
        const float2 kf = E::f2(hk[j]);
#pragma unroll
        for (int g = 0; g < G; ++g) {  // every lane takes part in each shuffle
          const float qx = __shfl_sync(0xffffffffu, q[g].x, pair),
                      qy = __shfl_sync(0xffffffffu, q[g].y, pair);
          score[g] = fmaf(kf.y, qy, fmaf(kf.x, qx, score[g]));
        }
      }
    }
    float m[G], pr[G], lsum[G];
    float2 acc[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      score[g] = c.lane < nk ? score[g] * 0.125f : -INFINITY;
      m[g] = warp_max(score[g]);
      pr[g] = c.lane < nk ? __expf(score[g] - m[g]) : 0.f;
      lsum[g] = warp_sum(pr[g]);
      acc[g] = {0.f, 0.f};
    }
    for (int j = 0; j < nk; ++j) {
      const float2 v2 = E::f2(__ldcg(
          reinterpret_cast<const T2*>(vc + (static_cast<int64_t>(kvh) * a.lmax + k0 + j) * kHD) +
          c.lane));
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float pj = __shfl_sync(0xffffffffu, pr[g], j);
        acc[g].x = fmaf(pj, v2.x, acc[g].x);
        acc[g].y = fmaf(pj, v2.y, acc[g].y);
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float* part = a.part + (static_cast<int64_t>(kvh * G + g) * a.max_splits + sp) * (2 + kHD);
      if (c.lane == 0) part[0] = m[g], part[1] = lsum[g];
      part[2 + 2 * c.lane] = acc[g].x;
      part[3 + 2 * c.lane] = acc[g].y;
    }
    __threadfence();
    __syncwarp();
    unsigned done = 0;
    if (c.lane == 0) done = atomicAdd(a.count + kvh, 1u);
    done = __shfl_sync(0xffffffffu, done, 0);
    if (done != static_cast<unsigned>(splits - 1)) continue;
    // The last split of the K/V head: fold each query head's splits in order.
    __threadfence();
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float* hp = a.part + static_cast<int64_t>(kvh * G + g) * a.max_splits * (2 + kHD);
      float mx = -INFINITY;
      for (int t = 0; t < splits; ++t) mx = fmaxf(mx, __ldcg(hp + t * (2 + kHD)));
      float den = 0.f, ox = 0.f, oy = 0.f;
      for (int t = 0; t < splits; ++t) {
        const float* pt = hp + t * (2 + kHD);
        const float e = __expf(__ldcg(pt) - mx);
        den = fmaf(e, __ldcg(pt + 1), den);
        ox = fmaf(e, __ldcg(pt + 2 + 2 * c.lane), ox);
        oy = fmaf(e, __ldcg(pt + 3 + 2 * c.lane), oy);
      }
      reinterpret_cast<T2*>(static_cast<T*>(a.out) + (kvh * G + g) * kHD)[c.lane] =
          E::from2(ox / den, oy / den);
    }
    if (c.lane == 0) a.count[kvh] = 0u;
  }
}

// The argmax key: the logit's bits ordered as unsigned, then the row inverted (ties: the lower
// row).
__device__ __forceinline__ unsigned long long best_key(float v, int row) {
  unsigned u = __float_as_uint(v);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(u) << 32) | (0xffffffffu - static_cast<unsigned>(row));
}
__device__ __forceinline__ int token_of(unsigned long long key) {
  return static_cast<int>(0xffffffffu - static_cast<unsigned>(key & 0xffffffffu));
}

// ---- host ----
// Uniform in [-scale, scale) + offset from a hash of (seed, i).
template <class T>
std::vector<T> random_values(size_t n, float scale, uint64_t seed, float offset = 0.f) {
  std::vector<T> h(n);
  uint64_t s = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (auto& v : h) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    v = El<T>::from((2.f * static_cast<float>(s >> 40) * (1.f / 16777216.f) - 1.f) * scale +
                    offset);
  }
  return h;
}
template <class T>
std::vector<float> widen(const std::vector<T>& h) {
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = El<T>::f(h[i]);
  return f;
}
template <class T>
float round_to(double v) {
  return El<T>::f(El<T>::from(static_cast<float>(v)));
}

}  // namespace lab
