#pragma once
// Binding an AttentionStep: the kernels' 4-D strided operands (kernels/attention_args.hpp)
// from the bound tensors, with the shapes checked as bound (a plan serves every shape its
// kernels take; one it does not throws livefuse::Error and the window runs eagerly).
#include "kernels/attention_args.hpp"
#include "livefuse/tensor.hpp"

namespace livefuse::planner {

// mask: undefined when the softmax has none. out: the written value, dense (heads_inner: the
// [b, s, heads, dv] or [b, s, heads * dv] of the absorbed permute + copy, else [.., heads, s, dv]).
// groups > 1: grouped-query attention, each K/V head's query heads stacked as its rows
// (AttentionOperands::groups).
AttentionArgs attention_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             const Tensor& out, bool heads_inner, double scale, int64_t groups = 1);

// `a` (bound with k / v, the caches after the append, given storage) made to append: the old keys
// read from k_old / v_old, the step's from k_new / v_new (AttentionArgs::first_new), the old rows
// copied too unless they already are where the grown cache wants them (grown in place).
void bind_append(AttentionArgs& a, const Tensor& k, const Tensor& v, const Tensor& k_old, const Tensor& k_new,
                 const Tensor& v_old, const Tensor& v_new);

}  // namespace livefuse::planner
