#pragma once
// Programmatic dependent launch (PDL, sm_90+), the device side; the host side is pdl.hpp.
//
// [ Note -- kernels that start before the one before them ends ]
// A decode step is a chain of short kernels (a GPT-2 layer: four GEMVs, the cache append, the
// attention; ~3-6 us each on the H200), and each one's first memory round trip -- the weights,
// the KV cache, all in DRAM -- begins only after the kernel before it has drained and this one
// has been launched. A kernel launched with PDL (launch_pdl, pdl.hpp) may be resident while
// the kernel before it on the stream still runs: it issues L2 prefetches of what no kernel
// writes in the meantime (its weights, the cache's earlier keys), then waits at pdl_wait() until
// the earlier grid has completed and its writes are visible, and only then reads anything a
// kernel wrote or writes anything at all. Prefetches are always safe (L2 is the point of
// coherence: a line prefetched before a write is the written line after it). Right after its
// wait a kernel lets the next one launch (pdl_release): at most two grids overlap, the running one
// and the next one's prologue. A kernel launched without PDL, or with nothing before it, finds
// its wait already satisfied: the same code runs either way. What pays is real work before the
// wait: a plan's GEMV loads its first weights there, its decode attention its first cached keys,
// where nothing the kernel before writes is among them (planner/early_reads.cpp, "a plan's reads
// before its PDL wait"); the L2 prefetch alone measured no faster
// (README, "Programmatic dependent launch"). On by default; LIVEFUSE_PDL=0 turns it off.
#include <cstdint>

namespace livefuse::cuda {

// Everything before this call may only prefetch (prefetch_l2): no load of memory another kernel
// writes, no store at all. Then lets the next PDL kernel on the stream launch.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Asks L2 for [p, p + bytes) without waiting (a TMA bulk prefetch). p and bytes are rounded
// inwards to 16 bytes (the instruction's unit), so nothing past the range is touched.
__device__ __forceinline__ void prefetch_l2(const void* p, int64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t begin = (a + 15) & ~uintptr_t{15}, end = (a + static_cast<uintptr_t>(bytes)) & ~uintptr_t{15};
  constexpr uintptr_t kMost = uintptr_t{1} << 30;  // the size operand is 32 bits
  for (uintptr_t b = begin; b < end; b += kMost) {
    const uint32_t n = static_cast<uint32_t>(end - b < kMost ? end - b : kMost);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(b), "r"(n) : "memory");
  }
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace livefuse::cuda
