#pragma once
// Device memory kept per (device, stream, kind): scratch that the launches of one stream share
// because they run one after another -- the cuBLASLt workspace (gemm_lt.cpp), the decode
// attention's split space (split_space.hpp). Allocated at the stream's first use and kept (never
// freed: kernels may still be enqueued from atexit handlers after static destructors would have
// run), so later launches allocate nothing and can be captured in a graph.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace livefuse::cuda {

enum class StreamBuffer : uint8_t { gemm_workspace, split_space };
inline constexpr int kStreamBufferKinds = 2;

// The `kind` buffer of (device, s): `bytes` long, its last `zeroed_tail` bytes zeroed in s's
// order when it is allocated. Null when s has none yet and is being captured -- no allocation is
// allowed then; the caller takes a path without one or reports it. A kind is always asked for
// with the same sizes. The last buffer found is cached per thread and kind (no lock then).
void* stream_buffer(StreamBuffer kind, int device, cudaStream_t s, size_t bytes, size_t zeroed_tail = 0);

}  // namespace livefuse::cuda
