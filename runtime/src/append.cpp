// A concat-grown cache with capacity, appended in place: runtime/append.hpp, the Note.
#include "runtime/append.hpp"

#include <algorithm>

#include "livefuse/config.hpp"
#include "runtime/memory_pool.hpp"
#include "runtime/plan.hpp"

namespace livefuse::append {
namespace {

thread_local const DonatedInputs* t_donated = nullptr;

// C when `st` are the strides of `shape` with dim d's extent raised to C >= shape[d]; -1 else.
int64_t capacity_of(const Shape& shape, const Strides& st, int d) {
  if (st.rank != shape.rank || d <= 0 || st.v[d] <= 0 || st.v[d - 1] % st.v[d] != 0) return -1;
  Shape block = shape;
  block.v[d] = st.v[d - 1] / st.v[d];
  if (block.v[d] < shape.v[d] || !(contiguous_strides(block) == st)) return -1;
  return block.v[d];
}

// For concat `call` whose output `out` has no storage yet: gives `out` its first input's storage
// when Note 2 allows it.
bool take_over(const OpCall& call, TensorImpl& out) {
  const DonatedInputs* donated = t_donated;
  if (!donated || call.op != OpId::concat || call.inputs.empty() || !config().append) return false;
  const TensorImpl& x = *call.inputs[0].impl();
  if (!donated->has(&x)) return false;
  const std::shared_ptr<Storage>& s = x.storage;
  // use_count 1: x's own reference -- no view of the block lives, no set or cache holds it.
  if (!s || s.use_count() != 1 || s->exposed.load(std::memory_order_acquire)) return false;
  if (!(x.strides == out.strides) || x.dtype != out.dtype || !(x.device == out.device)) return false;
  const size_t need = static_cast<size_t>(x.offset) * dtype_size(x.dtype) + storage_bytes(out);
  if (need > s->bytes) return false;
  out.storage = s;
  out.offset = x.offset;
  matcher_counters().appends_in_place.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

Strides concat_strides(const OpCall& call, const Shape& out) {
  if (call.inputs.empty() || !config().append) return contiguous_strides(out);
  const int d = static_cast<int>(call.attrs.i[0]);
  const Tensor& x = call.inputs[0];
  const int64_t have = x.shape()[d], added = out[d] - have;
  if (d <= 0 || d >= out.rank - 1 || out.numel() == 0 || have < kAppendMinRows || added <= 0 ||
      have < 4 * added)
    return contiguous_strides(out);
  if (capacity_of(x.shape(), x.strides(), d) >= out[d]) return x.strides();
  Shape block = out;
  block.v[d] = (out[d] + out[d] / 4 + 32 + 31) / 32 * 32;
  return contiguous_strides(block);
}

size_t storage_bytes(const TensorImpl& t) {
  const int64_t n = t.numel();
  if (n == 0) return 0;
  int64_t span = n;
  for (int i = 0; i < t.shape.rank; ++i)
    if (t.strides.v[i] > 0) span = std::max(span, t.shape.v[i] * t.strides.v[i]);
  return static_cast<size_t>(span) * dtype_size(t.dtype);
}

void give_storage(const OpCall* call, TensorImpl& out, void* stream) {
  if (out.storage || (call && take_over(*call, out))) return;
  out.storage = allocate_storage(out.device, storage_bytes(out), stream);
}

bool same_place(const void* src, const Strides& src_st, const void* dst, const Strides& dst_st,
                const Shape& shape) {
  if (src != dst) return false;
  for (int i = 0; i < shape.rank; ++i)
    if (shape.v[i] > 1 && src_st.v[i] != dst_st.v[i]) return false;
  return true;
}

DonatedInputs::DonatedInputs(const Window& w) : outer_(t_donated) {
  for (const OpCall& c : w.calls) {
    if (c.op != OpId::concat || c.inputs.empty() || n_ == kMost) continue;
    const TensorImpl* x = c.inputs[0].impl();
    if (!x || !x->storage) continue;  // pending: made in this window, or not yet settled
    bool seen = false;  // two concats of one cache: counted once
    for (int i = 0; i < n_; ++i) seen |= impls_[i] == x;
    if (seen) continue;
    impls_[n_] = x, uses_[n_] = c.inputs[0].impl_ptr().use_count(), refs_[n_] = 0;
    ++n_;
  }
  t_donated = this;
  if (n_ == 0) return;
  // Every reference the window holds, in one pass for all of them; one more anywhere (the
  // program's) and x stays x's. Its outputs are not among them: each is a value this window
  // made (Executor::make_outputs), while x has storage, so it was made before the window.
  auto count = [this](const Tensor& t) {
    for (int i = 0; i < n_; ++i) refs_[i] += t.impl() == impls_[i];
  };
  for (const OpCall& o : w.calls)
    for (const Tensor& t : o.inputs) count(t);
  for (const Tensor& t : w.externals) count(t);
}

void DonatedInputs::also_held(std::span<const Tensor> ts) {
  for (const Tensor& t : ts)
    for (int i = 0; i < n_; ++i) refs_[i] += t.impl() == impls_[i];
}

DonatedInputs::~DonatedInputs() { t_donated = outer_; }

bool DonatedInputs::has(const TensorImpl* t) const {
  for (int i = 0; i < n_; ++i)
    if (impls_[i] == t) return uses_[i] == refs_[i];
  return false;
}

}  // namespace livefuse::append
