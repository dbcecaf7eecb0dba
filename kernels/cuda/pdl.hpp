#pragma once
// Programmatic dependent launch, the host side (the note is in pdl.cuh). Only kernels that call
// pdl_wait() before touching memory another kernel writes may be launched through launch_pdl:
// launched so, a kernel without that wait would race the kernel before it.
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/cluster.hpp"
#include "kernels/cuda/launch_record.hpp"

namespace livefuse::cuda {

// LIVEFUSE_PDL (on by default; 0 turns it off) and a device of compute capability 9.0+.
bool pdl_enabled();

// Adds the PDL attribute to `cfg` (attrs must have room for one more) when pdl_enabled().
inline void add_pdl(cudaLaunchConfig_t& cfg, cudaLaunchAttribute* attrs) {
  if (!pdl_enabled()) return;
  cudaLaunchAttribute& at = attrs[cfg.numAttrs++];
  at = {};
  at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attrs;
}

// kernel<<<grid, block, smem, stream>>>(args...), with PDL when enabled and, where `cluster` > 1,
// the blocks along x in thread-block clusters of that many (sm_90 code only: the callers check,
// cluster.hpp); a failed launch throws naming `name`, as LF_CUDA_LAUNCH_CHECK does after a <<<>>>
// launch. Recorded instead while the thread records (launch_record.hpp).
template <class... Params, class... Args>
void launch_pdl_clusters(const char* name, unsigned cluster, void (*kernel)(Params...), dim3 grid,
                         dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  if (record_launch(kernel, grid, block, smem, cluster, std::forward<Args>(args)...)) return;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attrs[2]{};
  if (cluster > 1) {
    attrs[0] = cluster_attr(cluster);
    cfg.attrs = attrs;
    cfg.numAttrs = 1;
  }
  add_pdl(cfg, attrs);
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    detail::throw_cuda_error(err, (std::string("launch of ") + name).c_str(), __FILE__, __LINE__);
  }
}

// launch_pdl_clusters without clusters.
template <class... Params, class... Args>
void launch_pdl(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                cudaStream_t stream, Args&&... args) {
  launch_pdl_clusters(name, 1, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace livefuse::cuda
