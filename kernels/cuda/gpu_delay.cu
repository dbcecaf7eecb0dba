#include "kernels/cuda/check.cuh"
#include "kernels/cuda/gpu_delay.hpp"

namespace livefuse::cuda {
namespace {

__global__ void gpu_delay_kernel(uint64_t ns) {
  uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
#if __CUDA_ARCH__ >= 700
    __nanosleep(1000);  // keeps the spinning thread off the issue slots of the kernels it delays
#endif
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

}  // namespace

void gpu_delay(void* stream, uint32_t ns) {
  gpu_delay_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(ns);
  LF_CUDA_LAUNCH_CHECK("gpu_delay_kernel");
}

}  // namespace livefuse::cuda
