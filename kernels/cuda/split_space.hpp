#pragma once
// Scratch where the blocks of one launch meet through global memory: the decode attention's
// splits of a head when they are more than one thread-block cluster holds
// (kernels/cuda/attention_decode.cu). One per (device, stream), allocated zeroed at the stream's
// first use and kept, so later launches allocate nothing and can be captured in a graph.
//
// [ Note -- why per stream, and why the counters return to zero ]
// Launches on one stream run one after another (a kernel launched with PDL reads and writes
// nothing before its pdl_wait, so it never overlaps the one before it here), so they can share
// one space; launches on two streams could run at once, so they must not. Each launch's last
// block to arrive at a counter sets it back to zero, so the next launch -- eager, or a node of a
// graph captured from the stream -- finds it as the allocation left it.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/stream_buffer.hpp"

namespace livefuse::cuda {

inline constexpr size_t kSplitSpaceBytes = size_t{2} << 20;  // partials
inline constexpr int64_t kSplitSpaceCounters = 4096;         // arrival counters

struct SplitSpace {
  void* part = nullptr;       // kSplitSpaceBytes
  unsigned* count = nullptr;  // kSplitSpaceCounters, all zero between launches
};

// The space of (current device, s): the partials, then the counters, in one stream_buffer.
// Empty (null pointers) when the stream has none yet and is being captured: an allocation is not
// allowed then, and the caller takes a path without one.
inline SplitSpace split_space(cudaStream_t s) {
  constexpr size_t kCounts = kSplitSpaceCounters * sizeof(unsigned);
  void* mem = stream_buffer(StreamBuffer::split_space, current_device(), s, kSplitSpaceBytes + kCounts, kCounts);
  if (!mem) return {};
  return {mem, reinterpret_cast<unsigned*>(static_cast<char*>(mem) + kSplitSpaceBytes)};
}

}  // namespace livefuse::cuda
