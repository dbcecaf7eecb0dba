// Memory allocated inside a graph capture (graphs/cuda_graph.hpp, runtime/memory_pool.hpp,
// CaptureScope): freed within it, the graph launches again and again; still held when it ends, the
// graph is discarded (a relaunch would allocate it again while live: CUDA refuses with
// cudaErrorInvalidValue), the storage gets a block of its own that works, and CaptureHeldMemory
// says so. A step that throws abandons the capture, the same way. And a failed CUDA call leaves
// no error behind for the next launch check to report as its own.
#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime.h>

#include <stdexcept>

#include "graphs/cuda_graph.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/memory_pool.hpp"
#endif
#include "test_util.hpp"

#if LIVEFUSE_HAS_CUDA
namespace {

namespace lf = livefuse;

// A stream of its own, and the device's memory pool set up outside any capture (its first use
// sets attributes a capture forbids; a program's plans capture only after a direct run).
cudaStream_t fresh_stream() {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  (void)lf::allocate_storage(lf::Device::cuda(0), 256, s);
  return s;
}

// Writes `byte` over the storage on `s`, waits, and reads its first and last bytes back.
std::pair<unsigned char, unsigned char> fill_and_read(const lf::Storage& st, unsigned char byte,
                                                      cudaStream_t s) {
  REQUIRE(cudaMemsetAsync(st.ptr, byte, st.bytes, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  unsigned char first = 0, last = 0;
  REQUIRE(cudaMemcpy(&first, st.ptr, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaMemcpy(&last, static_cast<char*>(st.ptr) + st.bytes - 1, 1, cudaMemcpyDeviceToHost) ==
          cudaSuccess);
  return {first, last};
}

}  // namespace

LF_CUDA_TEST_CASE("capture memory: freed inside the capture, the graph launches again and again") {
  const cudaStream_t s = fresh_stream();
  const lf::Device dev = lf::Device::cuda(0);
  const auto before = lf::graphs::capture_counts();
  lf::graphs::CudaGraph g = lf::graphs::capture(s, [&] {
    auto tmp = lf::allocate_storage(dev, 4096, s);  // a graph memory node, freed in the graph
    REQUIRE(cudaMemsetAsync(tmp->ptr, 7, 4096, s) == cudaSuccess);
  });
  lf::graphs::CudaGraphExec exec(g);
  for (int i = 0; i < 3; ++i) exec.launch(s);
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(lf::graphs::capture_counts().held_memory == before.held_memory);
  CHECK(cudaStreamDestroy(s) == cudaSuccess);
}

LF_CUDA_TEST_CASE(
    "capture memory: held past the capture, the graph is discarded and the storage rehomed") {
  const cudaStream_t s = fresh_stream();
  const lf::Device dev = lf::Device::cuda(0);
  const auto before = lf::graphs::capture_counts();
  std::shared_ptr<lf::Storage> kept;
  std::vector<std::shared_ptr<lf::Storage>> parts;
  bool refused = false;
  try {
    (void)lf::graphs::capture(s, [&] {
      kept = lf::allocate_storage(dev, 1000, s);
      parts = lf::allocate_storage_run(dev, 300, 3, s);  // parts of one block, as sibling outputs
      REQUIRE(cudaMemsetAsync(kept->ptr, 1, 1000, s) == cudaSuccess);
    });
  } catch (const lf::graphs::CaptureHeldMemory& e) {
    refused = true;
    CHECK(std::string(e.what()).find("still held after the capture") != std::string::npos);
  }
  CHECK(refused);
  CHECK(lf::graphs::capture_counts().held_memory == before.held_memory + 1);
  CHECK_FALSE(lf::CaptureScope::active());
  // Each rehomed storage is memory of its own now: written and read back outside any graph.
  REQUIRE(kept);
  CHECK(fill_and_read(*kept, 0x5a, s) == std::pair<unsigned char, unsigned char>{0x5a, 0x5a});
  REQUIRE(parts.size() == 3);
  for (size_t i = 0; i < parts.size(); ++i)
    CHECK(fill_and_read(*parts[i], static_cast<unsigned char>(0x10 + i), s) ==
          std::pair<unsigned char, unsigned char>{static_cast<unsigned char>(0x10 + i),
                                                  static_cast<unsigned char>(0x10 + i)});
  CHECK(fill_and_read(*parts[0], 0x10, s).first == 0x10);  // the others did not overwrite it
  kept.reset();
  parts.clear();
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(cudaStreamDestroy(s) == cudaSuccess);
}

LF_CUDA_TEST_CASE("capture memory: a step that throws abandons the capture, its memory rehomed") {
  const cudaStream_t s = fresh_stream();
  const lf::Device dev = lf::Device::cuda(0);
  const auto before = lf::graphs::capture_counts();
  std::shared_ptr<lf::Storage> kept;
  CHECK_THROWS_AS(lf::graphs::capture(s,
                                      [&] {
                                        kept = lf::allocate_storage(dev, 512, s);
                                        throw std::runtime_error("a kernel still compiling");
                                      }),
                  std::runtime_error);
  CHECK(lf::graphs::capture_counts().abandoned == before.abandoned + 1);
  REQUIRE(kept);
  CHECK(fill_and_read(*kept, 0x33, s) == std::pair<unsigned char, unsigned char>{0x33, 0x33});
  kept.reset();
  CHECK(cudaStreamDestroy(s) == cudaSuccess);
}

LF_CUDA_TEST_CASE("cuda checks: a failed call's error does not outlive its report") {
  // An invalid launch-free call: a negative-size copy fails with cudaErrorInvalidValue.
  CHECK_THROWS_AS(LF_CUDA_CHECK(cudaMemcpy(nullptr, nullptr, static_cast<size_t>(-1),
                                           cudaMemcpyDeviceToDevice)),
                  lf::Error);
  CHECK(cudaPeekAtLastError() == cudaSuccess);  // the next launch check finds nothing of it
}
#endif
