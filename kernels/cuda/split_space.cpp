#include "kernels/cuda/split_space.hpp"

#include <mutex>
#include <unordered_map>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device_info.hpp"

namespace livefuse::cuda {

SplitSpace split_space(cudaStream_t s) {
  const int device = current_device();
  thread_local int last_device = -1;
  thread_local cudaStream_t last_stream = nullptr;
  thread_local SplitSpace last;
  if (last.part && last_device == device && last_stream == s) return last;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  LF_CUDA_CALL(cudaStreamIsCapturing(s, &capturing));
  static std::mutex mu;
  // Leaked, as the cuBLASLt workspaces are (gemm_lt.cpp): kernels may still be enqueued from
  // atexit handlers after static destructors would have run.
  static auto& spaces = *new std::unordered_map<uint64_t, SplitSpace>();
  const uint64_t key = reinterpret_cast<uint64_t>(s) ^ (uint64_t(device) << 56);
  std::lock_guard<std::mutex> lock(mu);
  SplitSpace& sp = spaces[key];
  if (!sp.part) {
    if (capturing != cudaStreamCaptureStatusNone) return SplitSpace{};
    constexpr size_t kCounts = kSplitSpaceCounters * sizeof(unsigned);
    void* mem = nullptr;
    LF_CUDA_CALL(cudaMalloc(&mem, kSplitSpaceBytes + kCounts));
    // Ordered before the stream's first use of the space; the partials need no zeroing.
    LF_CUDA_CALL(cudaMemsetAsync(static_cast<char*>(mem) + kSplitSpaceBytes, 0, kCounts, s));
    sp = SplitSpace{mem, reinterpret_cast<unsigned*>(static_cast<char*>(mem) + kSplitSpaceBytes)};
  }
  last_device = device, last_stream = s, last = sp;
  return sp;
}

}  // namespace livefuse::cuda
