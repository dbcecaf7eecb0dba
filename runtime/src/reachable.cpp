// Snapshots of memory the program can reach (matcher_window.hpp, snapshot_reachable).
//
// [ Note -- memory the program can reach ]
// Eager execution reads an input when the call is made. A deferred call reads it when its
// window runs: later, after control went back to the program, which may have written the
// memory meanwhile -- through a buffer it wrapped, a pointer it took from data_ptr(), memory it
// shares through DLPack, from any thread. Such storage is marked exposed (Storage::exposed);
// a deferred call that reads exposed storage reads a snapshot taken at the call instead, so
// every value equals eager execution whatever the program writes afterwards. A snapshot costs
// one copy of the bytes the view spans, in stream order; the program avoids it for memory it
// never rewrites (weights) by Tensor::mark_immutable. The first exposure of a storage settles
// any window, on any thread, that already reads it in place (matcher::settle_readers).
// A view made by a deferred call views the snapshot: a write to the wrapped buffer between that
// call and a later read of the view is not seen through it (eager would show it); views made
// before the window began, or outside any window, alias the program's memory as always.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "livefuse/config.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/handle_pool.hpp"
#include "runtime/matcher_window.hpp"
#include "runtime/memory_pool.hpp"

namespace livefuse::matcher::detail {

Tensor snapshot_reachable(const Tensor& t, const Stream& stream) {
  const TensorImpl& x = *t.impl();
  const size_t esize = dtype_size(x.dtype);
  if (x.numel() == 0) return t;  // no bytes to read, none to copy
  // The elements the view spans: [lo, hi] around its offset.
  int64_t lo = x.offset, hi = x.offset;
  for (int d = 0; d < x.shape.rank; ++d) {
    const int64_t span = (x.shape.v[d] - 1) * x.strides.v[d];
    (span < 0 ? lo : hi) += span;
  }
  const size_t bytes = static_cast<size_t>(hi - lo + 1) * esize;
  const bool cuda = x.device.is_cuda();
  std::shared_ptr<Storage> s = allocate_storage(x.device, bytes, cuda ? stream.handle() : nullptr);
  const char* src = static_cast<const char*>(x.storage->ptr) + lo * static_cast<int64_t>(esize);
  if (!cuda) {
    std::memcpy(s->ptr, src, bytes);
  } else {
#if LIVEFUSE_HAS_CUDA
    LF_CUDA_CHECK(cudaMemcpyAsync(s->ptr, src, bytes, cudaMemcpyDefault,
                                  static_cast<cudaStream_t>(stream.handle())));
#endif
  }
  auto& ctr = matcher_counters();
  ctr.snapshots.fetch_add(1, std::memory_order_relaxed);
  const uint64_t total = ctr.snapshot_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  // A program that wrote its weights once through data_ptr() pays a copy of them per call from
  // then on: say so once, with what to do about it.
  constexpr uint64_t kWarnBytes = uint64_t{256} << 20;
  static std::atomic<bool> warned{false};
  if (total >= kWarnBytes && config().log >= LogLevel::warn && !warned.exchange(true))
    std::fprintf(stderr,
                 "[livefuse] deferred calls have copied %llu MiB of memory the program can write "
                 "itself (e.g. %s %s on %s): buffers it wrapped or wrote through data_ptr(). If "
                 "such memory (weights) is never rewritten, Tensor::mark_immutable() lets it be "
                 "read in place (counters matcher.snapshots / snapshot_bytes).\n",
                 static_cast<unsigned long long>(total >> 20), dtype_name(x.dtype).data(),
                 x.shape.str().c_str(), x.device.str().c_str());
  return Tensor(handle_pool::make<TensorImpl>(std::move(s), x.offset - lo, x.shape, x.strides,
                                              x.dtype, x.device));
}

}  // namespace livefuse::matcher::detail
