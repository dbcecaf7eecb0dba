// Executor::submit -- every op call of the program passes here exactly once.
#include "runtime/executor.hpp"

#include "livefuse/config.hpp"
#include "livefuse/error.hpp"
#include "livefuse/stream.hpp"
#include "kernels/backend.hpp"
#include "runtime/registry.hpp"
#include "runtime/trace_sink.hpp"

namespace livefuse {

namespace detail {
std::atomic<TraceSink*> g_trace_sink{nullptr};
}

namespace {

Tensor make_view(const Tensor& x, const Shape& shape, const Strides& strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(x.impl()->storage, offset, shape, strides, x.dtype(),
                                             x.device()));
}

void run_backend(const OpCall& call, std::span<const Tensor> outs, const Stream& stream) {
  if (call.inputs.empty() || call.inputs[0].device().is_cpu()) {
    cpu::run(call, outs);
    return;
  }
#if LIVEFUSE_HAS_CUDA
  cuda::run(call, outs, stream.handle());
#else
  (void)stream;
  throw Error("[" + std::string(op_name(call.op)) + "] CUDA tensor given but livefuse was built without CUDA");
#endif
}

// A dense copy of `x` through the backend (not a separate traced call: it is part of the op
// that needs it).
Tensor dense_copy(const Tensor& x, const Stream& stream) {
  OpCall c;
  c.op = OpId::contiguous;
  c.inputs.push_back(x);
  Tensor out = new_dense(x.shape(), x.dtype(), x.device());
  run_backend(c, std::span<const Tensor>(&out, 1), stream);
  return out;
}

// Views need no kernel: reshape (of a dense tensor), permute and slice only change metadata.
Tensor view_for(const OpCall& call, const OutputInfo& out, const Stream& stream) {
  const Tensor& x = call.inputs[0];
  const Attrs& a = call.attrs;
  switch (call.op) {
    case OpId::reshape: {
      const Tensor src = x.is_contiguous() ? x : dense_copy(x, stream);
      return make_view(src, out.shape, contiguous_strides(out.shape), src.impl()->offset);
    }
    case OpId::permute: {
      Strides st;
      for (int k = 0; k < a.ni; ++k) st.push_back(x.strides()[static_cast<int>(a.i[k])]);
      return make_view(x, out.shape, st, x.impl()->offset);
    }
    case OpId::slice: {
      const int d = static_cast<int>(a.i[0]);
      Strides st = x.strides();
      st[d] *= a.i[3];
      return make_view(x, out.shape, st, x.impl()->offset + a.i[1] * x.strides()[d]);
    }
    default: LF_ASSERT(false, "not a view op: ", op_name(call.op));
  }
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

TensorList Executor::submit(OpCall& call) {
  const OutputInfos infos = infer_outputs(call);
  const Device device = call.inputs.empty() ? default_device() : call.inputs[0].device();
  const Stream stream = Stream::current(device);
  for (const Tensor& t : call.inputs)
    if (t.impl()->pending) materialize(*t.impl());

  TensorList outs;
  const bool is_view = call.category() == OpCategory::Layout && call.op != OpId::concat &&
                       call.op != OpId::contiguous;
  if (is_view) {
    outs.push_back(view_for(call, infos[0], stream));
  } else {
    for (const OutputInfo& o : infos) outs.push_back(new_dense(o.shape, o.dtype, device));
    if (call.op == OpId::opaque) {
      run_opaque(call, outs, stream);
    } else {
      bool empty = false;
      for (const Tensor& t : outs) empty |= t.numel() == 0;
      if (!empty) run_backend(call, std::span<const Tensor>(outs.data(), outs.size()), stream);
    }
  }
  if (config().mode != Mode::off)
    if (TraceSink* sink = trace_sink()) sink->on_call(call, std::span<const Tensor>(outs.data(), outs.size()), stream.id());
  return outs;
}

void Executor::materialize(const TensorImpl& t) {
  // Deferred plan windows (runtime/matcher) bind storage here; without them nothing is pending.
  if (t.pending) flush_all();
}

void Executor::flush_all() {}

}  // namespace livefuse
