#pragma once
// Thread-block clusters (sm_90+), the host side shared by the kernels that combine their blocks
// through distributed shared memory (the decode attention's splits, a long row's reduction).
#include <cuda_runtime.h>

namespace livefuse::cuda {

// The launch attribute for clusters of `blocks` blocks along x.
inline cudaLaunchAttribute cluster_attr(unsigned blocks) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = blocks;
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  return attr;
}

// How many clusters of `blocks` blocks of `threads` threads (and `smem` bytes of dynamic shared
// memory each) of `kernel` the device runs at once: 0 where the code that runs is not sm_90 code
// (sm_80 code on an sm_90 device) or none fits. Callers ask once per kernel and keep the answer.
template <class Kernel>
int active_clusters(Kernel kernel, unsigned blocks, unsigned threads, size_t smem = 0) {
  cudaFuncAttributes fa{};
  if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess || fa.binaryVersion < 90) {
    (void)cudaGetLastError();
    return 0;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr = cluster_attr(blocks);
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return clusters;
}

// Whether `kernel` can run as clusters of `blocks` blocks of `threads` here (active_clusters).
template <class Kernel>
bool clusters_fit(Kernel kernel, unsigned blocks, unsigned threads) {
  return active_clusters(kernel, blocks, threads) > 0;
}

}  // namespace livefuse::cuda
