// Executor::submit -- every op call of the program passes here exactly once.
#include "runtime/executor.hpp"

#include <atomic>

#include "kernels/backend.hpp"
#include "livefuse/config.hpp"
#include "livefuse/error.hpp"
#include "livefuse/inspect.hpp"
#include "livefuse/stream.hpp"
#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "runtime/append.hpp"
#include "runtime/handle_pool.hpp"
#include "runtime/infer_memo.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/matcher.hpp"
#include "runtime/memory_pool.hpp"
#include "runtime/plan.hpp"
#include "runtime/registry.hpp"
#include "runtime/trace_sink.hpp"
#include "runtime/write_batch.hpp"

namespace livefuse {

namespace detail {
std::atomic<TraceSink*> g_trace_sink{nullptr};
}

void TraceSink::on_served(const Plan& plan, const Window& w) {
  (void)plan;
  for (size_t j = 0; j < w.calls.size(); ++j)
    report_call(*this, w.calls[j], std::span<const Tensor>(w.outputs[j].data(), w.outputs[j].size()),
                w.stream_id);
}

namespace {

void run_backend(const OpCall& call, std::span<const Tensor> outs, const Stream& stream) {
  if (call.inputs.empty() || call.inputs[0].device().is_cpu()) {
    cpu::run(call, outs);
    return;
  }
#if LIVEFUSE_HAS_CUDA
  cuda::run(call, outs, stream.handle());
#else
  (void)stream;
  throw Error("[" + std::string(op_name(call.op)) +
              "] CUDA tensor given but livefuse was built without CUDA");
#endif
}

// `x` copied into the dense `dst` of its shape through the backend (not a separate traced
// call: it is part of the op that needs it).
void copy_dense_into(const Tensor& x, const Tensor& dst, const Stream& stream) {
  OpCall c;
  c.op = OpId::contiguous;
  c.inputs.push_back(x);
  run_backend(c, std::span<const Tensor>(&dst, 1), stream);
}

Tensor dense_copy(const Tensor& x, const Stream& stream) {
  Tensor out = new_dense(x.shape(), x.dtype(), x.device());
  copy_dense_into(x, out, stream);
  return out;
}

void run_opaque(const OpCall& call, const TensorList& outs, const Stream& stream) {
  const OpaqueKernelDef& k = opaque_kernel(call.attrs.custom_id);
  KernelArgs args;
  for (const Tensor& t : call.inputs) {
    // Opaque kernels see dense memory: they get pointers and shapes, not strides.
    const Tensor d = t.is_contiguous() ? t : dense_copy(t, stream);
    args.inputs.push_back(d.numel() ? d.impl()->data() : nullptr);
    args.input_shapes.push_back(d.shape());
  }
  for (const Tensor& t : outs) {
    args.outputs.push_back(t.numel() ? t.impl()->data() : nullptr);
    args.output_shapes.push_back(t.shape());
  }
  try {
    k.launch(args, stream.handle());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(detail::concat("[", k.name, "] the wrapped kernel's launch threw: ", e.what()));
  }
}

}  // namespace

namespace {
bool is_view_op(const OpCall& call) {
  return call.category() == OpCategory::Layout && call.op != OpId::concat &&
         call.op != OpId::contiguous;
}
}  // namespace

bool Executor::is_copying_view(const OpCall& call) {
  return call.op == OpId::reshape && !call.inputs[0].is_contiguous();
}

namespace {

// Strides (and offset) a view will have, from its source's metadata only: pending sources
// have no storage yet, but their layout is already fixed.
void view_layout(const OpCall& call, const Shape& shape, Strides* st, int64_t* offset,
                 bool* dense) {
  const TensorImpl& x = *call.inputs[0].impl();
  const Attrs& a = call.attrs;
  *dense = false;
  *offset = x.offset;
  switch (call.op) {
    case OpId::reshape:
      *st = contiguous_strides(shape);
      *dense = !x.is_contiguous();  // needs its own dense copy
      if (*dense) *offset = 0;
      break;
    case OpId::permute:
      *st = Strides();
      for (int k = 0; k < a.ni; ++k) st->push_back(x.strides[static_cast<int>(a.i[k])]);
      break;
    case OpId::slice: {
      const int d = static_cast<int>(a.i[0]);
      *st = x.strides;
      (*st)[d] *= a.i[3];
      *offset = x.offset + a.i[1] * x.strides[d];
      break;
    }
    case OpId::expand: {  // stride 0 along every new or widened dim
      const int lead = shape.rank - x.shape.rank;
      *st = Strides();
      for (int k = 0; k < shape.rank; ++k) {
        const bool kept = k >= lead && x.shape[k - lead] == shape[k];
        st->push_back(kept ? x.strides[k - lead] : 0);
      }
      break;
    }
    default:
      LF_ASSERT(false, "not a view op: ", op_name(call.op));
  }
}
}  // namespace

namespace {
// A pending output's TensorImpl: its id from the window's block while there is one.
std::shared_ptr<TensorImpl> pending_impl(Window* w, const Shape& shape, const Strides& st, int64_t offset,
                                         DType dt, Device device) {
  if (w && w->ids_next < w->ids_end)
    return handle_pool::make<TensorImpl>(nullptr, offset, shape, st, dt, device, w->ids_next++);
  if (w) w->ids_begin = w->ids_next = w->ids_end = 0;  // ran out: ids no longer in order
  return handle_pool::make<TensorImpl>(nullptr, offset, shape, st, dt, device);
}
}  // namespace

TensorList Executor::make_outputs(const OpCall& call, const OutputInfos& infos, Device device,
                                  void* pending_tag, Window* window) {
  TensorList outs;
  if (is_view_op(call)) {
    Strides st;
    int64_t offset = 0;
    bool dense = false;
    view_layout(call, infos[0].shape, &st, &offset, &dense);
    std::shared_ptr<Storage> storage =
        pending_tag || dense ? nullptr : call.inputs[0].impl()->storage;
    auto impl = pending_tag
                    ? pending_impl(window, infos[0].shape, st, offset, infos[0].dtype, device)
                    : handle_pool::make<TensorImpl>(storage, offset, infos[0].shape, st,
                                                    infos[0].dtype, device);
    // Relaxed: no other thread can see the new value before the program hands it on (and that
    // hand-over synchronises); a seq_cst store is an xchg, paid per deferred call.
    impl->pending.store(pending_tag, std::memory_order_relaxed);
    outs.push_back(Tensor(std::move(impl)));
    return outs;
  }
  for (const OutputInfo& o : infos) {
    // A concat that grows a cache gets room to grow into (runtime/append.hpp, the Note).
    const Strides st =
        call.op == OpId::concat ? append::concat_strides(call, o.shape) : contiguous_strides(o.shape);
    if (pending_tag) {
      auto impl = pending_impl(window, o.shape, st, 0, o.dtype, device);
      impl->pending.store(pending_tag, std::memory_order_relaxed);  // as above
      outs.push_back(Tensor(std::move(impl)));
    } else {
      outs.push_back(new_strided(o.shape, st, o.dtype, device));
    }
  }
  return outs;
}

void Executor::run_eager_into(const OpCall& call, const TensorList& outs, const Stream& stream) {
  if (is_view_op(call)) {
    TensorImpl& out = *outs[0].impl();
    const Tensor& x = call.inputs[0];
    if (!is_copying_view(call)) {
      if (out.storage) return;
      LF_ASSERT(x.impl()->storage || x.numel() == 0, "view source without storage");
      out.storage = x.impl()->storage;
      return;
    }
    // A reshape of a non-contiguous view is a dense copy: into storage bound beforehand (a
    // plan's binding set, so a captured graph writes where the program reads) or fresh.
    if (!out.storage) {
      out.storage = allocate_storage(out.device, out.nbytes(),
                                     out.device.is_cuda() ? stream.handle() : nullptr);
      out.offset = 0;
    }
    // The copy keeps x's shape; the reshape's output is the same bytes under its own shape.
    const Tensor dst(handle_pool::make<TensorImpl>(
        out.storage, out.offset, x.shape(), contiguous_strides(x.shape()), x.dtype(), x.device()));
    if (x.numel()) copy_dense_into(x, dst, stream);
    return;
  }
  bool empty = false;
  for (const Tensor& t : outs) {
    TensorImpl& o = *t.impl();
    // A concat's result may take its first input's block, which already holds those rows.
    append::give_storage(&call, o, o.device.is_cuda() ? stream.handle() : nullptr);
    empty |= t.numel() == 0;
  }
  if (call.op == OpId::opaque) return run_opaque(call, outs, stream);
  if (!empty) run_backend(call, std::span<const Tensor>(outs.data(), outs.size()), stream);
}

namespace {
// The monitor thread starts with the first traced call, the planning service with the first
// call in a mode that plans (a program may go from trace to on at run time).
void start_background() {
  static std::atomic<bool> started{false};
  if (started.load(std::memory_order_acquire)) return;
  monitor::ensure_started();
  if (planner::ensure_service_started()) started.store(true, std::memory_order_release);
}
}  // namespace

TensorList Executor::submit(OpCall& call) {
  // Report and trace writers run in every mode (a report of LIVEFUSE=off is useful too).
  start_background_services();
  // In-place writes held back (runtime/write_batch.hpp) go first: this call may read them.
  if (writes::any_held()) {
    writes::flush_own();
    for (const Tensor& t : call.inputs)  // another thread's, on what this call reads
      if (t.defined())
        if (const Storage* s = t.impl()->storage.get()) writes::flush_for(*s, writes::Use::read);
  }
  // Held to the end of the call (matcher::hold_inputs says why).
  const std::unique_lock<std::recursive_mutex> inputs_held = matcher::hold_inputs(call);
  const Config& cfg = config();
  // A call a window may take is shaped through the window's memory of its position
  // (runtime/infer_memo.hpp): a served step repeats its calls. Any other call -- and one with an
  // undefined input, so that infer_outputs names the op in its error -- is inferred afresh.
  bool memo = cfg.mode == Mode::on && cfg.infer_memo && !call.inputs.empty();
  for (const Tensor& t : call.inputs) memo &= t.defined();
  Stream stream;  // from input 0: before shaping when all inputs are defined, else after
  if (memo) stream = Stream::current(call.inputs[0].device());
  const InferMemo::Shaping shaped(memo ? &matcher::infer_memo(stream) : nullptr, call);
  const OutputInfos& infos = shaped.infos();
  const Device device = call.inputs.empty() ? default_device() : call.inputs[0].device();
  if (!memo) stream = Stream::current(device);
  if (cfg.mode != Mode::off) start_background();
  if (cfg.mode == Mode::on)
    if (std::optional<TensorList> deferred =
            matcher::try_defer(call, infos, stream, inputs_held.mutex(), shaped.attrs_hash()))
      return std::move(*deferred);  // reported with its window (runtime/trace_sink.hpp)
  for (const Tensor& t : call.inputs)
    if (t.impl()->pending) materialize(*t.impl());
  TensorList outs = make_outputs(call, infos, device, nullptr);
  {
    trace::Scope ts("op", op_name(call.op));
    run_eager_into(call, outs, stream);
  }
  if (cfg.mode == Mode::shadow) matcher::shadow_observe(call, outs, stream);
  if (cfg.mode != Mode::off)
    if (TraceSink* sink = trace_sink())
      report_call(*sink, call, std::span<const Tensor>(outs.data(), outs.size()), stream.id());
  return outs;
}

void Executor::materialize(const TensorImpl& t) {
  if (t.pending) matcher::flush_for(t);
}

void Executor::flush_all() {
  matcher::flush_all();  // the windows' calls all came before any held write (submit)
  writes::flush_own();
}

void Executor::expose(const TensorImpl& t) {
  Storage* s = t.storage.get();
  if (!s || s->exposed.load(std::memory_order_acquire)) return;
  // Marked before the windows are looked at: a window that takes this storage after the look
  // sees the mark (both sides hold the window's lock; matcher::settle_readers).
  s->exposed.store(true, std::memory_order_seq_cst);
  matcher::settle_readers(*s);
}

}  // namespace livefuse
