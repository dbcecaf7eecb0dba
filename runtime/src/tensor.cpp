// Tensor handles, views and creation.
#include "livefuse/tensor.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <atomic>
#include <cstring>
#include <functional>

#include "kernels/device/lf_math.cuh"
#include "livefuse/config.hpp"
#include "livefuse/error.hpp"
#include "livefuse/ops.hpp"
#include "livefuse/stream.hpp"
#include "runtime/append.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/executor.hpp"
#include "runtime/handle_pool.hpp"
#include "runtime/host_values.hpp"
#include "runtime/matcher.hpp"
#include "runtime/memory_pool.hpp"
#include "runtime/trace_sink.hpp"
#include "runtime/write_batch.hpp"

namespace livefuse {

namespace {
std::atomic<ValueId> g_next_value_id{1};
}

Storage::~Storage() {
  if (deleter && ptr) deleter(ptr);
}

TensorImpl::TensorImpl(std::shared_ptr<Storage> s, int64_t off, Shape sh, Strides st, DType dt,
                       Device dev)
    : TensorImpl(std::move(s), off, sh, st, dt, dev,
                 g_next_value_id.fetch_add(1, std::memory_order_relaxed)) {}

TensorImpl::TensorImpl(std::shared_ptr<Storage> s, int64_t off, Shape sh, Strides st, DType dt,
                       Device dev, ValueId given)
    : storage(std::move(s)),
      offset(off),
      shape(sh),
      strides(st),
      dtype(dt),
      device(dev),
      id(given) {}

ValueId reserve_value_ids(uint64_t n) {
  return g_next_value_id.fetch_add(n, std::memory_order_relaxed);
}

// Handles come from runtime/handle_pool.hpp's blocks (the Note there): one with its count fits.
static_assert(sizeof(TensorImpl) + 2 * sizeof(void*) <= handle_pool::kBlock);

TensorImpl::~TensorImpl() {
  if (!reported.load(std::memory_order_relaxed)) return;
  if (TraceSink* sink = trace_sink()) sink->on_release(id);
}

void* TensorImpl::data() const {
  LF_ASSERT(storage != nullptr, "value ", id, " has no storage (pending: ", pending != nullptr,
            ")");
  return static_cast<char*>(storage->ptr) + offset * static_cast<int64_t>(dtype_size(dtype));
}

bool TensorImpl::is_contiguous() const {
  int64_t expected = 1;
  for (int i = shape.rank - 1; i >= 0; --i) {
    if (shape.v[i] != 1 && strides.v[i] != expected) return false;
    expected *= shape.v[i];
  }
  return true;
}

// ---- accessors -------------------------------------------------------------------------
#define LF_NEED_DEFINED(what) LF_CHECK(impl_ != nullptr, what, "called on an undefined Tensor")
const Shape& Tensor::shape() const {
  LF_NEED_DEFINED("Tensor::shape");
  return impl_->shape;
}
const Strides& Tensor::strides() const {
  LF_NEED_DEFINED("Tensor::strides");
  return impl_->strides;
}
DType Tensor::dtype() const {
  LF_NEED_DEFINED("Tensor::dtype");
  return impl_->dtype;
}
Device Tensor::device() const {
  LF_NEED_DEFINED("Tensor::device");
  return impl_->device;
}
ValueId Tensor::id() const {
  LF_NEED_DEFINED("Tensor::id");
  return impl_->id;
}
bool Tensor::is_contiguous() const {
  LF_NEED_DEFINED("Tensor::is_contiguous");
  return impl_->is_contiguous();
}
size_t Tensor::nbytes() const {
  LF_NEED_DEFINED("Tensor::nbytes");
  return impl_->nbytes();
}

int64_t Tensor::dim(int i) const {
  const int d = normalize_dim(i, rank(), "Tensor::dim");
  return shape().v[d];
}

void* Tensor::data_ptr() const {
  LF_NEED_DEFINED("Tensor::data_ptr");
  void* p = synced_data(*this);
  // After the sync: windows of other threads that read this storage are settled when it
  // first becomes exposed (Executor::expose), so a write through `p` cannot reach them.
  Executor::expose(*impl_);
  return p;
}

const Tensor& Tensor::mark_immutable() const {
  LF_NEED_DEFINED("Tensor::mark_immutable");
  Executor::materialize(*impl_);
  if (impl_->storage) impl_->storage->immutable.store(true, std::memory_order_release);
  return *this;
}

bool Tensor::is_immutable() const {
  LF_NEED_DEFINED("Tensor::is_immutable");
  return impl_->storage && impl_->storage->immutable.load(std::memory_order_acquire);
}

void sync_on(const Tensor& t, writes::Use use, Own own) {
  const TensorImpl& impl = *t.impl();
  Executor::materialize(impl);
  // Every window of this thread, not only one holding this tensor: the program (or the write)
  // may change the memory, and a window reading it must not see (or, launched early, miss) that.
  if (own == Own::flush) Executor::flush_all();
  else matcher::flush_all();
  if (const Storage* s = impl.storage.get()) writes::flush_for(*s, use);
  if (TraceSink* sink = trace_sink()) sink->on_sync(Stream::current(impl.device).id());
}

void* synced_data(const Tensor& t) {
  sync_on(t, writes::Use::write, Own::flush);
  return t.impl()->data();
}

void Tensor::copy_to_host(void* dst, size_t dst_bytes) const {
  LF_NEED_DEFINED("Tensor::copy_to_host");
  LF_CHECK(dst_bytes >= nbytes(), "copy_to_host", "destination holds ", dst_bytes, " bytes but ",
           str(), " needs ", nbytes());
  if (numel() == 0) return;
  // Settled before its layout is read: a plan completing the value's window (on its thread)
  // may still give it storage, offset and strides.
  Executor::materialize(*impl_);
  const Tensor src = is_contiguous() ? *this : livefuse::contiguous(*this);
  const void* p = synced_data(src);
  if (src.device().is_cpu()) {
    std::memcpy(dst, p, nbytes());
    return;
  }
#if LIVEFUSE_HAS_CUDA
  auto st = static_cast<cudaStream_t>(Stream::current(src.device()).handle());
  LF_CUDA_CHECK(cudaMemcpyAsync(dst, p, nbytes(), cudaMemcpyDeviceToHost, st));
  LF_CUDA_CHECK(cudaStreamSynchronize(st));
#endif
}

namespace {
template <class Out>
std::vector<Out> host_values(const Tensor& t) {
  std::vector<unsigned char> raw(t.nbytes());
  t.copy_to_host(raw.data(), raw.size());
  const int64_t n = t.numel();
  std::vector<Out> out(n);
  const unsigned char* r = raw.data();
  for (int64_t k = 0; k < n; ++k) {
    switch (t.dtype()) {
      case DType::f32: {
        float v;
        std::memcpy(&v, r + 4 * k, 4);
        out[k] = static_cast<Out>(v);
        break;
      }
      case DType::f16: {
        uint16_t v;
        std::memcpy(&v, r + 2 * k, 2);
        out[k] = static_cast<Out>(lf_h2f(v));
        break;
      }
      case DType::bf16: {
        uint16_t v;
        std::memcpy(&v, r + 2 * k, 2);
        out[k] = static_cast<Out>(lf_bf2f(v));
        break;
      }
      case DType::i32: {
        int32_t v;
        std::memcpy(&v, r + 4 * k, 4);
        out[k] = static_cast<Out>(v);
        break;
      }
      case DType::i64: {
        int64_t v;
        std::memcpy(&v, r + 8 * k, 8);
        out[k] = static_cast<Out>(v);
        break;
      }
      case DType::boolean:
        out[k] = static_cast<Out>(r[k] != 0);
        break;
    }
  }
  return out;
}
}  // namespace

std::vector<float> Tensor::to_floats() const { return host_values<float>(*this); }
std::vector<double> Tensor::to_doubles() const { return host_values<double>(*this); }
std::vector<int64_t> Tensor::to_int64s() const { return host_values<int64_t>(*this); }

Tensor Tensor::to(Device d) const {
  LF_NEED_DEFINED("Tensor::to");
  if (d == device()) return *this;
  // Settled before its layout is read: a plan completing the value's window (on its thread)
  // may still give it storage, offset and strides.
  Executor::materialize(*impl_);
  const Tensor src = is_contiguous() ? *this : livefuse::contiguous(*this);
  if (d.is_cpu()) {
    Tensor out = empty(shape(), dtype(), d);
    src.copy_to_host(out.impl()->data(), out.nbytes());
    return out;
  }
  LF_CHECK(src.device().is_cpu(), "Tensor::to", "copies between two GPUs are not supported (",
           src.device().str(), " -> ", d.str(), ")");
  return from_host(synced_data(src), shape(), dtype(), d);
}

Tensor Tensor::reshape(const Shape& s) const { return livefuse::reshape(*this, s); }
Tensor Tensor::permute(std::initializer_list<int64_t> dims) const {
  return livefuse::permute(*this, dims);
}
Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  return livefuse::transpose(*this, d0, d1);
}
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return livefuse::slice(*this, dim, start, end, step);
}
Tensor Tensor::contiguous() const { return livefuse::contiguous(*this); }

std::string Tensor::str() const {
  if (!impl_) return "Tensor(undefined)";
  return detail::concat("Tensor(", dtype_name(impl_->dtype), ", ", impl_->shape.str(), ", ",
                        impl_->device.str(), ")");
}

Tensor Tensor::wrap(void* ptr, const Shape& shape, DType dtype, Device device,
                    std::function<void(void*)> deleter, const Strides& strides) {
  LF_CHECK(ptr != nullptr || shape.numel() == 0, "Tensor::wrap", "null pointer given for ",
           dtype_name(dtype), shape.str(), " on ", device.str());
  for (int64_t d : shape) LF_CHECK(d >= 0, "Tensor::wrap", "negative dim in shape ", shape.str());
  const Strides st = strides.rank == 0 && shape.rank != 0 ? contiguous_strides(shape) : strides;
  LF_CHECK(st.rank == shape.rank, "Tensor::wrap", "strides ", st.str(), " do not match shape ",
           shape.str());
  auto s = handle_pool::make<Storage>();
  s->ptr = ptr;
  s->device = device;
  s->deleter = std::move(deleter);
  s->exposed.store(true, std::memory_order_relaxed);  // the program owns this memory
  return Tensor(handle_pool::make<TensorImpl>(std::move(s), 0, shape, st, dtype, device));
}

// ---- creation ---------------------------------------------------------------------------
Tensor new_dense(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) LF_CHECK(d >= 0, "empty", "negative dim in shape ", shape.str());
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  void* stream = device.is_cuda() ? Stream::current(device).handle() : nullptr;
  return Tensor(handle_pool::make<TensorImpl>(allocate_storage(device, bytes, stream), 0, shape,
                                              contiguous_strides(shape), dtype, device));
}

Tensor new_strided(const Shape& shape, const Strides& strides, DType dtype, Device device) {
  if (strides == contiguous_strides(shape)) return new_dense(shape, dtype, device);
  void* stream = device.is_cuda() ? Stream::current(device).handle() : nullptr;
  auto impl = handle_pool::make<TensorImpl>(nullptr, 0, shape, strides, dtype, device);
  impl->storage = allocate_storage(device, append::storage_bytes(*impl), stream);
  return Tensor(std::move(impl));
}

Tensor empty(const Shape& shape, DType dtype, Device device) {
  LF_CHECK(device.is_cpu() || cuda_available(), "empty", "device ", device.str(),
           " requested but no GPU is available");
  return new_dense(shape, dtype, device);
}

Tensor zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (t.nbytes() == 0) return t;
  if (device.is_cpu()) {
    std::memset(t.impl()->data(), 0, t.nbytes());
  } else {
#if LIVEFUSE_HAS_CUDA
    LF_CUDA_CHECK(cudaMemsetAsync(t.impl()->data(), 0, t.nbytes(),
                                  static_cast<cudaStream_t>(Stream::current(device).handle())));
#endif
  }
  return t;
}

namespace {
// Writes double values into dense host bytes of `dtype`.
void store_values(const double* v, int64_t n, DType dtype, unsigned char* out) {
  for (int64_t k = 0; k < n; ++k) {
    switch (dtype) {
      case DType::f32: {
        float x = static_cast<float>(v[k]);
        std::memcpy(out + 4 * k, &x, 4);
        break;
      }
      case DType::f16: {
        uint16_t x = lf_f2h(static_cast<float>(v[k]));
        std::memcpy(out + 2 * k, &x, 2);
        break;
      }
      case DType::bf16: {
        uint16_t x = lf_f2bf(static_cast<float>(v[k]));
        std::memcpy(out + 2 * k, &x, 2);
        break;
      }
      case DType::i32: {
        int32_t x = static_cast<int32_t>(v[k]);
        std::memcpy(out + 4 * k, &x, 4);
        break;
      }
      case DType::i64: {
        int64_t x = static_cast<int64_t>(v[k]);
        std::memcpy(out + 8 * k, &x, 8);
        break;
      }
      case DType::boolean:
        out[k] = v[k] != 0.0;
        break;
    }
  }
}

// A dense tensor of `dtype` on `device` whose bytes `write(begin, end, out)` stores for the
// elements [begin, end) at `out`: written where the tensor lives on the CPU, else staged on the
// host; in chunks over the TBB threads (a model's random weights are billions of values).
// config() first: it sets the threads' limit (LIVEFUSE_CPU_THREADS).
template <class Write>
Tensor write_on_host(const Shape& shape, DType dtype, Device device, Write&& write) {
  (void)config();
  const int64_t n = shape.numel();
  const size_t es = dtype_size(dtype);
  Tensor t = device.is_cpu() ? empty(shape, dtype, device) : Tensor();
  std::vector<unsigned char> staged(device.is_cpu() ? 0 : static_cast<size_t>(n) * es);
  unsigned char* out =
      device.is_cpu() ? static_cast<unsigned char*>(t.impl()->data()) : staged.data();
  constexpr int64_t kChunk = int64_t{1} << 16;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, kChunk),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      write(r.begin(), r.end(), out + static_cast<size_t>(r.begin()) * es);
                    });
  return device.is_cpu() ? t : from_host(staged.data(), shape, dtype, device);
}

}  // namespace

Tensor from_doubles_impl(const std::vector<double>& v, const Shape& shape, DType dtype,
                         Device device) {
  LF_CHECK(static_cast<int64_t>(v.size()) == shape.numel(), "from_host", v.size(),
           " values given for shape ", shape.str(), " (", shape.numel(), " expected)");
  return write_on_host(shape, dtype, device, [&](int64_t begin, int64_t end, unsigned char* out) {
    store_values(v.data() + begin, end - begin, dtype, out);
  });
}

Tensor from_index_fn(const Shape& shape, DType dtype, Device device,
                     const std::function<double(int64_t)>& value) {
  // Each chunk's values go through a buffer of doubles of its own.
  return write_on_host(shape, dtype, device, [&](int64_t begin, int64_t end, unsigned char* out) {
    std::vector<double> buf(static_cast<size_t>(end - begin));
    for (int64_t k = begin; k < end; ++k) buf[static_cast<size_t>(k - begin)] = value(k);
    store_values(buf.data(), end - begin, dtype, out);
  });
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  return from_doubles_impl(std::vector<double>(static_cast<size_t>(shape.numel()), value), shape,
                           dtype, device);
}

Tensor arange(int64_t n, DType dtype, Device device) {
  LF_CHECK(n >= 0, "arange", "n must be >= 0, got ", n);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) v[k] = static_cast<double>(k);
  return from_doubles_impl(v, Shape{n}, dtype, device);
}

Tensor from_host(const void* src, const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (t.nbytes() == 0) return t;
  LF_CHECK(src != nullptr, "from_host", "null source pointer for ", dtype_name(dtype), shape.str());
  if (device.is_cpu()) {
    std::memcpy(t.impl()->data(), src, t.nbytes());
  } else {
#if LIVEFUSE_HAS_CUDA
    auto st = static_cast<cudaStream_t>(Stream::current(device).handle());
    LF_CUDA_CHECK(cudaMemcpyAsync(t.impl()->data(), src, t.nbytes(), cudaMemcpyHostToDevice, st));
    // The source is the caller's host memory: it may be freed right after we return.
    LF_CUDA_CHECK(cudaStreamSynchronize(st));
#endif
  }
  return t;
}

Tensor from_floats(const std::vector<float>& v, const Shape& shape, DType dtype, Device device) {
  return from_doubles_impl(std::vector<double>(v.begin(), v.end()), shape, dtype, device);
}

Tensor from_int64s(const std::vector<int64_t>& v, const Shape& shape, DType dtype, Device device) {
  if (dtype == DType::i64) {
    LF_CHECK(static_cast<int64_t>(v.size()) == shape.numel(), "from_int64s", v.size(),
             " values given for shape ", shape.str());
    return from_host(v.data(), shape, dtype, device);
  }
  return from_doubles_impl(std::vector<double>(v.begin(), v.end()), shape, dtype, device);
}

}  // namespace livefuse
