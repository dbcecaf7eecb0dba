#pragma once
// How split-KV decode attention folds the softmax states of a head's splits -- each split's row
// max m, sum l and P V accumulator -- into the head's output, for both decode kernels (the FMA
// kernel, attention_decode.cu, and the streaming one, attention_decode_stream.cu), whether the
// states sit in a cluster block's shared memory or in the stream's workspace. Device code.
//
// [ Note -- one round trip to the splits ]
// The fold reads every split's (m, l, x) for the element it writes. Asked for one split after
// another (the max first, then the weighted sums), that is a dependent memory round trip per
// split or two: ~1 us of L2 or distributed-shared-memory latency a fold at 8 splits. Here a batch
// of kBatch splits' three values is asked for at once and folded after they land; a later batch
// rescales what came before to its new max. A head of up to kBatch splits costs one round trip.
//
// [ Note -- the last split to arrive ]
// Through the workspace, each block writes its partial and counts its arrival; the last to
// arrive folds. The block's stores come before a block barrier, and thread 0's arrival is one
// acq_rel atomic at device scope: a release is cumulative over what the barrier ordered before
// it, and the acquire (the barrier after it passing it on to the block) orders the other
// blocks' partials before the fold's loads -- one fence a block, not one a thread (the
// threadFenceReduction sample's pattern). The loads go through L2 (__ldcg): L1 is not coherent.
#include "kernels/device/lf_math.cuh"

namespace livefuse::cuda {

// exp(m - ref): the weight of a softmax state with max m in one with max ref. A state that has
// seen only -inf keys weighs 0 (its l and acc are 0; exp(-inf - -inf) would be NaN). The one
// MUFU instruction, flushing subnormals (lf_exp2): m <= ref, so a flushed weight is below 2^-126
// of the max's own weight of 1 -- nothing a sum of them can show. exp2f's range checks cost the
// streaming kernel's fold 0.1-0.6 us a launch (H100, session 49; its fold had been ftz).
__device__ __forceinline__ float softmax_weight(float m, float ref) {
  constexpr float kLog2e = 1.4426950408889634f;
  return m == -__builtin_huge_valf() ? 0.0f : lf_exp2((m - ref) * kLog2e);
}

// One output element folded over n states: state(i, m, l, x) loads state i's row max, sum and
// accumulator element. Gives the fold's (m, l, v); the element is v / l where m is finite (a NaN
// max -- a NaN or +inf score -- and an all -inf row are NaN in eager's softmax).
template <int kBatch, class State>
__device__ __forceinline__ void fold_states(int n, State state, float& m, float& l, float& v) {
  constexpr float kNegInf = -__builtin_huge_valf();
  m = kNegInf, l = 0.0f, v = 0.0f;
  for (int i0 = 0; i0 < n; i0 += kBatch) {
    float ms[kBatch], ls[kBatch], xs[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      // Predicated, not clamped: loads of a state past the end (the same state again, masked
      // after) cost the streaming kernel 0.6-2.4 us a launch at 2-16 splits of a 20-batch --
      // through distributed shared memory the most (H100, session 49).
      ms[u] = kNegInf, ls[u] = 0.0f, xs[u] = 0.0f;
      if (i0 + u < n) state(i0 + u, ms[u], ls[u], xs[u]);
    }
    float mn = m;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) mn = lf_max(mn, ms[u]);
    const float wo = softmax_weight(m, mn);  // what the batches before summed, at the new max
    l *= wo, v *= wo;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      // A state whose keys were all -inf for the row adds nothing (0 * a NaN stays out).
      const float w = softmax_weight(ms[u], mn);
      if (w != 0.0f) l = fmaf(ls[u], w, l), v = fmaf(xs[u], w, v);
    }
    m = mn;
  }
}

// The element's value from its fold: v / l, or NaN where m is not finite.
__device__ __forceinline__ float folded_value(float m, float l, float v) {
  return isfinite(m) ? v / l : __int_as_float(0x7fc00000);
}

// Counts the block's arrival at `count` (the last-to-arrive note); true in every thread of the
// last of `n` blocks to arrive. The last one's thread 0 sets the count back to zero for the next
// launch on the stream at once: no block of this launch arrives after it, and the next launch
// reads the count only after its wait for this one. Call from every thread, after the block's
// partial is stored.
__device__ __forceinline__ bool last_to_arrive(unsigned* count, unsigned n) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(count) : "memory");
    last = before == n - 1;
    if (last) *count = 0;
  }
  __syncthreads();
  return last;
}

}  // namespace livefuse::cuda
