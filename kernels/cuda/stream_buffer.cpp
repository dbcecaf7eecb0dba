#include "kernels/cuda/stream_buffer.hpp"

#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/check.cuh"

namespace livefuse::cuda {

void* stream_buffer(StreamBuffer kind, int device, cudaStream_t s, size_t bytes, size_t zeroed_tail) {
  struct Last {
    int device = -1;
    cudaStream_t stream = nullptr;
    void* mem = nullptr;
  };
  thread_local Last last[kStreamBufferKinds];
  Last& l = last[static_cast<int>(kind)];
  if (l.mem && l.device == device && l.stream == s) return l.mem;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  LF_CUDA_CALL(cudaStreamIsCapturing(s, &capturing));
  using Key = std::tuple<int, cudaStream_t, StreamBuffer>;
  static std::mutex mu;
  static auto& buffers = *new std::map<Key, void*>();  // leaked (the header)
  std::lock_guard<std::mutex> lock(mu);
  void*& mem = buffers[Key{device, s, kind}];
  if (!mem) {
    if (capturing != cudaStreamCaptureStatusNone) return nullptr;
    void* fresh = nullptr;
    LF_CUDA_CALL(cudaMalloc(&fresh, bytes));
    // Ordered before the stream's first use of the buffer.
    if (zeroed_tail)
      LF_CUDA_CALL(cudaMemsetAsync(static_cast<char*>(fresh) + bytes - zeroed_tail, 0, zeroed_tail, s));
    mem = fresh;
  }
  l = Last{device, s, mem};
  return mem;
}

}  // namespace livefuse::cuda
