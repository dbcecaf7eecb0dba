// Scratch kept per (device, stream, kind) (kernels/cuda/stream_buffer.hpp): the cuBLASLt
// workspace and the decode attention's split space. Launches of one stream share a buffer, two
// streams or two kinds never do, the zeroed tail is zero, and a stream captured before it ever
// had one gets none (the caller takes a path without it) instead of an allocation the capture
// forbids. Needs a GPU.
#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime.h>

#include <vector>

#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/split_space.hpp"
#include "kernels/cuda/stream_buffer.hpp"
#include "tests/test_util.hpp"

namespace cu = livefuse::cuda;

#define CU_OK(call) REQUIRE((call) == cudaSuccess)

LF_CUDA_TEST_CASE("stream buffers: one a (stream, kind), kept, its tail zeroed; none for a stream first met in a capture") {
  const int dev = cu::current_device();
  cudaStream_t a = nullptr, b = nullptr, fresh = nullptr;
  CU_OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CU_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  CU_OK(cudaStreamCreateWithFlags(&fresh, cudaStreamNonBlocking));
  constexpr size_t kBytes = 4096, kTail = 1024;
  void* wa = cu::stream_buffer(cu::StreamBuffer::gemm_workspace, dev, a, kBytes);
  void* sa = cu::stream_buffer(cu::StreamBuffer::split_space, dev, a, kBytes, kTail);
  void* wb = cu::stream_buffer(cu::StreamBuffer::gemm_workspace, dev, b, kBytes);
  REQUIRE(wa);
  REQUIRE(sa);
  REQUIRE(wb);
  CHECK(wa != sa);  // two kinds of one stream
  CHECK(wa != wb);  // one kind of two streams
  // Kept: asked again (past the thread's one-entry cache, by asking for another stream first).
  CHECK(cu::stream_buffer(cu::StreamBuffer::gemm_workspace, dev, a, kBytes) == wa);
  CHECK(cu::stream_buffer(cu::StreamBuffer::split_space, dev, a, kBytes, kTail) == sa);
  CU_OK(cudaStreamSynchronize(a));
  std::vector<unsigned char> tail(kTail, 0xff);
  CU_OK(cudaMemcpy(tail.data(), static_cast<char*>(sa) + kBytes - kTail, kTail, cudaMemcpyDeviceToHost));
  bool zero = true;
  for (unsigned char c : tail) zero &= c == 0;
  CHECK(zero);

  // The split space is that buffer, cut in two.
  const cu::SplitSpace space = cu::split_space(a);
  REQUIRE(space.part);
  CHECK(reinterpret_cast<char*>(space.count) - static_cast<char*>(space.part) ==
        static_cast<std::ptrdiff_t>(cu::kSplitSpaceBytes));

  // A stream being captured that never had one: none, and nothing enqueued into the capture.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
  CU_OK(cudaStreamBeginCapture(fresh, mode));
  void* during = cu::stream_buffer(cu::StreamBuffer::gemm_workspace, dev, fresh, kBytes);
  const cu::SplitSpace none = cu::split_space(fresh);
  cudaGraph_t g = nullptr;
  CU_OK(cudaStreamEndCapture(fresh, &g));
  size_t nodes = 99;
  CU_OK(cudaGraphGetNodes(g, nullptr, &nodes));
  CU_OK(cudaGraphDestroy(g));
  CHECK(during == nullptr);
  CHECK(none.part == nullptr);
  CHECK(none.count == nullptr);
  CHECK(nodes == 0);
  // Out of the capture the stream gets its buffers.
  CHECK(cu::stream_buffer(cu::StreamBuffer::gemm_workspace, dev, fresh, kBytes) != nullptr);
  CHECK(cu::split_space(fresh).part != nullptr);
  CU_OK(cudaStreamSynchronize(fresh));
  for (cudaStream_t s : {a, b, fresh}) CU_OK(cudaStreamDestroy(s));
}
#endif  // LIVEFUSE_HAS_CUDA
