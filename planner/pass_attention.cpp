// Pass "attention": eager attention as user code writes it,
//   scores = matmul(q, transpose(k, -1, -2)); probs = softmax(scores, scale, mask?);
//   ctx = matmul(probs, v)  [-> permute({0, 2, 1, 3}) -> contiguous, or -> reshape to [b, s, h*d]]
// and its grouped-query form (examples/decoder: each K/V head's G query heads stacked as rows,
// the scores reshaped to [.., G, t, sk] around the softmax so a [t, sk] mask broadcasts, the
// product reshaped to [b, heads, t, d] before the permute back), becomes one group of kind
// Attention: one step whose kernel never writes the scores or the probabilities (flash-style on
// CUDA, tiled online softmax on the CPU). The transpose is absorbed when nothing else reads it
// (the kernel reads k as it is), and so is the permute back to [b, s, heads, d] with the copy
// that follows it (a contiguous, or the reshape to [b, s, heads * d] that copies): the kernel
// writes that layout directly. Runs before pass_vertical, which leaves grouped nodes alone.
//
// A KV cache grown by concat -- `k = concat({cache_k, k_step}, 2)`, the same for v -- whose result
// nothing else in the segment reads (the program keeps it as the next step's cache) joins the
// step too (LIVEFUSE_ATTENTION_APPEND): the kernel reads the old keys from the old cache and the
// step's from its rows, and writes those rows into the grown cache itself (on CUDA as it reads
// them: one launch a layer fewer than the concat's copy; the old rows as well when the cache was
// not grown in place, runtime/append.hpp). Both caches or neither.
//
// Refused (a Decision says why) when the scores or the probabilities are observable or read
// by anything else -- they would have to exist in memory -- or when the shapes are outside the
// kernels' reach: ranks beyond 4, head dims beyond kAttentionMaxHeadDim, a V that broadcasts the
// product over more batches than the scores have.
#include <algorithm>

#include "kernels/attention_args.hpp"
#include "livefuse/error.hpp"
#include "planner/passes.hpp"

namespace livefuse::planner {
namespace {

// permute swapping the last two dims (transpose(x, -1, -2) and transpose(x, 2, 3) on rank 4).
bool swaps_last_two(const SegmentNode& n) {
  const int rank = n.attrs.ni;
  if (rank < 2) return false;
  for (int d = 0; d < rank - 2; ++d)
    if (n.attrs.i[d] != d) return false;
  return n.attrs.i[rank - 2] == rank - 1 && n.attrs.i[rank - 1] == rank - 2;
}

bool is_heads_to_inner(const SegmentNode& n) {
  return n.attrs.ni == 4 && n.attrs.i[0] == 0 && n.attrs.i[1] == 2 && n.attrs.i[2] == 1 &&
         n.attrs.i[3] == 3;
}

// Leading (batch) dims of a shape.
Shape batch_of(const Shape& s) {
  Shape b;
  for (int d = 0; d + 2 < s.rank; ++d) b.push_back(s.v[d]);
  return b;
}

// reshape([b, s, heads, dv] -> [b, s, heads * dv]): a copy of the permuted product (the
// permute made it non-contiguous), which the kernel writes as directly as a contiguous.
bool merges_heads(const FusionGraph& g, int j, const Shape& ctx) {
  if (g.seg.nodes[j].op != OpId::reshape || ctx.rank != 4) return false;
  const Shape& out = g.seg.shape(ValueRef::of(j));
  return out.rank == 3 && out.v[0] == ctx.v[0] && out.v[1] == ctx.v[2] &&
         out.v[2] == ctx.v[1] * ctx.v[3];
}

// The concat node whose result `val` is when it grows a [b, heads, keys, d] cache by rows along
// the keys (two inputs, dim 2), the program keeps that result, and nothing in the segment but
// `reader` (a node of the attention) reads it; else -1.
int cache_append(const FusionGraph& g, const ValueRef& val, int reader) {
  if (!is_node(g, val, OpId::concat)) return -1;
  const SegmentNode& c = g.seg.nodes[val.node];
  if (c.inputs.size() != 2 || g.seg.shape(val).rank != 4 || c.attrs.ni < 1) return -1;
  const int64_t dim = c.attrs.i[0] < 0 ? c.attrs.i[0] + 4 : c.attrs.i[0];
  if (dim != 2 || g.group_of[val.node] >= 0 || !g.seg.is_output(val)) return -1;
  const auto users = live_users(g, g.seg.value_id(val));
  return users.size() == 1 && users[0].first == reader ? val.node : -1;
}

struct Match {
  std::vector<int> nodes;
  AttentionOperands ops;
};

// Why softmax node `sm` does not start an attention group ("" when it does, *m filled).
// The matmul whose product the softmax normalises: its input directly, or through the reshape
// of grouped-query attention ([b, kv heads, G * t, sk] -> [b, kv heads, G, t, sk]); -1: none.
int scores_product(const FusionGraph& g, int sm, int* split) {
  const ValueRef x = g.seg.nodes[sm].inputs[0];
  *split = -1;
  if (is_node(g, x, OpId::matmul)) return x.node;
  if (!is_node(g, x, OpId::reshape) || !is_node(g, g.seg.nodes[x.node].inputs[0], OpId::matmul))
    return -1;
  *split = x.node;
  return g.seg.nodes[x.node].inputs[0].node;
}

// Grouped-query attention's view of the scores: [b, h, G * t, sk] as [b, h, G, t, sk]. G, or 0.
int64_t query_groups(const Shape& scores, const Shape& split) {
  if (scores.rank != 4 || split.rank != 5) return 0;
  const bool fits = split.v[0] == scores.v[0] && split.v[1] == scores.v[1] &&
                    split.v[2] * split.v[3] == scores.v[2] && split.v[4] == scores.v[3];
  return fits ? split.v[2] : 0;
}

// Why softmax node `sm` does not start an attention group ("" when it does, *m filled).
std::string match_at(const FusionGraph& g, int sm, Match* m) {
  const SegmentNode& s = g.seg.nodes[sm];
  int split = -1;
  const int m1 = scores_product(g, sm, &split);
  const SegmentNode& mm1 = g.seg.nodes[m1];
  if (!is_node(g, mm1.inputs[1], OpId::permute) || !swaps_last_two(g.seg.nodes[mm1.inputs[1].node]))
    return "the scores' right operand is not a transposed k (transpose(k, -1, -2))";
  const int t = mm1.inputs[1].node;
  const Shape& scores = g.seg.shape(ValueRef::of(m1));
  AttentionOperands& o = m->ops;
  if (split >= 0) {
    o.groups = query_groups(scores, g.seg.shape(ValueRef::of(split)));
    if (o.groups == 0)
      return "the scores are reshaped, but not as grouped-query rows [.., G, t, sk]";
  }
  if (only_user(g, m1) != (split >= 0 ? split : sm) || (split >= 0 && only_user(g, split) != sm))
    return "the scores are observable or read by another op";
  // Grouped-query: the probabilities go back to the product's rows through a reshape.
  int merge = -1;
  int m2 = only_user(g, sm);
  if (split >= 0 && m2 >= 0) {
    merge = m2;
    m2 = g.seg.nodes[merge].op == OpId::reshape && g.seg.shape(ValueRef::of(merge)) == scores
             ? only_user(g, merge)
             : -1;
  }
  if (m2 < 0) return "the probabilities are observable or read by another op";
  const ValueRef probs = ValueRef::of(merge >= 0 ? merge : sm);
  const SegmentNode& mm2 = g.seg.nodes[m2];
  if (mm2.op != OpId::matmul || !(mm2.inputs[0] == probs))
    return "the probabilities do not feed matmul(probs, v)";
  o.q = g.seg.value_id(mm1.inputs[0]);
  o.k = g.seg.value_id(g.seg.nodes[t].inputs[0]);
  o.v = g.seg.value_id(mm2.inputs[1]);
  o.mask = s.attrs.i[0] ? g.seg.value_id(s.inputs[1]) : -1;
  o.scale = s.attrs.f[0];
  const Shape &qs = g.seg.shape(mm1.inputs[0]), &vs = g.seg.shape(mm2.inputs[1]);
  const Shape& ctx = g.seg.shape(ValueRef::of(m2));
  const Shape& ks = g.seg.shape(g.seg.nodes[t].inputs[0]);
  if (scores.rank > 4 || qs.rank > 4 || ks.rank > 4 || vs.rank > 4) return "ranks above 4";
  const int64_t d = qs.v[qs.rank - 1], dv = vs.v[vs.rank - 1];
  if (d > kAttentionMaxHeadDim || dv > kAttentionMaxHeadDim)
    return detail::concat("head dims ", d, " and ", dv, " exceed the kernels' ",
                          kAttentionMaxHeadDim);
  if (!(batch_of(ctx) == batch_of(scores)))
    return "v broadcasts the product over more batches than the scores";
  if (g.opts.attention_fast_only &&
      !attention_fast_on_cuda(g.seg.dtype(mm1.inputs[0]), d, dv, qs.v[qs.rank - 2]))
    return detail::concat("LIVEFUSE_ATTENTION=auto on CUDA plans it only where a fast kernel "
                          "applies (f16/bf16/f32 with head dims 64 or 128, or up to ",
                          kAttentionDecodeMaxRows, " rows a K/V head); here ",
                          dtype_name(g.seg.dtype(mm1.inputs[0])), " d=", d, " with ",
                          qs.v[qs.rank - 2], " rows (LIVEFUSE_ATTENTION=1 forces it)");
  m->nodes = {m1, sm, m2};
  if (split >= 0) m->nodes.insert(m->nodes.end(), {split, merge});
  const bool t_alone = only_user(g, t) == m1;
  if (t_alone) m->nodes.push_back(t);
  if (g.opts.attention_append && t_alone) {
    const int ka = cache_append(g, g.seg.nodes[t].inputs[0], t), va = cache_append(g, mm2.inputs[1], m2);
    if (ka >= 0 && va >= 0 && ka != va) {
      o.k_append = ka, o.v_append = va;
      m->nodes.insert(m->nodes.end(), {ka, va});
    }
  }
  o.out = g.seg.value_id(ValueRef::of(m2));
  // The way back to [b, t, heads, dv]: grouped-query rows first become query heads
  // ([b, kv heads, G * t, dv] -> [b, kv heads * G, t, dv], a view).
  int heads = m2;
  Shape heads_shape = ctx;
  if (split >= 0) {
    const int r = only_user(g, m2);
    const bool unstack = r >= 0 && g.seg.nodes[r].op == OpId::reshape && ctx.rank == 4 && [&] {
      const Shape& u = g.seg.shape(ValueRef::of(r));
      return u.rank == 4 && u.v[0] == ctx.v[0] && u.v[1] == ctx.v[1] * o.groups &&
             u.v[2] * o.groups == ctx.v[2] && u.v[3] == ctx.v[3];
    }();
    heads = unstack ? r : -1;
    if (unstack) heads_shape = g.seg.shape(ValueRef::of(r));
  }
  const int p = heads >= 0 ? only_user(g, heads) : -1;
  if (p >= 0 && g.seg.nodes[p].op == OpId::permute && is_heads_to_inner(g.seg.nodes[p])) {
    const int c = only_user(g, p);
    if (c >= 0 && (g.seg.nodes[c].op == OpId::contiguous || merges_heads(g, c, heads_shape))) {
      if (heads != m2) m->nodes.push_back(heads);
      m->nodes.push_back(p);
      m->nodes.push_back(c);
      o.out = g.seg.value_id(ValueRef::of(c));
      o.heads_inner = true;
    }
  }
  std::sort(m->nodes.begin(), m->nodes.end());
  return "";
}

}  // namespace

void pass_attention(FusionGraph& g) {
  const int n = static_cast<int>(g.seg.nodes.size());
  if (static_cast<int>(g.group_of.size()) != n) {
    g.group_of.assign(n, -1);
    g.full_space.assign(n, true);
  }
  for (int sm = 0; sm < n; ++sm) {
    const SegmentNode& s = g.seg.nodes[sm];
    // Candidates: a softmax of a matmul's result (a Row node: fusion is on).
    int split = -1;
    if (s.op != OpId::softmax || g.role[sm] != Role::Row || scores_product(g, sm, &split) < 0)
      continue;
    const std::string at = "attention at softmax #" + std::to_string(sm);
    if (!g.opts.attention) {
      g.decide(at + " stays unfused", "the attention template is disabled");
      continue;
    }
    Match m;
    if (std::string why = match_at(g, sm, &m); !why.empty()) {
      g.decide(at + " stays unfused", why);
      continue;
    }
    const int gr = add_template_group(g, GroupKind::Attention, m.nodes, g.seg.shape(g.seg.value_ref(m.ops.out)));
    g.groups[gr].attention = static_cast<int>(g.attention.size());
    g.attention.push_back(m.ops);
    g.decide("fuse " + g.nodes_str(m.nodes) + " into one attention step",
             std::string("scores and probabilities stay in the kernel") +
                 (m.ops.mask >= 0 ? " (masked)" : "") +
                 (m.ops.groups > 1 ? detail::concat("; grouped-query, ", m.ops.groups,
                                                    " query heads per K/V head")
                                   : "") +
                 (m.ops.heads_inner
                      ? "; it writes the [b, s, heads, d] layout the permute + contiguous made"
                      : "") +
                 (m.ops.k_append >= 0 ? detail::concat("; it appends the step's keys and values to the caches "
                                                       "itself (concats #", m.ops.k_append, ", #", m.ops.v_append, ")")
                                      : ""));
  }
}

}  // namespace livefuse::planner
