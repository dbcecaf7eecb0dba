#pragma once
// The persistent labs' device pieces (tools/gpu/lab/decode_persistent.cu, decode_step.cu): a warp's
// sum, a weight load that bypasses L1, and the grid barrier. Standalone (nvcc alone).
#include <cuda_runtime.h>

#include <cstdint>

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Weights: read-only for the whole run, streamed once (no L1 allocation).
__device__ __forceinline__ uint4 load_weight(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The grid barrier. Sense by generation: a block reads the generation, arrives; the last to
// arrive resets the count and publishes the next generation; the others wait for it. The count
// is back at 0 after every barrier, so the next launch starts clean. bar[0] count, bar[1]
// generation, bar[2] the give-up flag: a wait over ~2 s (not every block resident) gives up
// instead of hanging the machine, and says so there.
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// Spins until done() -- or ~2 s have passed (not every block resident): then sets *give_up and
// returns, rather than hang the machine.
template <class Done>
__device__ inline void spin_until(Done done, unsigned* give_up) {
  const long long start = clock64();
  while (!done())
    if (clock64() - start > (1ll << 32)) {
      atomicExch(give_up, 1u);
      return;
    }
}
__device__ inline void grid_barrier(unsigned* bar) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned gen = ld_acquire(bar + 1);
    __threadfence();
    unsigned arrived;
    asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;"
                 : "=r"(arrived)
                 : "l"(bar)
                 : "memory");
    if (arrived == gridDim.x - 1) {
      asm volatile("st.relaxed.gpu.global.u32 [%0], 0;" ::"l"(bar) : "memory");
      asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(bar + 1), "r"(gen + 1) : "memory");
    } else {
      spin_until([&] { return ld_acquire(bar + 1) != gen; }, bar + 2);
    }
    __threadfence();
  }
  __syncthreads();
}

// A barrier of flags: each block stores its arrival (the barrier's generation) in a word of its
// own -- no contended atomic -- one warp of block 0 polls them all, then publishes the generation,
// on which every other block's thread 0 spins. words[0] the published generation, words[1] the
// give-up flag, words[kFlagArrivals + b] block b's arrival; `gen` (every thread's copy) starts as words[0]
// read at the kernel's start (flag_barrier_start) and is the generation the last barrier published.
constexpr int kFlagArrivals = 64;
constexpr int kFlagWords = kFlagArrivals + 4096;  // what a caller allocates and zeroes: 4096 blocks at most
__device__ __forceinline__ unsigned flag_barrier_start(const unsigned* words) {
  return ld_acquire(words);
}
__device__ inline void flag_barrier(unsigned* words, unsigned& gen) {
  __syncthreads();
  const unsigned target = gen + 1;
  if (threadIdx.x == 0) {
    __threadfence();
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(words + kFlagArrivals + blockIdx.x), "r"(target)
                 : "memory");
  }
  if (blockIdx.x == 0 && threadIdx.x < 32) {
    for (unsigned b = threadIdx.x; b < gridDim.x; b += 32)
      spin_until([&] { return ld_acquire(words + kFlagArrivals + b) == target; }, words + 1);
    __syncwarp();
    if (threadIdx.x == 0) {
      __threadfence();
      asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(words), "r"(target) : "memory");
    }
  } else if (threadIdx.x == 0) {
    spin_until([&] { return ld_acquire(words) == target; }, words + 1);
    __threadfence();
  }
  gen = target;
  __syncthreads();
}
