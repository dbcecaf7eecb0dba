#include "kernels/cuda/device_info.hpp"

#include <array>
#include <atomic>
#include <mutex>

#include "kernels/cuda/check.cuh"

namespace livefuse::cuda {

namespace detail {
void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  // Reported here: it must not linger as the thread's last error, where the next launch check
  // (the eager fallback's, say) would report it as its own.
  (void)cudaGetLastError();
  throw Error(livefuse::detail::concat("[cuda] ", call, " failed: ", cudaGetErrorName(err), " (",
                                       cudaGetErrorString(err), ") at ", file, ":", line));
}
void throw_cublas_error(int status, const char* call, const char* file, int line) {
  throw Error(livefuse::detail::concat("[cublasLt] ", call, " failed with status ", status, " at ",
                                       file, ":", line));
}
}  // namespace detail

namespace {
constexpr int kMaxDevices = 64;
struct InfoSlot {
  std::once_flag once;
  DeviceInfo info;
};
std::array<InfoSlot, kMaxDevices> g_infos;
}  // namespace

int current_device() {
  int d = 0;
  LF_CUDA_CALL(cudaGetDevice(&d));
  return d;
}

const DeviceInfo& device_info(int device) {
  LF_ASSERT(device >= 0 && device < kMaxDevices, "device index ", device, " out of range");
  InfoSlot& slot = g_infos[device];
  std::call_once(slot.once, [&] {
    LF_CUDA_CALL(
        cudaDeviceGetAttribute(&slot.info.sm_count, cudaDevAttrMultiProcessorCount, device));
    LF_CUDA_CALL(cudaDeviceGetAttribute(&slot.info.max_threads_per_sm,
                                        cudaDevAttrMaxThreadsPerMultiProcessor, device));
    LF_CUDA_CALL(
        cudaDeviceGetAttribute(&slot.info.cc_major, cudaDevAttrComputeCapabilityMajor, device));
  });
  return slot.info;
}

}  // namespace livefuse::cuda
