// Streams: a small registry gives every stream a dense id (the monitor keeps one trace
// window per stream id). The CUDA default stream of each device is a runtime-created
// non-blocking stream, not the legacy NULL stream, because graph capture needs a real stream.
#include "livefuse/stream.hpp"

#include <mutex>
#include <vector>

#include "livefuse/error.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/executor.hpp"
#include "runtime/trace_sink.hpp"

namespace livefuse {

struct StreamRegistry {
  std::mutex mu;
  std::vector<Stream> all;  // index == id
  Stream cpu_default, cuda_default;
  bool cuda_default_made = false;

  static StreamRegistry& get() {
    // Leaked on purpose: streams may be used from static destructors of user code.
    static StreamRegistry* r = new StreamRegistry;
    return *r;
  }
  StreamRegistry() {
    cpu_default = Stream(nullptr, Device::cpu(), 0);
    all.push_back(cpu_default);
  }
  Stream add(void* h, Device d) {
    std::lock_guard<std::mutex> g(mu);
    return add_locked(h, d);
  }
  // One entry per CUDA handle: wrapping a stream again (a plan run on the caller's stream, a
  // program wrapping its own stream every call) returns the same Stream, so the registry stays
  // bounded and the id a binding set is keyed by stays the same.
  Stream find_or_add(void* h, Device d) {
    std::lock_guard<std::mutex> g(mu);
    for (const Stream& s : all)
      if (s.handle() == h && s.device() == d) return s;
    return add_locked(h, d);
  }
  Stream add_locked(void* h, Device d) {
    Stream s(h, d, static_cast<uint32_t>(all.size()));
    all.push_back(s);
    return s;
  }
  Stream default_cuda([[maybe_unused]] Device d) {
    std::lock_guard<std::mutex> g(mu);
    if (!cuda_default_made) {
#if LIVEFUSE_HAS_CUDA
      LF_CHECK(cuda_available(), "stream", "no GPU available for ", d.str());
      cudaStream_t h = nullptr;
      LF_CUDA_CHECK(cudaSetDevice(d.index));
      LF_CUDA_CHECK(cudaStreamCreateWithFlags(&h, cudaStreamNonBlocking));
      cuda_default = Stream(h, d, static_cast<uint32_t>(all.size()));
      all.push_back(cuda_default);
      cuda_default_made = true;
#else
      throw Error("[stream] CUDA stream requested but livefuse was built without CUDA");
#endif
    }
    return cuda_default;
  }
};

namespace {
thread_local Stream t_cpu_current;
thread_local Stream t_cuda_current;
thread_local bool t_cpu_set = false, t_cuda_set = false;
}  // namespace

Stream Stream::create(Device device) {
  if (device.is_cpu()) return StreamRegistry::get().add(nullptr, device);
#if LIVEFUSE_HAS_CUDA
  LF_CHECK(cuda_available(), "Stream::create", "no GPU available for ", device.str());
  cudaStream_t h = nullptr;
  LF_CUDA_CHECK(cudaStreamCreateWithFlags(&h, cudaStreamNonBlocking));
  return StreamRegistry::get().add(h, device);
#else
  throw Error("[Stream::create] CUDA stream requested but livefuse was built without CUDA");
#endif
}

Stream Stream::wrap(void* cuda_stream, Device device) {
  LF_CHECK(device.is_cuda(), "Stream::wrap", "only CUDA streams can be wrapped, got ",
           device.str());
  return StreamRegistry::get().find_or_add(cuda_stream, device);
}

Stream Stream::default_stream(Device device) {
  if (device.is_cpu()) return StreamRegistry::get().cpu_default;
  return StreamRegistry::get().default_cuda(device);
}

Stream Stream::current(Device device) {
  if (device.is_cpu()) return t_cpu_set ? t_cpu_current : StreamRegistry::get().cpu_default;
  if (!t_cuda_set) {
    t_cuda_current = default_stream(device);
    t_cuda_set = true;
  }
  return t_cuda_current;
}

void Stream::synchronize() const {
  Executor::flush_all();
  if (TraceSink* sink = trace_sink()) sink->on_sync(id_);
#if LIVEFUSE_HAS_CUDA
  if (device_.is_cuda()) LF_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
#endif
}

StreamGuard::StreamGuard(const Stream& s) {
  prev_ = Stream::current(s.device());
  if (!(prev_ == s)) {
    // Leaving a stream is a sync point for the calls deferred on it.
    Executor::flush_all();
    if (TraceSink* sink = trace_sink()) sink->on_sync(prev_.id());
  }
  if (s.device().is_cpu())
    t_cpu_current = s, t_cpu_set = true;
  else
    t_cuda_current = s, t_cuda_set = true;
}

StreamGuard::~StreamGuard() {
  const Stream cur = Stream::current(prev_.device());
  if (!(cur == prev_)) {
    try {
      Executor::flush_all();
    } catch (...) {
      // A destructor must not throw; the deferred calls' own error surfaces at their use.
    }
    if (TraceSink* sink = trace_sink()) sink->on_sync(cur.id());
  }
  if (prev_.device().is_cpu())
    t_cpu_current = prev_;
  else
    t_cuda_current = prev_;
}

void synchronize(Device device) { Stream::current(device).synchronize(); }

Stream stream_by_id(uint32_t id) {
  StreamRegistry& r = StreamRegistry::get();
  std::lock_guard<std::mutex> g(r.mu);
  LF_CHECK(id < r.all.size(), "stream", "unknown stream id ", id);
  return r.all[id];
}

}  // namespace livefuse
