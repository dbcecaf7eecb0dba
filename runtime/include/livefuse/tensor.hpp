#pragma once
// Tensor: a shared handle to a value. Storage is contiguous row-major; a Tensor may be a view
// (offset + strides) of another's storage. Ops accept views and materialise only where they
// must. Every Tensor has a ValueId (structural traces use ids, never addresses).
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "livefuse/device.hpp"
#include "livefuse/dtype.hpp"
#include "livefuse/shape.hpp"

namespace livefuse {

using ValueId = uint64_t;

// A block of memory. Owned blocks return to the runtime's pool; wrapped blocks call the
// user's deleter (or nothing).
struct Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  Device device;
  std::function<void(void*)> deleter;  // empty: not owned
  // The program can write this memory behind livefuse's back: it was wrapped (Tensor::wrap,
  // from_dlpack) or its address was handed out (data_ptr, to_dlpack). Set once, never cleared.
  // A deferred call never reads such memory in place (runtime/src/matcher.cpp, the note on
  // reachable memory): what it reads is what the memory held when the call was made.
  std::atomic<bool> exposed{false};
  // The program promised not to write it while livefuse may read it (Tensor::mark_immutable):
  // weights, typically. Exposed but immutable memory is read in place, and caches derived from
  // it (packed GEMM weights, say) stay valid.
  std::atomic<bool> immutable{false};
  // Bumped by every livefuse op that writes this storage in place (copy_into, index_copy): a
  // cache keyed by this storage checks it together with may_change().
  std::atomic<uint64_t> version{0};
  // Whether the program may write this memory without livefuse seeing the write.
  bool may_change() const {
    return exposed.load(std::memory_order_acquire) && !immutable.load(std::memory_order_acquire);
  }
  ~Storage();
};

class TensorImpl {
 public:
  TensorImpl(std::shared_ptr<Storage> s, int64_t offset, Shape shape, Strides strides, DType dt,
             Device dev);
  // With an id taken from a block of reserve_value_ids.
  TensorImpl(std::shared_ptr<Storage> s, int64_t offset, Shape shape, Strides strides, DType dt,
             Device dev, ValueId id);
  ~TensorImpl();
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;

  // Raw address of element 0 for kernels. Only valid once storage is bound (never pending).
  void* data() const;
  bool is_contiguous() const;
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }

  std::shared_ptr<Storage> storage;  // null while the value is pending (deferred by a plan)
  int64_t offset = 0;                // in elements
  Shape shape;
  Strides strides;  // in elements
  DType dtype;
  Device device;
  ValueId id;
  // Set while a deferred plan window will produce this value (runtime/matcher owns it). Atomic:
  // another thread may reach a sync point on this value while its window is being completed.
  std::atomic<void*> pending{nullptr};
  // Set once the value appeared in a call reported to the trace sink (runtime/trace_sink.hpp):
  // only then is its release reported. Atomic: inputs are shared between threads.
  std::atomic<bool> reported{false};
  void mark_reported() {
    if (!reported.load(std::memory_order_relaxed)) reported.store(true, std::memory_order_relaxed);
  }
};

// The first of `n` fresh value ids, for values made later (TensorImpl's last constructor).
ValueId reserve_value_ids(uint64_t n);

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Strides& strides() const;
  int rank() const { return shape().rank; }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return shape().numel(); }
  DType dtype() const;
  Device device() const;
  ValueId id() const;
  bool is_contiguous() const;
  size_t nbytes() const;

  // Sync points: pending deferred work is flushed first (eager semantics, DESIGN.md).
  // data_ptr() hands the address to the program, which may then write through it at any time:
  // from then on the storage counts as exposed (Storage::exposed).
  void* data_ptr() const;
  // A promise: the program will not write this tensor's memory (through a wrapped buffer, a
  // pointer from data_ptr() or DLPack) while livefuse may still read it -- weights loaded once.
  // Such memory is read in place by deferred calls and fused plans; memory without the promise
  // that the program can reach is snapshotted when a deferred call reads it. Returns *this.
  const Tensor& mark_immutable() const;
  bool is_immutable() const;
  // Copies the values (any layout) to host memory as a dense row-major array of dtype().
  void copy_to_host(void* dst, size_t dst_bytes) const;
  // Values converted to float / double / int64 (dense row-major), for tests and tools.
  std::vector<float> to_floats() const;
  std::vector<double> to_doubles() const;
  std::vector<int64_t> to_int64s() const;

  Tensor to(Device d) const;  // copy to another device (or *this when already there)

  // Views (also available as free functions in ops.hpp).
  Tensor reshape(const Shape& s) const;
  Tensor permute(std::initializer_list<int64_t> dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor contiguous() const;

  std::string str() const;  // "Tensor(f32, [2, 3], cpu)"
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // Non-owning view of existing memory (device or host). `deleter`, when given, is called
  // with `ptr` once the last Tensor sharing it is gone. Strides default to contiguous.
  static Tensor wrap(void* ptr, const Shape& shape, DType dtype, Device device,
                     std::function<void(void*)> deleter = {}, const Strides& strides = {});

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// ---- creation ------------------------------------------------------------------------
Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = default_device());
Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = default_device());
Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
            Device device = default_device());
Tensor arange(int64_t n, DType dtype = DType::i64, Device device = default_device());
// Uniform in [lo, hi) from a counter-based generator: the same seed gives the same values on
// every device and thread count.
Tensor rand_uniform(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0,
                    DType dtype = DType::f32, Device device = default_device());
Tensor rand_normal(const Shape& shape, uint64_t seed, double mean = 0.0, double stddev = 1.0,
                   DType dtype = DType::f32, Device device = default_device());
// Copies `bytes` of dense row-major host data of `dtype`.
Tensor from_host(const void* src, const Shape& shape, DType dtype,
                 Device device = default_device());
Tensor from_floats(const std::vector<float>& v, const Shape& shape, DType dtype = DType::f32,
                   Device device = default_device());
Tensor from_int64s(const std::vector<int64_t>& v, const Shape& shape, DType dtype = DType::i64,
                   Device device = default_device());

}  // namespace livefuse
