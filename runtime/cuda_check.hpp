#pragma once
// CUDA runtime error checks that name the failing call (MLX style). Only for LIVEFUSE_HAS_CUDA.
#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime.h>

#include "livefuse/error.hpp"

// A failed call's error is cleared from the thread's last error as it is reported: left there, the
// next launch check (the eager fallback's after a failed graph launch) reported it as its own.
#define LF_CUDA_CHECK(call)                                                                        \
  do {                                                                                             \
    cudaError_t lf_err_ = (call);                                                                  \
    if (lf_err_ != cudaSuccess) {                                                                  \
      (void)cudaGetLastError();                                                                    \
      throw ::livefuse::Error(                                                                     \
          ::livefuse::detail::concat("[cuda] ", #call, " failed: ", cudaGetErrorString(lf_err_))); \
    }                                                                                              \
  } while (0)
#endif
