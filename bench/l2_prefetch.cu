#include "bench/l2_prefetch.hpp"
#include "bench/bench_cuda.hpp"
#include "kernels/cuda/pdl.cuh"

namespace lfbench {
namespace {

using livefuse::cuda::prefetch_l2;

struct Ranges {
  const void* p[kMaxL2Ranges];
  int64_t bytes[kMaxL2Ranges];
  int n;
};

// Block b prefetches the b-th chunk, counting each range's chunks in turn.
__global__ void l2_prefetch_kernel(Ranges r, int64_t chunk) {
  if (threadIdx.x != 0) return;
  int64_t b = blockIdx.x;
  for (int i = 0; i < r.n; ++i) {
    const int64_t chunks = (r.bytes[i] + chunk - 1) / chunk;
    if (b < chunks) {
      const int64_t off = b * chunk, n = r.bytes[i] - off < chunk ? r.bytes[i] - off : chunk;
      prefetch_l2(static_cast<const char*>(r.p[i]) + off, n);
      return;
    }
    b -= chunks;
  }
}

}  // namespace

void prefetch_to_l2(std::span<const L2Range> ranges, void* stream, int64_t chunk) {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      major < 9 || chunk < 16)
    return;
  Ranges r{};
  int64_t blocks = 0;
  for (const L2Range& x : ranges) {
    if (r.n == kMaxL2Ranges) break;
    if (!x.p || x.bytes <= 0) continue;
    r.p[r.n] = x.p, r.bytes[r.n] = x.bytes, ++r.n;
    blocks += (x.bytes + chunk - 1) / chunk;
  }
  if (blocks == 0) return;
  l2_prefetch_kernel<<<static_cast<unsigned>(blocks), 32, 0, static_cast<cudaStream_t>(stream)>>>(
      r, chunk);
  BENCH_CUDA(cudaPeekAtLastError());
}

}  // namespace lfbench
