#include "livefuse/device.hpp"

#include "livefuse/config.hpp"
#include "livefuse/error.hpp"
#include "runtime/cuda_check.hpp"

namespace livefuse {

bool cuda_available() {
#if LIVEFUSE_HAS_CUDA
  // Asked once: without a driver or GPU this fails fast and everything runs on the CPU.
  static const bool available = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e == cudaSuccess && n > 0;
  }();
  return available;
#else
  return false;
#endif
}

Device default_device() {
  static const Device d = [] {
    const std::string& forced = config().device;
    if (forced == "cpu") return Device::cpu();
    if (forced == "cuda") {
      LF_CHECK(cuda_available(), "device", "LIVEFUSE_DEVICE=cuda but no usable GPU was found");
      return Device::cuda(0);
    }
    return cuda_available() ? Device::cuda(0) : Device::cpu();
  }();
  return d;
}

}  // namespace livefuse
