#pragma once
// CUDA error checks for the CUDA-only benchmarks: a failing call ends the run with status 2
// and the call's text (a benchmark has no caller to hand an error to).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define BENCH_CUDA(call)                                                      \
  do {                                                                        \
    const cudaError_t e_ = (call);                                            \
    if (e_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                           \
    }                                                                         \
  } while (0)
