#pragma once
// The named pass list: a Segment's FusionGraph goes through these in order. Each pass lives in
// its own file (pass_<name>.cpp) and leaves the graph printable; run_passes() hands the dump
// after every pass to PlannerOptions::dump (LIVEFUSE_LOG=debug prints it).
#include <string_view>
#include <vector>

#include "planner/fusion_graph.hpp"

namespace livefuse::planner {

struct Pass {
  std::string_view name;
  std::string_view what;
  void (*run)(FusionGraph&);
};

void pass_classify(FusionGraph& g);       // node roles; dead values dropped
void pass_attention(FusionGraph& g);      // q kᵀ -> softmax -> · v as one template step
void pass_rotary(FusionGraph& g);         // x * cos + rotate_half(x) * sin as one template step
void pass_vertical(FusionGraph& g);       // producer/consumer groups: pointwise and row kernels
void pass_gemm_siblings(FusionGraph& g);  // linears over one input become one GEMM (Q/K/V)
void pass_gemm_epilogue(FusionGraph& g);  // a GEMM takes the pointwise group after it
void pass_horizontal(FusionGraph& g);     // independent pointwise groups share one launch
void pass_materialize(FusionGraph& g);    // which values get memory
void pass_cost(FusionGraph& g);           // cost model: groups that do not pay are split

const std::vector<Pass>& pass_list();
void run_passes(FusionGraph& g);
FusionGraph make_fusion_graph(const Segment& seg, const PlannerOptions& opts);

// Shared checks (pass_vertical, pass_cost): is `group` a valid fused group, and with which
// node spaces. Returns "" when valid, else why not; fills g.full_space for its nodes.
std::string check_group(FusionGraph& g, int group);
// Group-level cycle check over units (horizontal sets and gemm tails count as one).
bool has_cycle(const FusionGraph& g);
// Live users (node, input index) of value `v` (dead nodes are never computed).
std::vector<std::pair<int, int>> live_users(const FusionGraph& g, int v);
// The single live user of node j's result, when it is not observable; -1 otherwise.
int only_user(const FusionGraph& g, int j);
// Whether `r` is the result of an `op` node.
bool is_node(const FusionGraph& g, const ValueRef& r, OpId op);
// A new group of a template step (attention, rotary) over `nodes`; returns its id.
int add_template_group(FusionGraph& g, GroupKind kind, const std::vector<int>& nodes, const Shape& shape);
// Merges group `from` into `into` (nodes, assignments).
void merge_groups(FusionGraph& g, int into, int from);
// Merged sibling linears (pass_gemm_siblings) whose weights all have one N: on CUDA one
// strided-batched GEMM writes each sibling's output where it lives (plan_siblings.cpp), with
// no product to split afterwards.
bool siblings_one_width(const Segment& seg, const std::vector<int>& nodes);
// Values read from outside / written by a group.
std::vector<int> group_inputs(const FusionGraph& g, const Group& gr);
std::vector<int> group_outputs(const FusionGraph& g, const Group& gr);

}  // namespace livefuse::planner
