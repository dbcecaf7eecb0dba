#pragma once
// FusionGraph: the planner's working state, which the named passes (passes.hpp) transform in
// order: node roles, fusion groups, value kinds, decisions. dump() prints it (LIVEFUSE_LOG=debug
// shows it after every pass).
#include <functional>
#include <string>
#include <vector>

#include "planner/cost_model.hpp"
#include "planner/decision.hpp"
#include "planner/segment.hpp"

namespace livefuse::planner {

// What the planner can do with a node.
enum class Role : uint8_t {
  Pointwise,  // elementwise table rows, custom ops, contiguous (a copy)
  Row,        // sum/mean/max over the last dim (float), softmax, layer_norm, rms_norm
  Gemm,       // matmul, linear
  View,       // reshape, permute, slice: no kernel; consumers load through the view
  Eager,      // everything else the planner does not fuse (concat, embedding, argmax, ...)
  Opaque,     // user kernels: never looked into
  Dead,       // result never used and not observable: not computed at all
};

// Attention: the template step matmul(q, kᵀ) -> softmax -> matmul(., v) (pass_attention).
// Rotary: the template step x * cos + rotate_half(x) * sin, one or more of them (pass_rotary).
enum class GroupKind : uint8_t { Pointwise, Row, Gemm, View, Eager, Opaque, Attention, Rotary };
// A template step's group: a kernel of its own over operands its pass matched.
inline bool is_template(GroupKind k) { return k == GroupKind::Attention || k == GroupKind::Rotary; }

// cuBLASLt epilogues a GEMM step can absorb. Residual: + a tensor of the product's shape, read
// as cuBLASLt's C input (beta = 1), after the bias if there is one (a layer's output projection
// and its residual add). Gated: merged gate and up siblings whose outputs only act(gate) * up
// reads -- a gated MLP's -- written as that product by the few-row GEMV (GemvArgs::gated; no
// cuBLASLt form: other row counts run the merged GEMM, then the tail kernel).
// BiasAct: the linear's bias, then an activation cuBLASLt has no epilogue for (erf gelu, silu),
// applied by livefuse's tensor-core GEMM (CUDA, f16 / bf16: kernels/cuda/gemm_tc.hpp).
enum class GemmEpilogue : uint8_t { None, Bias, ReluBias, GeluBias, Residual, BiasResidual, Gated, BiasAct };
// Products of at most this many rows run as the CUDA GEMV (kernels/cuda/gemv.hpp,
// kGemvMaxRows), whose epilogue rounds as eager's ops do: there a half-precision residual can be
// fused (pass_gemm_epilogue.cpp, residual_of).
inline constexpr int64_t kExactEpilogueRows = 8;
// Whether a product whose output has shape `s` is one of those: at most kExactEpilogueRows rows
// of at least one column.
inline bool gemv_rows(const Shape& s) {
  return s.rank > 0 && s.v[s.rank - 1] > 0 && s.numel() / s.v[s.rank - 1] <= kExactEpilogueRows;
}

struct Group {
  int id = 0;
  GroupKind kind = GroupKind::Eager;
  std::vector<int> nodes;  // ascending
  Shape shape;             // iteration shape F (pointwise, row)
  bool alive = true;       // false once merged into another group
  int horizontal = -1;     // pointwise: index into FusionGraph::horizontal
  int tail = -1;           // gemm: the pointwise group that runs after it (its epilogue)
  int tail_of = -1;        // pointwise: the gemm group it is the tail of
  GemmEpilogue epilogue = GemmEpilogue::None;
  int bias_value = -1;     // value id of the epilogue's bias (matmul + add(bias))
  int residual_value = -1;  // value id of the epilogue's residual (Residual, BiasResidual)
  OpId act{};               // Gated: the gate's activation (silu, gelu, gelu_tanh, relu); BiasAct: the activation
  bool gate_second = false;  // Gated: the gate is the second sibling (the first is up)
  int attention = -1;      // attention: index into FusionGraph::attention
  int rotary = -1;         // rotary: index into FusionGraph::rotary
};

// What an attention group reads and writes, as value ids (pass_attention matches them).
struct AttentionOperands {
  int q = -1, k = -1, v = -1;  // k: the value before its transpose
  int mask = -1;               // -1: softmax without a mask
  int out = -1;                // the value the step writes
  // true: `out` is the dense [b, s, heads, dv] (or [b, s, heads * dv]) of an absorbed
  // permute({0, 2, 1, 3}) + contiguous (or copying reshape); false: the product [.., heads, s, dv].
  bool heads_inner = false;
  double scale = 1.0;
  // Grouped-query attention (examples/decoder): q holds each K/V head's G query heads stacked
  // as rows [G * t], the scores are seen as [.., G, t, sk] by the softmax (and its mask), and a
  // heads_inner result is [b, t, heads * G, dv]. 1: plain attention.
  int64_t groups = 1;
  // The concat nodes that grow the K and V caches by the step's rows, done by the attention
  // step (AttentionArgs::first_new): k and v are then their results (the caches after the
  // append), read by nothing else in the segment. -1, -1: none.
  int k_append = -1, v_append = -1;
};

// One rotate-half rotary embedding a rotary group computes (pass_rotary matches it), as value
// ids: out = x * cos + concat(-x[.., h:], x[.., :h]) * sin along the last dim.
struct RotaryOperands {
  int x = -1, cos = -1, sin = -1;
  int out = -1;  // the add's value: what the step writes
};

enum class ValueKind : uint8_t {
  External,      // given by the caller
  Materialized,  // written to memory by its producer step
  View,          // a view of another value (layout node): no storage of its own
  Virtual,       // lives only inside one fused kernel (registers / tiles)
  Dead,          // never computed
};

struct PlannerOptions {
  CostModel cost;
  KernelLimits limits;
  bool fusion = true;         // LIVEFUSE_FUSION
  bool horizontal = true;
  bool gemm_epilogue = true;
  bool attention = true;      // the fused attention template (pass_attention)
  // LIVEFUSE_ATTENTION=auto on CUDA: only shapes a fast CUDA kernel takes (attention_fast_on_cuda)
  bool attention_fast_only = false;
  // LIVEFUSE_ATTENTION_APPEND: the KV caches' concats read only by an attention join its step
  bool attention_append = true;
  bool rotary = true;         // the rotary template (pass_rotary)
  bool gemm_siblings = true;  // linears over one input as one GEMM (pass_gemm_siblings)
  // CUDA, LIVEFUSE_GEMM_TC: an erf-GELU or SiLU after a linear's bias rides on livefuse's
  // tensor-core GEMM (GemmEpilogue::BiasAct) where cuBLASLt would need the activation's kernel.
  bool gemm_tc = false;
  // CUDA, LIVEFUSE_GEMM_F32X3: f32 linears run on the tensor-core GEMM as three TF32 products --
  // BiasAct for f32 too, and merged f32 siblings write their outputs in one launch (no split).
  bool gemm_f32x3 = false;
  bool cuda = false;          // planning for a CUDA device (what a step launches differs)
  // CUDA, LIVEFUSE_GEMV: a few-row linear takes the norm before it into its GEMV
  // (planner.cpp, fold_norm_prologues).
  bool gemv_prologue = false;
  // CUDA, LIVEFUSE_GEMV_NORM (with gemv_prologue): which norms fold -- 0 none, 1 a lone
  // layer_norm / rms_norm, 2 also Llama's cast -> rms_norm -> cast -> mul chain.
  int gemv_norm_fold = 0;
  // CUDA, LIVEFUSE_GEMV_ROTARY (with gemv_prologue): a one-row Q/K/V GEMV applies the rotary of
  // q and k as it writes them (planner/rotary_epilogue.hpp).
  bool gemv_rotary = true;
  // CUDA, LIVEFUSE_SPLIT_K_ROWS: how many K slices a linear of rows x N x K should be split into
  // when a row kernel is its only reader (planner/split_k_rows.hpp); returns < 2 for none. Set
  // to cuBLASLt's own choice on CUDA (cuda::linear_split_k); tests set it directly.
  std::function<int(int64_t rows, int64_t n, int64_t k, DType dtype, bool bias)> split_k;
  // Called with (pass name, dump) after every pass; LIVEFUSE_LOG=debug prints to stderr.
  std::function<void(const std::string&, const std::string&)> dump;
};

struct FusionGraph {
  Segment seg;
  PlannerOptions opts;
  std::vector<Role> role;       // per node
  std::vector<int> group_of;    // per node
  std::vector<Group> groups;
  std::vector<bool> full_space; // per node, row groups: true for Full values
  std::vector<ValueKind> value_kind;
  std::vector<std::vector<std::pair<int, int>>> users;  // per value id
  std::vector<std::vector<int>> horizontal;             // sets of pointwise group ids
  std::vector<AttentionOperands> attention;             // per attention group (Group::attention)
  std::vector<std::vector<RotaryOperands>> rotary;      // per rotary group (Group::rotary): its parts
  std::vector<Decision> decisions;

  void decide(std::string what, std::string reason) { decisions.push_back({std::move(what), std::move(reason)}); }
  // -1 for externals.
  int producer_group(const ValueRef& r) const { return r.is_external() ? -1 : group_of[r.node]; }
  // Group-level DAG edges from current assignments; reaches(a, b): path a -> ... -> b.
  bool reaches(int from, int to) const;
  std::vector<int> topo_groups() const;  // alive groups in a dependency order
  std::string dump() const;
  std::string nodes_str(const std::vector<int>& nodes) const;  // "#2..#5" / "#1, #4"
  // Whether `v` is a value template group `gr` (is_template) writes; false for other groups.
  bool template_writes(const Group& gr, int v) const;
};

std::string_view role_name(Role r);
std::string_view group_kind_name(GroupKind k);
std::string_view value_kind_name(ValueKind k);
std::string_view epilogue_name(GemmEpilogue e);

// Row-shape forms of an iteration shape F: R + [1] and R.
Shape row_keep_shape(const Shape& f);
Shape row_flat_shape(const Shape& f);

}  // namespace livefuse::planner
