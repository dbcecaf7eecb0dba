#include "planner/merged_weights.hpp"

#include <algorithm>

#include "livefuse/error.hpp"
#include "runtime/executor.hpp"
#include "runtime/memory_pool.hpp"

namespace livefuse::planner {
namespace {

std::vector<Tensor> sources_of(std::span<const Tensor> weights, std::span<const Tensor> biases) {
  std::vector<Tensor> all(weights.begin(), weights.end());
  all.insert(all.end(), biases.begin(), biases.end());
  return all;
}

// Rows [row0, row0 + rows) of the dense matrix `m` ([R, C] or [R]) as a tensor of its own.
Tensor rows_of(const Tensor& m, int64_t row0, int64_t rows) {
  const TensorImpl& x = *m.impl();
  Shape s = x.shape;
  s.v[0] = rows;
  const int64_t row_elems = x.shape.rank > 1 ? x.strides.v[0] : 1;
  return Tensor(std::make_shared<TensorImpl>(x.storage, x.offset + row0 * row_elems, s,
                                             contiguous_strides(s), x.dtype, x.device));
}

Tensor dense(const Shape& s, DType dt, Device d, const Stream& stream) {
  const size_t bytes = static_cast<size_t>(s.numel()) * dtype_size(dt);
  std::shared_ptr<Storage> st = allocate_storage(d, bytes, d.is_cuda() ? stream.handle() : nullptr);
  return Tensor(std::make_shared<TensorImpl>(std::move(st), 0, s, contiguous_strides(s), dt, d));
}

// Copies every source into its rows of the concatenation, in stream order (the eager
// contiguous kernel writes through its output's view), then bumps the copy's version.
void fill(const MergedWeights::Copy& c, std::span<const Tensor> weights,
          std::span<const Tensor> biases, const Stream& stream) {
  auto copy_rows = [&](const Tensor& dst, std::span<const Tensor> parts) {
    int64_t row = 0;
    for (const Tensor& t : parts) {
      OpCall call;
      call.op = OpId::contiguous;
      call.inputs.push_back(t);
      Executor::run_eager_into(call, TensorList{rows_of(dst, row, t.shape()[0])}, stream);
      row += t.shape()[0];
    }
    dst.impl()->storage->version.fetch_add(1, std::memory_order_acq_rel);
  };
  copy_rows(c.weight, weights);
  if (c.bias.defined()) copy_rows(c.bias, biases);
}

}  // namespace

bool MergedWeights::same_source(const Source& s, const Tensor& t) {
  const TensorImpl& x = *t.impl();
  const std::shared_ptr<Storage>& st = x.storage;
  return st && !s.owner.owner_before(st) && !st.owner_before(s.owner) && !s.owner.expired() &&
         s.offset == x.offset && s.shape == x.shape && s.strides == x.strides && s.dtype == x.dtype;
}

bool MergedWeights::current(const Source& s, const Tensor& t) {
  const Storage& st = *t.impl()->storage;
  return !st.may_change() && st.version.load(std::memory_order_acquire) == s.version;
}

MergedWeights::Copy MergedWeights::get(std::span<const Tensor> weights,
                                       std::span<const Tensor> biases, const Stream& stream) {
  const std::vector<Tensor> all = sources_of(weights, biases);
  // A source still pending (another window's output) has no bytes to copy yet: not served, the
  // siblings then run one by one.
  for (const Tensor& t : all)
    if (!t.impl()->storage) return {};
  void* handle = stream.device().is_cuda() ? stream.handle() : nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  ++clock_;
  Entry* e = nullptr;
  for (Entry& x : entries_) {
    if (x.stream != handle || x.sources.size() != all.size()) continue;
    bool same = true;
    for (size_t i = 0; i < all.size() && same; ++i) same = same_source(x.sources[i], all[i]);
    if (same) {
      e = &x;
      break;
    }
  }
  auto record = [&](Entry& x) {
    x.sources.resize(all.size());
    for (size_t i = 0; i < all.size(); ++i) {
      const TensorImpl& t = *all[i].impl();
      x.sources[i] =
          Source{t.storage, t.offset, t.shape,
                 t.strides, t.dtype,  t.storage->version.load(std::memory_order_acquire)};
    }
  };
  if (e) {
    e->last_use = clock_;
    bool fresh = true;
    for (size_t i = 0; i < all.size() && fresh; ++i) fresh = current(e->sources[i], all[i]);
    if (fresh) {
      ++c_.hits;
      return e->copy;
    }
    // Versions are read before the copy is enqueued: a write after this point bumps them again.
    record(*e);
    fill(e->copy, weights, biases, stream);
    ++c_.refreshes;
    return e->copy;
  }
  if (CaptureScope::active()) {
    ++c_.declined;
    return {};
  }
  const Tensor& w0 = weights[0];
  int64_t n = 0;
  for (const Tensor& w : weights) n += w.shape()[0];
  Entry fresh;
  fresh.stream = handle;
  fresh.last_use = clock_;
  fresh.copy.weight = dense(Shape{n, w0.shape()[1]}, w0.dtype(), w0.device(), stream);
  if (!biases.empty()) fresh.copy.bias = dense(Shape{n}, biases[0].dtype(), w0.device(), stream);
  record(fresh);
  fill(fresh.copy, weights, biases, stream);
  ++c_.builds;
  if (entries_.size() >= kMaxEntries) {
    size_t lru = 0;
    for (size_t i = 1; i < entries_.size(); ++i)
      if (entries_[i].last_use < entries_[lru].last_use) lru = i;
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(lru));
    ++c_.evictions;
  }
  entries_.push_back(std::move(fresh));
  return entries_.back().copy;
}

Tensor MergedWeights::scratch(const Shape& shape, DType dtype, const Stream& stream) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  const Device d = stream.device();
  std::lock_guard<std::mutex> lock(mu_);
  Scratch* s = nullptr;
  for (Scratch& x : scratch_)
    if (x.stream == stream.handle()) s = &x;
  if (!s || s->storage->bytes < bytes) {
    if (CaptureScope::active() || (!s && scratch_.size() >= kMaxStreams)) return {};
    if (!s) s = &scratch_.emplace_back(Scratch{stream.handle(), nullptr});
    // Released in stream order: work already enqueued on the stream still reads the old one.
    s->storage =
        allocate_storage(d, std::max<size_t>(bytes, 1), d.is_cuda() ? stream.handle() : nullptr);
  }
  return Tensor(
      std::make_shared<TensorImpl>(s->storage, 0, shape, contiguous_strides(shape), dtype, d));
}

MergedWeights::Counters MergedWeights::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return c_;
}

}  // namespace livefuse::planner
