#pragma once
// A one-thread kernel that keeps `stream` busy for about `ns` nanoseconds (the GPU's global
// timer). Timing code enqueues it first so the host gets ahead of the GPU: the launches queued
// behind it then run back to back, as they do in a CUDA graph, and a short kernel's measured
// time is its own rather than the host's launch cost (gemm_lt.cpp's tuning uses it).
#include <cstdint>

namespace livefuse::cuda {

void gpu_delay(void* stream, uint32_t ns);

}  // namespace livefuse::cuda
