#pragma once
// Error checks for CUDA runtime and cuBLASLt calls. Each failure names the call that failed,
// where, and what CUDA said, prefixed by the component ("[cuda] ..."). A failed CUDA call is
// not a user's mistake we could have validated, but it is reported as livefuse::Error (not an
// assertion) because it is usually the device's state (out of memory, a sticky fault from an
// earlier kernel) and the caller may want to handle it.
//
// Usable from .cu and .cpp files alike: only the runtime API header is needed. (Named apart
// from runtime/cuda_check.hpp's LF_CUDA_CHECK so the two never collide in one file.)
#include <cuda_runtime_api.h>

#include "livefuse/error.hpp"

namespace livefuse::cuda::detail {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* call, const char* file, int line);
}  // namespace livefuse::cuda::detail

// LF_CUDA_CALL(cudaMemcpyAsync(...)): throws naming the call on any error.
#define LF_CUDA_CALL(call)                                                            \
  do {                                                                                \
    const cudaError_t lf_err_ = (call);                                               \
    if (lf_err_ != cudaSuccess)                                                       \
      ::livefuse::cuda::detail::throw_cuda_error(lf_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a <<<>>> launch: reports a bad configuration or a sticky error, naming the kernel.
// cudaPeekAtLastError (not Get) so the check costs no state change on success.
#define LF_CUDA_LAUNCH_CHECK(kernel_name)                                                     \
  do {                                                                                        \
    const cudaError_t lf_err_ = cudaPeekAtLastError();                                        \
    if (lf_err_ != cudaSuccess) {                                                             \
      (void)cudaGetLastError();                                                               \
      ::livefuse::cuda::detail::throw_cuda_error(lf_err_, "launch of " kernel_name, __FILE__, \
                                                 __LINE__);                                   \
    }                                                                                         \
  } while (0)

// LF_CUBLAS_CALL(cublasLtMatmul(...)): cublasStatus_t, 0 = CUBLAS_STATUS_SUCCESS.
#define LF_CUBLAS_CALL(call)                                                           \
  do {                                                                                 \
    const int lf_st_ = static_cast<int>(call);                                         \
    if (lf_st_ != 0)                                                                   \
      ::livefuse::cuda::detail::throw_cublas_error(lf_st_, #call, __FILE__, __LINE__); \
  } while (0)
