// Pass "gemm_siblings": linears that read the same input -- Q, K and V of attention, gate and up
// of a gated MLP -- become one GEMM over their weights concatenated along N ([N1 + N2 + ..., K])
// and their biases likewise: the input is read once and one GEMM launch replaces several.
// The plan owns the concatenated copies and refreshes them when a source may have changed
// (merged_weights.hpp), so only weights and biases the plan is given (externals) qualify: a
// weight computed inside the segment would have to be concatenated on every run. Each sibling's
// output stays the dense tensor eager gives (plan_siblings.cpp). Runs before gemm_epilogue:
// a merged GEMM takes no tail (its consumers run as their own kernels).
#include <algorithm>
#include <map>

#include "planner/passes.hpp"
#include "planner/strategy.hpp"

namespace livefuse::planner {
namespace {

constexpr size_t kMaxSiblings = 8;  // the split's part limit (GemmProblem::Split, split_columns)

const SegmentNode& linear_of(const FusionGraph& g, int group) {
  return g.seg.nodes[g.groups[group].nodes[0]];
}
bool has_bias(const SegmentNode& n) { return n.attrs.i[0] != 0; }

// Why linear `group` cannot take part at all ("" when it can).
std::string why_not_alone(const FusionGraph& g, int group) {
  const SegmentNode& n = linear_of(g, group);
  if (!n.inputs[1].is_external())
    return "its weight is computed inside the segment (the plan keeps copies only of weights it is "
           "given)";
  if (has_bias(n) && !n.inputs[2].is_external()) return "its bias is computed inside the segment";
  if (g.seg.shape(n.inputs[1]).rank != 2) return "its weight is not a matrix";
  return "";
}

// Why `other` cannot join the GEMM of `leader` ("" when it can).
std::string why_not_with(const FusionGraph& g, int leader, int other) {
  const SegmentNode& a = linear_of(g, leader);
  const SegmentNode& b = linear_of(g, other);
  std::string lead = "#";
  lead += std::to_string(g.groups[leader].nodes[0]);
  const DType wa = g.seg.dtype(a.inputs[1]), wb = g.seg.dtype(b.inputs[1]);
  if (wa != wb)
    return "its weight is " + std::string(dtype_name(wb)) + ", " + lead + "'s " +
           std::string(dtype_name(wa));
  if (g.seg.shape(a.inputs[1]).v[1] != g.seg.shape(b.inputs[1]).v[1])
    return "its K differs from " + lead + "'s";
  if (has_bias(a) != has_bias(b))
    return has_bias(b) ? "it has a bias and " + lead + " none" : lead + " has a bias and it none";
  if (has_bias(a) && g.seg.dtype(a.inputs[2]) != g.seg.dtype(b.inputs[2]))
    return "its bias dtype differs from " + lead + "'s";
  if (a.attrs.i[1] != b.attrs.i[1]) return "its TF32 setting differs from " + lead + "'s";
  return "";
}

// CUDA: siblings of different widths are one GEMM into a product that one more kernel splits
// into their outputs, writing and reading every output once more; the input is read once
// instead of n times and n GEMM launches become two. Whether that pays depends on the sizes:
// the cost model decides ("" when it pays). Everywhere else each output is written in place,
// and merging always pays: the CPU GEMM stores the columns in place, the CUDA GEMV (few rows:
// kernels/cuda/gemv.hpp) writes each sibling's output itself, and siblings of one width run as
// one strided-batched GEMM (siblings_one_width).
std::string why_not_paying(const FusionGraph& g, const Group& merged) {
  if (!g.opts.cuda) return "";
  const Segment& seg = g.seg;
  if (g.opts.gemv_prologue && gemv_rows(seg.shape(ValueRef::of(merged.nodes[0])))) return "";
  if (siblings_one_width(seg, merged.nodes)) return "";
  const double x = value_bytes(seg, seg.value_id(seg.nodes[merged.nodes[0]].inputs[0]));
  double apart = 0, outs = 0;
  for (int j : merged.nodes) {
    apart += eager_node_bytes(seg, j);
    outs += value_bytes(seg, seg.value_id(ValueRef::of(j)));
  }
  const int n = static_cast<int>(merged.nodes.size());
  const double together = apart - (n - 1) * x + 2 * outs;
  const double t_apart = g.opts.cost.time_us(apart, n),
               t_together = g.opts.cost.time_us(together, 2);
  if (t_together < t_apart) return "";
  return "on CUDA the split after a merged GEMM costs more than it saves (" +
         std::to_string(t_together) + " us vs " + std::to_string(t_apart) + " us apart)";
}

}  // namespace

bool siblings_one_width(const Segment& seg, const std::vector<int>& nodes) {
  if (nodes.size() < 2) return false;
  const int64_t n = seg.shape(seg.nodes[nodes[0]].inputs[1]).v[0];
  for (int j : nodes)
    if (seg.shape(seg.nodes[j].inputs[1]).v[0] != n) return false;
  return true;
}

void pass_gemm_siblings(FusionGraph& g) {
  if (!g.opts.fusion || !g.opts.gemm_siblings) return;
  // Linears by the value they read, in node order.
  std::map<int, std::vector<int>> by_input;
  for (const Group& gr : g.groups) {
    if (!gr.alive || gr.kind != GroupKind::Gemm || gr.nodes.size() != 1) continue;
    if (g.seg.nodes[gr.nodes[0]].op != OpId::linear) continue;
    by_input[g.seg.value_id(g.seg.nodes[gr.nodes[0]].inputs[0])].push_back(gr.id);
  }
  for (auto& [x, ids] : by_input) {
    if (ids.size() < 2) continue;
    std::sort(ids.begin(), ids.end(),
              [&](int a, int b) { return g.groups[a].nodes[0] < g.groups[b].nodes[0]; });
    std::vector<int> eligible;
    for (int id : ids) {
      const std::string why = why_not_alone(g, id);
      if (why.empty())
        eligible.push_back(id);
      else
        g.decide("linear #" + std::to_string(g.groups[id].nodes[0]) + " stays its own GEMM", why);
    }
    // Greedy: the first eligible linear leads; the others join where they match it.
    while (eligible.size() >= 2) {
      const int leader = eligible[0];
      std::vector<int> joined{leader}, rest;
      for (size_t i = 1; i < eligible.size(); ++i) {
        const int id = eligible[i];
        std::string why = why_not_with(g, leader, id);
        if (why.empty() && joined.size() >= kMaxSiblings)
          why = "the merged GEMM already has " + std::to_string(kMaxSiblings) + " siblings";
        if (why.empty()) {
          FusionGraph trial = g;
          merge_groups(trial, leader, id);
          if (has_cycle(trial)) why = "merging it would create a cycle between kernels";
        }
        if (why.empty()) {
          merge_groups(g, leader, id);
          joined.push_back(id);
        } else {
          g.decide("linear #" + std::to_string(g.groups[id].nodes[0]) +
                       " stays out of the GEMM of #" + std::to_string(g.groups[leader].nodes[0]),
                   why);
          rest.push_back(id);
        }
      }
      if (joined.size() >= 2) {
        if (const std::string why = why_not_paying(g, g.groups[leader]); !why.empty()) {
          // Undo: every sibling back in a group of its own.
          const std::vector<int> nodes = g.groups[leader].nodes;
          g.groups[leader].nodes = {nodes[0]};
          for (size_t i = 1; i < joined.size(); ++i) {
            Group& o = g.groups[joined[i]];
            o.alive = true;
            o.nodes = {nodes[i]};
            g.group_of[nodes[i]] = o.id;
          }
          g.decide("linear " + g.nodes_str(nodes) + " stay separate GEMMs", why);
          eligible = std::move(rest);
          continue;
        }
        const Group& m = g.groups[leader];
        int64_t n = 0;
        for (int j : m.nodes) n += g.seg.shape(g.seg.nodes[j].inputs[1]).v[0];
        const int64_t k = g.seg.shape(g.seg.nodes[m.nodes[0]].inputs[1]).v[1];
        g.decide("linear " + g.nodes_str(m.nodes) + " as one GEMM over concatenated weights [" +
                     std::to_string(n) + ", " + std::to_string(k) + "]",
                 "siblings over one input: it is read once and one GEMM replaces " +
                     std::to_string(m.nodes.size()) +
                     " (the plan keeps the concatenated copy, refreshed when a source may have "
                     "changed)");
      }
      eligible = std::move(rest);
    }
  }
}

}  // namespace livefuse::planner
