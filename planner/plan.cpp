#include "planner/plan.hpp"

#include <atomic>
#include <sstream>

#include "kernels/attention_args.hpp"
#include "kernels/cpu/gemm_tail.hpp"
#include "kernels/jit/cpu_interp.hpp"
#include "kernels/jit/cuda_launch.hpp"
#include "kernels/jit/kernel_compiler.hpp"
#include "kernels/jit/render.hpp"
#include "kernels/jit/tensor_arg.hpp"
#include "livefuse/config.hpp"
#include "livefuse/error.hpp"
#include "livefuse/stream.hpp"
#include "planner/attention_step.hpp"
#include "planner/early_reads.hpp"
#include "planner/plan_siblings.hpp"
#include "planner/rotary_step.hpp"
#include "runtime/append.hpp"
#include "runtime/executor.hpp"
#include "runtime/faults.hpp"
#include "runtime/write_batch.hpp"
#if LIVEFUSE_HAS_CUDA
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/ops_host.hpp"
#include "runtime/memory_pool.hpp"
#endif

namespace livefuse::planner {
namespace {

#if LIVEFUSE_HAS_CUDA
static_assert(kExactEpilogueRows == cuda::kGemvMaxRows);
cuda::LtAct lt_act(GemmEpilogue e) {
  return e == GemmEpilogue::ReluBias ? cuda::LtAct::relu
         : e == GemmEpilogue::GeluBias ? cuda::LtAct::gelu_tanh
                                       : cuda::LtAct::none;
}
bool wants_residual(GemmEpilogue e) {
  return e == GemmEpilogue::Residual || e == GemmEpilogue::BiasResidual;
}

// The CUDA backend's cuBLASLt epilogues (BIAS, RELU_BIAS, GELU_BIAS; C for a residual).
bool cublaslt_epilogue(const OpCall& gemm, GemmEpilogue e, const Tensor* bias,
                       const Tensor* residual, const Tensor& out, void* stream) {
  // (BiasAct is the tensor-core GEMM's: launch_step_cuda runs it before any runner.)
  if (e == GemmEpilogue::None || e == GemmEpilogue::BiasAct || (wants_residual(e) && !residual)) return false;
  return cuda::run_gemm_epilogue(gemm, static_cast<uint8_t>(lt_act(e)), bias, residual, out, stream);
}
constexpr GemmEpilogueRunner kDefaultEpilogueRunner = cublaslt_epilogue;
#else
constexpr GemmEpilogueRunner kDefaultEpilogueRunner = nullptr;
#endif

std::atomic<GemmEpilogueRunner> g_epilogue_runner{kDefaultEpilogueRunner};

}  // namespace

// Gives a pending Materialized value dense storage (the window's pending outputs have none).
void detail::ensure_storage(const Tensor& t, std::shared_ptr<Storage> s) {
  TensorImpl& impl = *t.impl();
  if (impl.storage) return;
  impl.storage = s ? std::move(s) : empty(impl.shape, impl.dtype, impl.device).impl()->storage;
  impl.offset = 0;
  impl.strides = contiguous_strides(impl.shape);
  if (impl.pending == shape_only_tag()) impl.pending = nullptr;
}

namespace {

using detail::ensure_storage;

// Values bound by bind_values carry shape_only_tag() until they have storage.
void settle_tags(const TensorList& outs) {
  for (const Tensor& t : outs)
    if (t.impl()->storage && t.impl()->pending == shape_only_tag()) t.impl()->pending = nullptr;
}

const Tensor& value(std::span<const Tensor> values, int v) {
  LF_ASSERT(v >= 0 && static_cast<size_t>(v) < values.size(), "value ", v, " not bound");
  LF_ASSERT(values[v].defined(), "value ", v, " is an undefined tensor");
  return values[v];
}

std::vector<jit::PartBinding> bindings(const FusedKernelStep& fk, std::span<const Tensor> values) {
  std::vector<jit::PartBinding> out;
  for (const PartIo& io : fk.parts) {
    jit::PartBinding b;
    b.shape = value(values, io.shape_value).shape();
    for (size_t k = 0; k < io.inputs.size(); ++k) {
      const int v = io.inputs[k];
      const Tensor& t = value(values, v);
      LF_CHECK(t.impl()->storage != nullptr || t.numel() == 0, "plan", "input value ", v, " has no storage");
      if (!io.slice.empty() && io.slice[k] >= 0) {  // f32 partial product slice[k] of the value
        const Strides dense = contiguous_strides(t.shape());
        auto* base = static_cast<float*>(t.impl()->storage ? t.impl()->storage->ptr : nullptr);
        b.inputs.push_back(jit::TensorArg{t.numel() == 0 ? nullptr : base + io.slice[k] * t.numel(), DType::f32,
                                          t.shape(), dense});
        continue;
      }
      b.inputs.push_back(t.numel() == 0 ? jit::TensorArg{nullptr, t.dtype(), t.shape(), t.strides()} : jit::tensor_arg(t));
    }
    for (int v : io.outputs) {
      const Tensor& t = value(values, v);
      ensure_storage(t);
      b.outputs.push_back(t.numel() == 0 ? jit::TensorArg{nullptr, t.dtype(), t.shape(), t.strides()} : jit::tensor_arg(t));
    }
    out.push_back(std::move(b));
  }
  return out;
}

OpCall node_call(const PlannedSegment& p, int j, std::span<const Tensor> values, TensorList* outs) {
  const SegmentNode& n = p.segment.nodes[j];
  OpCall c = p.segment.call_of(j, values);
  for (int k = 0; k < static_cast<int>(n.outputs.size()); ++k)
    outs->push_back(value(values, p.segment.value_id(ValueRef::of(j, k))));
  return c;
}

Stream stream_for(Device d, void* handle) {
  if (d.is_cpu()) return Stream::current(d);
  const Stream cur = Stream::current(d);
  return cur.handle() == handle ? cur : Stream::wrap(handle, d);
}

void run_node(const PlannedSegment& p, int j, std::span<const Tensor> values, void* stream) {
  TensorList outs;
  const OpCall c = node_call(p, j, values, &outs);
  const Device d = outs.empty() ? Device::cpu() : outs[0].device();
  Executor::run_eager_into(c, outs, stream_for(d, stream));
  settle_tags(outs);
}

// The reshapes of the siblings' outputs that a folded rotary reads (GemmStep::rotary), bound
// before the rotary's operands are: their own view steps come after the GEMM step's (and bind
// the same views again there).
void bind_rotary_views(const PlannedSegment& p, const GemmStep& gs, std::span<const Tensor> values, void* stream) {
  for (const RotaryOperands& o : gs.rotary.parts) {
    const int view = p.segment.value_ref(o.x).node;
    ensure_storage(value(values, p.segment.value_id(p.segment.nodes[view].inputs[0])));
    run_node(p, view, values, stream);
  }
}

// The GEMM with its tail inside the tile loop (kernels/cpu/gemm_tail.hpp), when the tail has a
// form the loop takes; false: run them one after the other.
bool run_gemm_tail_cpu(const PlannedSegment& p, const GemmStep& gs, std::span<const Tensor> values) {
  const PartIo& io = gs.tail->parts[0];
  if (gs.tail->spec->parts.size() != 1 || io.outputs.size() != 1) return false;
  const int product = p.segment.value_id(ValueRef::of(gs.node));
  int product_input = -1;
  std::vector<Tensor> inputs;
  for (size_t k = 0; k < io.inputs.size(); ++k) {
    if (io.inputs[k] == product) product_input = static_cast<int>(k);
    inputs.push_back(value(values, io.inputs[k]));
  }
  if (product_input < 0) return false;
  TensorList outs;
  const OpCall c = node_call(p, gs.node, values, &outs);
  const Tensor& out = value(values, io.outputs[0]);
  ensure_storage(out);
  return cpu::run_gemm_with_tail(c, gs.tail->spec->parts[0], product_input, inputs, out);
}

// A GEMM step's epilogue operands, bound: what it writes (given storage) and its bias and
// residual (none when the residual is the output's own storage: it cannot be read as C then).
struct EpilogueValues {
  const Tensor* out = nullptr;
  const Tensor* bias = nullptr;
  const Tensor* residual = nullptr;
};

EpilogueValues epilogue_values(const GemmStep& gs, std::span<const Tensor> values) {
  EpilogueValues e;
  e.out = &value(values, gs.final_value);
  ensure_storage(*e.out);
  if (gs.bias_value >= 0) e.bias = &value(values, gs.bias_value);
  if (gs.residual_value >= 0) e.residual = &value(values, gs.residual_value);
  if (e.residual && e.residual->impl()->storage == e.out->impl()->storage) e.residual = nullptr;
  return e;
}

#if LIVEFUSE_HAS_CUDA
// An f32 linear on the tensor-core GEMM near f32's accuracy (LIVEFUSE_GEMM_F32X3: three TF32
// products, kernels/cuda/gemm_tc_f32.cuh) where eager runs cuBLASLt's SIMT f32. False: nothing
// launched (switched off, not an f32 linear, or shapes the kernel refuses); cuBLASLt runs it.
// (f16 / bf16 plain linears stay on cuBLASLt: livefuse's kernel took 1.6-2x its time on BERT's,
// and routing them to it under LIVEFUSE_GEMM_TC=1 made BERT-base b1 0.63-0.66 ms a forward
// against 0.45-0.46 off: bench/RESULTS.md, session 53.)
bool run_linear_f32x3(const PlannedSegment& p, const GemmStep& gs, std::span<const Tensor> values, void* stream) {
  if (!config().gemm_f32x3 || p.segment.nodes[gs.node].op != OpId::linear ||
      p.segment.dtype(ValueRef::of(gs.node)) != DType::f32)
    return false;
  TensorList outs;
  const OpCall c = node_call(p, gs.node, values, &outs);
  if (gemv_rows(outs[0].shape())) return false;  // a few rows: the GEMV's (cuda::run_gemv)
  ensure_storage(outs[0]);
  if (!cuda::run_linear_tc(c, cuda::TcAct::none, std::span<const Tensor>(&outs[0], 1), stream)) return false;
  settle_tags(outs);
  return true;
}
#endif

// The prologue of a GEMM step as the norm call the GEMV takes: the lone norm node's, or for a
// chain (GemmStep::prologue_chain) an rms_norm of its x with its weight.
OpCall prologue_call(const PlannedSegment& p, const GemmStep& gs, std::span<const Tensor> values) {
  TensorList outs;
  OpCall c = node_call(p, gs.prologue, values, &outs);
  if (gs.prologue_chain.empty()) return c;
  c.inputs.clear();
  c.inputs.push_back(value(values, gs.prologue_x));
  c.inputs.push_back(value(values, gs.prologue_scale));
  c.attrs.i[0] = 1;  // weighted
  return c;
}

// Runs the prologue's nodes eagerly (a call the GEMV does not take).
void run_prologue(const PlannedSegment& p, const GemmStep& gs, std::span<const Tensor> values, void* stream) {
  for (int j : gs.prologue_nodes()) run_node(p, j, values, stream);
}

// A GEMM step with a norm prologue as one GEMV (cuda::run_gemv_norm): the norm's input through
// the norm into the product, then the epilogue when there is one; a tail without an epilogue
// is the caller's to launch after. False: nothing launched.
bool launch_gemv_prologue(const PlannedSegment& p, const GemmStep& gs, std::span<const Tensor> values,
                          void* stream) {
#if LIVEFUSE_HAS_CUDA
  TensorList outs;
  const OpCall c = node_call(p, gs.node, values, &outs);
  const OpCall nc = prologue_call(p, gs, values);
  const bool round_first = !gs.prologue_chain.empty();
  if (gs.epilogue == GemmEpilogue::None || gs.final_value < 0) {
    ensure_storage(outs[0]);
    return cuda::run_gemv_norm(nc, c, 0, nullptr, nullptr, outs[0], stream, round_first);
  }
  const EpilogueValues e = epilogue_values(gs, values);
  if ((wants_residual(gs.epilogue) && !e.residual) || gs.epilogue == GemmEpilogue::BiasAct) return false;
  return cuda::run_gemv_norm(nc, c, static_cast<uint8_t>(lt_act(gs.epilogue)), e.bias, e.residual, *e.out,
                             stream, round_first);
#else
  (void)p, (void)gs, (void)values, (void)stream;
  return false;
#endif
}

// A split GEMM step (GemmStep::partials): the linear's f32 partial products into its value's
// storage, which must hold them all (FusedPlan's sets allocate that much; a value bound here
// without storage, or with less, gets its own). The row kernel after it reads them.
void launch_partials(const PlannedSegment& p, const GemmStep& gs, std::span<const Tensor> values, void* stream) {
#if LIVEFUSE_HAS_CUDA
  TensorList outs;
  const OpCall c = node_call(p, gs.node, values, &outs);
  TensorImpl& y = *outs[0].impl();
  const size_t need = PlannedSegment::partials_bytes(y.shape, gs.partials);
  if (need == 0) return;
  if (!y.storage || y.storage->bytes < need || y.offset != 0) {
    y.storage = allocate_storage(y.device, need, stream);
    y.offset = 0;
    y.strides = contiguous_strides(y.shape);
    if (y.pending == shape_only_tag()) y.pending = nullptr;
  }
  LF_CHECK(cuda::run_linear_partials(c, gs.partials, static_cast<float*>(y.storage->ptr), stream), "plan",
           "linear #", gs.node, ": its operands (", c.inputs[0].shape().str(), ", ", c.inputs[1].shape().str(),
           ") do not take the ", gs.partials, "-way split GEMM it was planned as (a dense weight, input rows read "
           "along K)");
#else
  (void)p, (void)gs, (void)values, (void)stream;
  throw Error("[plan] a split GEMM step: this build has no CUDA backend");
#endif
}

AttentionArgs bind_attention(const PlannedSegment& p, const AttentionStep& a, std::span<const Tensor> values,
                             void* stream) {
  const AttentionOperands& o = a.operands;
  const Tensor& out = value(values, o.out);
  ensure_storage(out);
  const Tensor& q = value(values, o.q);
  const Tensor& k = value(values, o.k);
  const Tensor& v = value(values, o.v);
  // The caches this step grows (AttentionOperands::k_append): their storage as the concats' own
  // would be -- the old cache's block when it may be taken over (runtime/append.hpp).
  OpCall kc, vc;
  if (o.k_append >= 0) {
    TensorList ko, vo;
    kc = node_call(p, o.k_append, values, &ko);
    vc = node_call(p, o.v_append, values, &vo);
    append::give_storage(&kc, *ko[0].impl(), stream);
    append::give_storage(&vc, *vo[0].impl(), stream);
    settle_tags(ko);
    settle_tags(vo);
  }
  for (const Tensor* t : {&q, &k, &v})
    LF_CHECK(t->impl()->storage != nullptr || t->numel() == 0, "plan", "an attention input has no storage");
  AttentionArgs args =
      attention_args(q, k, v, o.mask >= 0 ? value(values, o.mask) : Tensor{}, out, o.heads_inner, o.scale, o.groups);
  if (o.k_append >= 0) bind_append(args, k, v, kc.inputs[0], kc.inputs[1], vc.inputs[0], vc.inputs[1]);
  return args;
}

}  // namespace

void set_gemm_epilogue_runner(GemmEpilogueRunner r) { g_epilogue_runner.store(r); }

void run_step_cpu(const PlannedSegment& p, const Step& s, std::span<const Tensor> values) {
  if (const auto* fk = std::get_if<FusedKernelStep>(&s.body)) {
    const auto b = bindings(*fk, values);
    jit::run_spec_cpu(*fk->spec, b);
  } else if (const auto* gs = std::get_if<GemmStep>(&s.body)) {
    if (!gs->siblings.empty()) {
      run_prologue(p, *gs, values, nullptr);  // (CUDA plans only)
      if (!detail::run_merged_gemm_cpu(p, *gs, values))
        for (int j : gs->siblings) run_node(p, j, values, nullptr);
      if (gs->tail) jit::run_spec_cpu(*gs->tail->spec, bindings(*gs->tail, values));  // (CUDA plans only)
      if (!gs->rotary.parts.empty()) {  // (CUDA plans only)
        bind_rotary_views(p, *gs, values, nullptr);
        RotaryArgs args[kRotaryMaxParts];
        cpu::run_rotary(args, bind_rotary(gs->rotary, values, args));
      }
      return;
    }
    run_prologue(p, *gs, values, nullptr);  // (CUDA plans only)
    if (gs->tail && run_gemm_tail_cpu(p, *gs, values)) return;
    run_node(p, gs->node, values, nullptr);
    if (gs->tail) jit::run_spec_cpu(*gs->tail->spec, bindings(*gs->tail, values));
  } else if (const auto* e = std::get_if<EagerStep>(&s.body)) {
    run_node(p, e->node, values, nullptr);
  } else if (const auto* v = std::get_if<ViewStep>(&s.body)) {
    run_node(p, v->node, values, nullptr);
  } else if (const auto* o = std::get_if<OpaqueStep>(&s.body)) {
    run_node(p, o->node, values, nullptr);
  } else if (const auto* a = std::get_if<AttentionStep>(&s.body)) {
    cpu::run_attention(bind_attention(p, *a, values, nullptr));
  } else if (const auto* r = std::get_if<RotaryStep>(&s.body)) {
    RotaryArgs args[kRotaryMaxParts];
    cpu::run_rotary(args, bind_rotary(*r, values, args));
  }
}


void launch_step_cuda(const PlannedSegment& p, const Step& s, std::span<const Tensor> values, void* stream) {
  auto launch = [&](const FusedKernelStep& fk) {
    std::shared_ptr<const jit::KernelSpec> spec;
    std::shared_ptr<jit::CompiledKernel> kernel;
    {
      std::lock_guard<std::mutex> lock(*fk.mu);
      spec = fk.spec;
      kernel = fk.compiled;
    }
    LF_CHECK(kernel != nullptr, "plan", s.label, " was not compiled: ", fk.compile_error);
    const auto b = bindings(fk, values);
    std::optional<jit::Variant> missing;
    std::string err = jit::launch_spec_cuda(*spec, *kernel, b, stream, &missing);
    if (!err.empty() && missing) {
      // Rare (shapes far from the ones planned for): the sibling with that variant is compiled
      // on the arena, once, while the windows run eagerly -- a compile here would stall the
      // program's thread for tens of milliseconds (a decode token, 50x its time).
      std::shared_future<jit::CompileResult> f;
      std::shared_ptr<const jit::KernelSpec> want;
      {
        std::lock_guard<std::mutex> lock(*fk.mu);
        if (!fk.sibling.valid()) {
          auto sibling = std::make_shared<jit::KernelSpec>(*spec);
          sibling->variants |= jit::variant_bit(*missing);
          fk.sibling_spec = sibling;
          fk.sibling = jit::KernelCompiler::global().submit(sibling, jit::default_compile_options());
        }
        f = fk.sibling;
        want = fk.sibling_spec;
      }
      if (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
        throw KernelNotReady("[plan] " + s.label + ": " + err + "; its kernel is compiling");
      const jit::CompileResult& r = f.get();
      LF_CHECK(r.ok(), "plan", s.label, ": ", err, "; compiling it failed: ", r.error);
      {
        std::lock_guard<std::mutex> lock(*fk.mu);
        fk.spec = want;
        fk.compiled = r.kernel;
        fk.sibling = {};
        fk.sibling_spec = nullptr;
      }
      err = jit::launch_spec_cuda(*want, *r.kernel, b, stream);
    }
    LF_CHECK(err.empty(), "plan", s.label, ": ", err);
  };
  if (const auto* fk = std::get_if<FusedKernelStep>(&s.body)) {
    launch(*fk);
  } else if (const auto* gs = std::get_if<GemmStep>(&s.body)) {
#if LIVEFUSE_HAS_CUDA
    const cuda::EarlyWeightsScope early(weights_early(p, *gs));
#endif
    if (!gs->siblings.empty()) {
      const bool rotates = !gs->rotary.parts.empty();
      // The rotary of q and k (GemmStep::rotary) as its own kernel, after a product without it.
      const auto rotary = [&] {
#if LIVEFUSE_HAS_CUDA
        RotaryArgs args[kRotaryMaxParts];
        if (rotates) cuda::launch_rotary(args, bind_rotary(gs->rotary, values, args), stream);
#endif
      };
      if (rotates) bind_rotary_views(p, *gs, values, stream);
      const OpCall nc = gs->prologue >= 0 ? prologue_call(p, *gs, values) : OpCall{};
      const OpCall* norm = gs->prologue >= 0 ? &nc : nullptr;
      const bool round_first = !gs->prologue_chain.empty();
      if (rotates && detail::launch_merged_gemv_rotary_cuda(p, *gs, values, norm, round_first, stream)) return;
      if (norm) {
        if (detail::launch_merged_gemv_cuda(p, *gs, values, norm, round_first, stream)) return rotary();
        run_prologue(p, *gs, values, stream);
      }
      if (gs->tail && detail::launch_merged_gemv_cuda(p, *gs, values, nullptr, false, stream)) return;
      if (!detail::launch_merged_gemm_cuda(p, *gs, values, stream))
        for (int j : gs->siblings) run_node(p, j, values, stream);
      if (gs->tail) launch(*gs->tail);  // a Gated step's act(gate) * up, as its own kernel
      return rotary();
    }
    if (gs->partials > 1) {
      launch_partials(p, *gs, values, stream);
      return;
    }
    if (gs->prologue >= 0) {
      if (launch_gemv_prologue(p, *gs, values, stream)) {
        if (gs->tail && gs->epilogue == GemmEpilogue::None) launch(*gs->tail);
        return;
      }
      run_prologue(p, *gs, values, stream);
    }
#if LIVEFUSE_HAS_CUDA
    if (gs->epilogue == GemmEpilogue::None && run_linear_f32x3(p, *gs, values, stream)) {
      if (gs->tail) launch(*gs->tail);
      return;
    }
    if (gs->epilogue == GemmEpilogue::BiasAct && gs->final_value >= 0) {
      TensorList outs;
      const OpCall c = node_call(p, gs->node, values, &outs);
      const EpilogueValues e = epilogue_values(*gs, values);
      if (cuda::run_linear_tc(c, cuda::tc_act_of(gs->act), std::span<const Tensor>(e.out, 1), stream)) return;
    }
#endif
    if (gs->epilogue != GemmEpilogue::None && gs->final_value >= 0) {
      if (GemmEpilogueRunner r = g_epilogue_runner.load()) {
        TensorList outs;
        const OpCall c = node_call(p, gs->node, values, &outs);
        const EpilogueValues e = epilogue_values(*gs, values);
        if (r(c, gs->epilogue, e.bias, e.residual, *e.out, stream)) return;
      }
    }
    run_node(p, gs->node, values, stream);
    if (gs->tail) launch(*gs->tail);
  } else if (const auto* e = std::get_if<EagerStep>(&s.body)) {
    run_node(p, e->node, values, stream);
  } else if (const auto* v = std::get_if<ViewStep>(&s.body)) {
    run_node(p, v->node, values, stream);
  } else if (const auto* o = std::get_if<OpaqueStep>(&s.body)) {
    run_node(p, o->node, values, stream);
  } else if (const auto* a = std::get_if<AttentionStep>(&s.body)) {
#if LIVEFUSE_HAS_CUDA
    AttentionArgs args = bind_attention(p, *a, values, stream);
    args.early_kv = kv_early(p, *a);
    cuda::launch_attention(args, stream);
#else
    (void)a;
    throw Error("[plan] " + s.label + ": this build has no CUDA backend");
#endif
  } else if (const auto* r = std::get_if<RotaryStep>(&s.body)) {
#if LIVEFUSE_HAS_CUDA
    RotaryArgs args[kRotaryMaxParts];
    cuda::launch_rotary(args, bind_rotary(*r, values, args), stream);
#else
    (void)r;
    throw Error("[plan] " + s.label + ": this build has no CUDA backend");
#endif
  }
}

bool launch_concats_cuda(const PlannedSegment& p, size_t begin, size_t end, std::span<const Tensor> values,
                         void* stream) {
#if LIVEFUSE_HAS_CUDA
  if (end - begin < 2) return false;
  for (size_t s = begin; s < end; ++s) {
    const auto* e = std::get_if<EagerStep>(&p.steps[s].body);
    if (!e || p.segment.nodes[e->node].op != OpId::concat) return false;
  }
  std::vector<cuda::CopyJob> jobs;
  std::vector<TensorList> outs(end - begin);
  for (size_t s = begin; s < end; ++s) {
    TensorList& o = outs[s - begin];
    const OpCall c = node_call(p, std::get<EagerStep>(p.steps[s].body).node, values, &o);
    TensorImpl& out = *o[0].impl();
    append::give_storage(&c, out, stream);
    if (o[0].numel() > 0) cuda::concat_copies(c, o[0], jobs);
  }
  cuda::launch_copies(jobs.data(), static_cast<int>(jobs.size()), static_cast<cudaStream_t>(stream));
  for (const TensorList& o : outs) settle_tags(o);
  return true;
#else
  (void)p, (void)begin, (void)end, (void)values, (void)stream;
  return false;
#endif
}

void run_plan(const PlannedSegment& p, std::span<const Tensor> values, void* stream) {
  // A plan reads its inputs' storage: this thread's held in-place writes land first. (The
  // matcher runs plans after a call or sync point that already enqueued them; callers that
  // reach a plan some other way get the same order.)
  writes::flush_own();
  const StepsRun run;  // after the held writes: their copies are not the run's
  bool cuda = false;
  for (const Tensor& t : values)
    if (t.defined()) {
      cuda = t.device().is_cuda();
      break;
    }
  for (const Step& s : p.steps) {
    if (&s != &p.steps.front() && faults::fire(faults::Point::step))
      throw KernelNotReady("[plan] " + s.label + ": injected fault: its kernel is compiling");
    if (cuda) launch_step_cuda(p, s, values, stream);
    else run_step_cpu(p, s, values);
  }
}

std::vector<Tensor> bind_values(const PlannedSegment& p, const std::vector<Tensor>& externals) {
  const Segment& seg = p.segment;
  LF_CHECK(externals.size() == seg.externals.size(), "plan", "expected ", seg.externals.size(), " externals, got ",
           externals.size());
  const Device d = externals.empty() ? Device::cpu() : externals[0].device();
  // An external may be the pending output of a window a live plan deferred (the caller got it
  // from the runtime API); the steps read its storage, so that window is flushed first.
  for (const Tensor& t : externals)
    if (t.defined() && t.impl()->pending) Executor::materialize(*t.impl());
  std::vector<Tensor> values(externals.begin(), externals.end());
  values.resize(seg.num_values());
  for (int j = 0; j < static_cast<int>(seg.nodes.size()); ++j) {
    const SegmentNode& n = seg.nodes[j];
    OpCall c = seg.call_of(j, values);
    const OutputInfos infos = infer_outputs(c);
    const bool is_view = n.op == OpId::reshape || n.op == OpId::permute || n.op == OpId::slice ||
                         n.op == OpId::expand;
    // Views follow their source's layout (storage when their View step runs); everything else
    // is a dense handle that gets storage where a step writes it (ensure_storage).
    TensorList views = is_view ? Executor::make_outputs(c, infos, d, nullptr) : TensorList{};
    for (Tensor& t : views)
      if (!t.impl()->storage) t.impl()->pending = shape_only_tag();
    for (size_t k = 0; k < infos.size(); ++k) {
      const int v = seg.value_id(ValueRef::of(j, static_cast<int>(k)));
      if (is_view) {
        values[v] = views[k];
        continue;
      }
      values[v] = shape_only_tensor(infos[k].shape, infos[k].dtype, {}, d);
    }
  }
  return values;
}

std::string PlannedSegment::describe() const {
  std::ostringstream os;
  os << "plan: " << summary.ops << " ops, " << summary.eager_launches << " eager launches -> " << summary.plan_launches
     << " (" << summary.fused_kernels << " fused kernels)\n";
  for (size_t i = 0; i < steps.size(); ++i) {
    os << "  step " << i << ": " << steps[i].label;
    if (const auto* fk = std::get_if<FusedKernelStep>(&steps[i].body)) os << "\n" << jit::to_string(*fk->spec);
    else os << "\n";
  }
  for (const Decision& d : decisions) os << "  decision: " << d.what << " -- " << d.reason << "\n";
  return os.str();
}

}  // namespace livefuse::planner
