#pragma once
// Streams. Every thread has a current stream per device (the device's default stream
// unless a StreamGuard says otherwise). A switch of stream is a sync point for the deferred
// calls of the stream being left.
#include <cstdint>

#include "livefuse/device.hpp"

namespace livefuse {

class Stream {
 public:
  Stream() = default;
  // A new stream on `device` (a cudaStream_t on CUDA; an ordering id on the CPU, where work
  // runs synchronously). Owned by the runtime for the life of the process.
  static Stream create(Device device = default_device());
  // Wraps a stream the user created (e.g. torch.cuda.current_stream().cuda_stream). The same
  // handle wrapped again is the same Stream (same id).
  static Stream wrap(void* cuda_stream, Device device);
  static Stream current(Device device = default_device());
  static Stream default_stream(Device device = default_device());

  void* handle() const { return handle_; }  // cudaStream_t, or nullptr
  Device device() const { return device_; }
  uint32_t id() const { return id_; }  // small dense id, used for per-stream trace windows
  void synchronize() const;            // flushes deferred work on it, then waits
  bool operator==(const Stream& o) const { return id_ == o.id_; }

 private:
  Stream(void* h, Device d, uint32_t id) : handle_(h), device_(d), id_(id) {}
  void* handle_ = nullptr;
  Device device_;
  uint32_t id_ = 0;
  friend struct StreamRegistry;
};

class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_;
};

// Flushes deferred work of the current thread and waits for the current stream of `device`.
void synchronize(Device device = default_device());

// The stream with a given id (Stream::id()); throws Error for an unknown id.
Stream stream_by_id(uint32_t id);

}  // namespace livefuse
