#include "kernels/cpu/gemm_tail.hpp"

#include <atomic>

#include "kernels/cpu/gemm.hpp"

namespace livefuse::cpu {

namespace {

std::atomic<uint64_t> g_tails_run{0};

using RowFn = void (*)(float* row, int64_t n, float s0, float s1);

// One loop per unary row of the op table, over the table's own expression (so the tail's values
// are the eager op's), written to vectorise.
#define LF_TAIL_ROW(name, arity, cat, flags, expr)                       \
  void tail_##name(float* row, int64_t n, [[maybe_unused]] float s0,     \
                   [[maybe_unused]] float s1) {                          \
    if constexpr (arity == 1 && OpCategory::cat == OpCategory::Elementwise) { \
      for (int64_t i = 0; i < n; ++i) {                                  \
        [[maybe_unused]] const float a = row[i], b = 0, c = 0;           \
        row[i] = static_cast<float>(expr);                               \
      }                                                                  \
    }                                                                    \
  }
LF_OP_TABLE(LF_TAIL_ROW)
#undef LF_TAIL_ROW

RowFn unary_row(OpId op) {
  switch (op) {
#define LF_TAIL_CASE(name, arity, cat, flags, expr) \
  case OpId::name:                                  \
    return arity == 1 && OpCategory::cat == OpCategory::Elementwise ? tail_##name : nullptr;
    LF_OP_TABLE(LF_TAIL_CASE)
#undef LF_TAIL_CASE
    default:
      return nullptr;
  }
}

struct TailForm {
  RowFn act = nullptr;
  float s0 = 0, s1 = 0;
  int residual_input = -1;
};

bool all_f32(const jit::Instr& in) {
  return in.dtype == DType::f32 && in.space == jit::Space::Full &&
         (in.kind != jit::InstrKind::Op || in.compute == DType::f32);
}

// Load(product) [-> unary op] [-> add Load(r)] -> Store(out 0), in f32, nothing else.
bool match(const jit::KernelPart& part, int product_input, TailForm* f) {
  if (part.outputs.size() != 1) return false;
  int cur = -1;
  bool stored = false;
  for (size_t i = 0; i < part.instrs.size(); ++i) {
    const jit::Instr& in = part.instrs[i];
    if (stored || !all_f32(in)) return false;
    const int self = static_cast<int>(i);
    switch (in.kind) {
      case jit::InstrKind::Load:
        if (in.io == product_input) {
          if (cur >= 0) return false;
          cur = self;
        }
        break;
      case jit::InstrKind::Op: {
        if (cur < 0 || in.scalar_operand) return false;
        if (in.nargs == 1 && in.arg[0] == cur && !f->act && f->residual_input < 0 &&
            (f->act = unary_row(in.op))) {
          f->s0 = static_cast<float>(in.s[0]), f->s1 = static_cast<float>(in.s[1]);
          cur = self;
          break;
        }
        if (in.op != OpId::add || in.nargs != 2 || f->residual_input >= 0) return false;
        const int other = in.arg[0] == cur ? in.arg[1] : in.arg[1] == cur ? in.arg[0] : -1;
        if (other < 0 || part.instrs[other].kind != jit::InstrKind::Load ||
            part.instrs[other].io == product_input)
          return false;
        f->residual_input = part.instrs[other].io;
        cur = self;
        break;
      }
      case jit::InstrKind::Store:
        if (in.io != 0 || in.arg[0] != cur) return false;
        stored = true;
        break;
      default:
        return false;
    }
  }
  return stored && (f->act || f->residual_input >= 0);
}

bool dense_f32_like(const Tensor& t, const Tensor& out) {
  return t.dtype() == DType::f32 && t.is_contiguous() && t.shape() == out.shape() &&
         t.impl()->storage != nullptr;
}

}  // namespace

bool run_gemm_with_tail(const OpCall& call, const jit::KernelPart& tail, int product_input,
                        std::span<const Tensor> inputs, const Tensor& out) {
  if (call.op != OpId::matmul && call.op != OpId::linear) return false;
  TailForm f;
  if (!match(tail, product_input, &f)) return false;
  const Tensor& product = inputs[product_input];
  if (product.dtype() != DType::f32 || out.dtype() != DType::f32 || !out.is_contiguous() ||
      !(product.shape() == out.shape()))
    return false;
  const Tensor* residual = f.residual_input >= 0 ? &inputs[f.residual_input] : nullptr;
  if (residual && !dense_f32_like(*residual, out)) return false;
  GemmProblem p = call.op == OpId::linear ? linear_problem(call, out) : matmul_problem(call, out);
  p.act = f.act;
  p.act_s0 = f.s0, p.act_s1 = f.s1;
  if (residual) p.residual = static_cast<const std::byte*>(residual->impl()->data());
  gemm(p);
  g_tails_run.fetch_add(1, std::memory_order_relaxed);
  return true;
}

uint64_t gemm_tails_run() { return g_tails_run.load(std::memory_order_relaxed); }

}  // namespace livefuse::cpu
