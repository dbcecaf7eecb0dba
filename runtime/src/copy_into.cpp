// In-place writes: copy_into / index_copy, the one way livefuse writes into memory a tensor
// already has (a static KV cache written at the step's position).
//
// [ Note -- why an in-place write is a sync point ]
// Deferred calls hold tensors, not values: a window that read the destination before the write
// must see the old bytes, and any call after the write the new ones. Running every deferred
// call of this thread first, and settling the windows of other threads that read the
// destination, gives exactly eager order; the write then goes into the stream, behind
// everything those calls enqueued. The monitor is told it is a sync point, so no plan is
// learnt across a write (it could never complete there). Storage::version is bumped for caches
// keyed by the storage. A write the program cannot observe before its next call is then held
// to share a launch with the next one (runtime/write_batch.hpp).
#include <algorithm>

#include "livefuse/error.hpp"
#include "livefuse/ops.hpp"
#include "livefuse/stream.hpp"
#include "runtime/executor.hpp"
#include "runtime/handle_pool.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/matcher.hpp"
#include "runtime/write_batch.hpp"

namespace livefuse {
void copy_into(const Tensor& dst, const Tensor& src) {
  const char* op = "copy_into";
  LF_CHECK(dst.defined() && src.defined(), op, "destination and source must be defined");
  // Built only for a failed check (LF_CHECK evaluates its message then): a static KV cache calls
  // this twice a layer a token, and the four tensor descriptions cost ~19k instructions a call.
  const auto got = [&] { return " (got destination " + dst.str() + ", source " + src.str() + ")"; };
  LF_CHECK(dst.device() == src.device(), op, "destination and source are on different devices",
           got());
  LF_CHECK(dst.dtype() == src.dtype(), op, "destination and source must have one dtype (cast the",
           " source first)", got());
  LF_CHECK(dst.shape() == src.shape(), op, "source shape ", src.shape().str(),
           " must equal the destination's ", dst.shape().str(), got());
  LF_CHECK(!dst.is_immutable(), op, "the destination was marked immutable", got());
  for (int k = 0; k < dst.rank(); ++k)
    LF_CHECK(dst.shape()[k] <= 1 || dst.strides()[k] != 0, op, "destination dim ", k,
             " is broadcast (stride 0): its elements share memory", got());
  if (dst.numel() == 0) return;
  // Eager order (the note): this thread's deferred calls run and the monitor is told; then the
  // windows of other threads that read the destination.
  sync_on(dst, writes::Use::write, Own::keep);
  sync_on(src, writes::Use::read, Own::keep);
  // The write itself on the timeline as an op (the flush above shows as the windows it ran): a
  // static KV cache's two writes a layer were missing from LIVEFUSE_TRACE's host breakdown.
  trace::Scope span("op", op);
  Storage& storage = *dst.impl()->storage;
  matcher::settle_readers(storage);
  const Stream stream = Stream::current(dst.device());
  // Held for the next call's launch, or (the batch enqueued first) written now.
  if (writes::hold(dst, src, stream)) {
    storage.version.fetch_add(1, std::memory_order_acq_rel);
    return;
  }
  Tensor from = src;
  if (src.impl()->storage.get() == &storage) {  // may overlap: read a copy
    from = new_dense(src.shape(), src.dtype(), src.device());
    OpCall c;
    c.op = OpId::contiguous;
    c.inputs.push_back(src);
    Executor::run_eager_into(c, TensorList{from}, stream);
  }
  // The contiguous kernels write through their output's strides: here the destination view.
  OpCall c;
  c.op = OpId::contiguous;
  c.inputs.push_back(from);
  Executor::run_eager_into(c, TensorList{dst}, stream);
  storage.version.fetch_add(1, std::memory_order_acq_rel);
}

void index_copy(const Tensor& dst, int64_t dim, int64_t pos, const Tensor& src) {
  const char* op = "index_copy";
  LF_CHECK(dst.defined() && src.defined(), op, "destination and source must be defined");
  const auto got = [&] {  // only for a failed check, as in copy_into
    return " (got destination " + dst.str() + ", source " + src.str() + ", dim " + std::to_string(dim) +
           ", position " + std::to_string(pos) + ")";
  };
  LF_CHECK(src.rank() == dst.rank(), op, "source rank ", src.rank(), " must equal the",
           " destination's ", dst.rank(), got());
  const int d = normalize_dim(dim, dst.rank(), op);
  const int64_t n = src.shape()[d], size = dst.shape()[d];
  LF_CHECK(pos >= 0 && pos + n <= size, op, "positions [", pos, ", ", pos + n,
           ") are out of range for dim ", d, " of size ", size, got());
  // The destination view is made here, not by lf::slice: a traced slice call per write would
  // enter the monitor's stream (and could itself be deferred) for nothing. Its layout is read
  // once the value is settled (storage bound); copy_into's sync point on the view -- the same
  // storage -- then runs the windows and held writes the write must follow.
  if (dst.numel() > 0 && src.numel() > 0) Executor::materialize(*dst.impl());
  const TensorImpl& t = *dst.impl();
  Shape shape = t.shape;
  shape[d] = n;
  const Tensor view(handle_pool::make<TensorImpl>(t.storage, t.offset + pos * t.strides[d], shape,
                                                  t.strides, t.dtype, t.device));
  copy_into(view, src);
}

}  // namespace livefuse
