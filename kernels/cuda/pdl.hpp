#pragma once
// Programmatic dependent launch, the host side (the note is in pdl.cuh). Only kernels that call
// pdl_wait() before touching memory another kernel writes may be launched through launch_pdl:
// launched so, a kernel without that wait would race the kernel before it.
#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/check.cuh"

namespace livefuse::cuda {

// LIVEFUSE_PDL=1 (off by default: README says why) and a device of compute capability 9.0+.
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

// kernel<<<grid, block, smem, stream>>>(args...), with PDL when enabled.
template <class... Params, class... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attrs[1];
  add_pdl(cfg, attrs);
  LF_CUDA_CALL(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace livefuse::cuda
