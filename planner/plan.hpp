#pragma once
// PlannedSegment: what the planner makes of a Segment -- an ordered list of steps, ready to
// execute once values are bound. This is the interface for the executing side (the runtime's
// Plan::run and graphs/ capture).
//
// Values are the segment's value ids (externals, then node outputs; Segment::value_id). To run,
// the caller provides one Tensor per value id, each with its shape (the window's pending
// outputs are exactly that):
//   External      bound to the caller's tensor;
//   Materialized  storage is allocated by the step that writes it if it has none yet (or the
//                 caller may bind its own dense buffer);
//   View          gets its source's storage when its View step runs (Executor::run_eager_into);
//   Virtual/Dead  never touched (may stay pending).
// Steps run in order: run_step_cpu on the CPU, launch_step_cuda on a CUDA stream (enqueue
// only; capturable into a CUDA graph once every kernel is compiled and loaded).
//
// Step kinds:
//   FusedKernel  one KernelSpec launch (pointwise, row or horizontal); CPU: the interpreter
//   Gemm         matmul/linear via the backend, then its pointwise tail as one fused kernel;
//                or sibling linears over one input as one GEMM (`siblings`);
//                `epilogue` says which cuBLASLt epilogue covers the tail: CUDA builds run it
//                through cuBLASLt (set_gemm_epilogue_runner replaces or removes that runner)
//   Eager        one op through Executor::run_eager_into (the eager backends)
//   View         a layout op: no kernel (a dense copy only for a reshape of a non-contiguous view)
//   Opaque       a user kernel
//   Attention    softmax(q kᵀ * scale + mask) v as one kernel (kernels/attention_args.hpp):
//                scores and probabilities are never written
//   Rotary       x * cos + rotate_half(x) * sin, one or more, as one kernel
//                (kernels/rotary_args.hpp)
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "kernels/jit/kernel_cache.hpp"
#include "kernels/jit/kernel_compiler.hpp"
#include "kernels/jit/kernel_spec.hpp"
#include "livefuse/error.hpp"
#include "planner/fusion_graph.hpp"

namespace livefuse::planner {

// Operands of one KernelSpec part, as value ids.
struct PartIo {
  int shape_value = -1;         // the value whose shape is the part's iteration shape
  std::vector<int> inputs;      // per spec input
  std::vector<int> outputs;     // per spec output
  // Per spec input, empty when none: s >= 0 reads f32 partial product s of its value instead of
  // the value (a split GEMM's, GemmStep::partials; planner/split_k_rows.hpp); -1 the value.
  std::vector<int> slice;
};

struct FusedKernelStep {
  std::vector<PartIo> parts;
  std::vector<int> nodes;  // segment nodes it computes
  std::string compile_error;
  // The spec and its compiled kernel (CUDA: set by compile_plan). A launch that needs a variant
  // the planner did not ask for (say 64-bit indexing after the shapes grew) submits a sibling
  // to the compiler (`sibling`) and throws KernelNotReady: those windows run eagerly until it is
  // compiled, then the launch swaps both, under `mu`. Never a compile on the program's thread.
  mutable std::shared_ptr<const jit::KernelSpec> spec;
  mutable std::shared_ptr<jit::CompiledKernel> compiled;
  mutable std::shared_ptr<const jit::KernelSpec> sibling_spec;
  mutable std::shared_future<jit::CompileResult> sibling;
  std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();
};

// A step's kernel is being compiled for these shapes (FusedKernelStep::sibling): the plan
// declines the window, which runs eagerly; the plan is not at fault and keeps serving.
struct KernelNotReady : Error {
  using Error::Error;
};

class MergedWeights;  // planner/merged_weights.hpp

struct RotaryStep {
  std::vector<RotaryOperands> parts;  // at most kRotaryMaxParts (kernels/rotary_args.hpp)
  std::vector<int> nodes;             // segment nodes it computes
};

struct GemmStep {
  int node = -1;
  GemmEpilogue epilogue = GemmEpilogue::None;
  int bias_value = -1;
  int residual_value = -1;                // Residual / BiasResidual: what cuBLASLt reads as C
  std::shared_ptr<FusedKernelStep> tail;  // null: the GEMM alone
  int final_value = -1;                   // the tail's last output (what an epilogue writes)
  // Sibling linears over one input run as this one GEMM (pass_gemm_siblings, plan_siblings.cpp):
  // every one of them, `node` first, in the order of their columns in the merged product. Their
  // weights (and biases) are concatenated into plan-owned copies kept in `merged`.
  std::vector<int> siblings;
  std::shared_ptr<MergedWeights> merged;
  bool split_kernel = false;  // CUDA: one more launch splits the merged product (plan_siblings.cpp)
  // Gated (a merged gate/up pair, `tail` their act(gate) * up): the gate's activation, and
  // whether the gate is the second sibling. The GEMV writes final_value (plan_siblings.cpp).
  // BiasAct: the activation the tensor-core GEMM applies after the bias.
  OpId act{};
  bool gate_second = false;
  // CUDA, few rows: the layer_norm / rms_norm node whose output only this linear reads, run
  // inside the GEMV (kernels/cuda/gemv.hpp, its prologue; planner.cpp, fold_norm_prologues).
  // A call the GEMV cannot take runs that node eagerly first, then the GEMM as without it.
  int prologue = -1;
  // The norm as Llama writes it, [cast(x, f32)] -> rms_norm (no weight) -> [cast(dtype)] -> mul
  // by a weight: every node of it (ascending; `prologue` is the rms_norm), the norm's input x
  // and the weight as value ids. The GEMV rounds the normalized element to the dtype before the
  // weight scales it, as those ops do. Empty: `prologue` is a lone layer_norm / rms_norm.
  std::vector<int> prologue_chain;
  int prologue_x = -1, prologue_scale = -1;
  // The prologue's nodes, in order (none, the lone norm, or the chain).
  std::vector<int> prologue_nodes() const {
    if (!prologue_chain.empty()) return prologue_chain;
    return prologue >= 0 ? std::vector<int>{prologue} : std::vector<int>{};
  }
  // CUDA, > 1: the linear writes this many f32 partial products over K slices into its output
  // value's storage (cuda::run_linear_partials) and the row kernel that alone reads it adds them
  // up with the bias (planner/split_k_rows.hpp): cuBLASLt's split-K reduction kernel is not run.
  int partials = 0;
  // CUDA, one row: the rotary step of some of the merged siblings' outputs (a decode layer's q
  // and k), applied by the GEMV as it writes them (planner/rotary_epilogue.cpp). A call the GEMV
  // cannot take runs the GEMM, then this step's kernel. Empty: none.
  RotaryStep rotary;
};

struct AttentionStep {
  AttentionOperands operands;
  std::vector<int> nodes;  // segment nodes it computes
};

struct EagerStep { int node = -1; };
struct ViewStep { int node = -1; };
struct OpaqueStep { int node = -1; };

struct Step {
  std::variant<FusedKernelStep, GemmStep, EagerStep, ViewStep, OpaqueStep, AttentionStep, RotaryStep> body;
  std::string label;
  int launches() const;  // kernels it launches (views: 0)
  std::vector<int> nodes() const;  // the segment nodes it computes
  // The generated kernel it runs, if any: a fused kernel step's, or a GEMM's elementwise tail.
  FusedKernelStep* generated_kernel();
};

struct PlanSummary {
  int ops = 0;               // live nodes
  int eager_launches = 0;    // kernels eager execution launches for them
  int plan_launches = 0;     // kernels this plan launches
  int fused_kernels = 0;
  double eager_bytes = 0, plan_bytes = 0;
};

struct PlannedSegment {
  Segment segment;
  std::vector<ValueKind> values;
  // Per value id, empty when none: > 0 when the value's storage holds that many f32 partial
  // products of its shape instead of the value (GemmStep::partials): what FusedPlan allocates.
  std::vector<int> partials;
  // Bytes a value of `shape` holding `parts` f32 partial products takes.
  static size_t partials_bytes(const Shape& shape, int parts) {
    return static_cast<size_t>(shape.numel()) * sizeof(float) * static_cast<size_t>(parts);
  }
  std::vector<Step> steps;
  std::vector<Decision> decisions;
  PlanSummary summary;

  int num_kernels() const { return summary.plan_launches; }
  std::string describe() const;
};

// Runs one step on the CPU. Throws livefuse::Error when the bound shapes do not fit the plan
// (the caller then runs the window eagerly).
void run_step_cpu(const PlannedSegment& p, const Step& s, std::span<const Tensor> values);
// Enqueues one step on `stream` (a cudaStream_t). Throws livefuse::Error on failure.
void launch_step_cuda(const PlannedSegment& p, const Step& s, std::span<const Tensor> values, void* stream);
// Steps [begin, end) when each is a lone concat, on CUDA: all their copies in one launch (a
// decode step grows its K and V caches with one concat each). False (nothing run) otherwise.
bool launch_concats_cuda(const PlannedSegment& p, size_t begin, size_t end, std::span<const Tensor> values,
                         void* stream);
// Makes every merged sibling GEMM's concatenated weights current for these values on `stream`
// (copies where a source may have changed: merged_weights.hpp) and returns a hash of the
// addresses they live at. A CUDA graph bakes those in, so FusedPlan calls this before any
// capture or replay and adds the hash to the graph's key. run_plan calls it too.
uint64_t prepare_merged_weights(const PlannedSegment& p, std::span<const Tensor> values, void* stream);
// All steps, in order, on the values' device.
void run_plan(const PlannedSegment& p, std::span<const Tensor> values, void* stream = nullptr);

// Test/benchmark helper: every value of the segment for the given externals -- node outputs as
// fresh dense tensors (views as views) on the externals' device. The runtime binds its own.
std::vector<Tensor> bind_values(const PlannedSegment& p, const std::vector<Tensor>& externals);

// cuBLASLt epilogue hook (CUDA builds start with cuBLASLt's): a runner that computes gemm + epilogue into
// `out` (returns false when it cannot, then the GEMM + tail kernel path runs).
using GemmEpilogueRunner = bool (*)(const OpCall& gemm, GemmEpilogue epilogue, const Tensor* bias,
                                    const Tensor* residual, const Tensor& out, void* stream);
void set_gemm_epilogue_runner(GemmEpilogueRunner r);

}  // namespace livefuse::planner
