#pragma once
// Lowering a fused group's nodes into one KernelSpec part. Elementwise nodes become their table
// row (or custom op); row nodes become primitive reductions and table ops, written the way the
// eager CPU kernels compute them (kernels/cpu/norm.cpp), e.g.
//   softmax(x, scale, mask) = e * (1 / sum(e)),  e = exp(z - max(z)),  z = x * scale + mask
//   layer_norm = (x - mean) * rsqrt(var + eps) * w + b,  var = mean((x - mean)^2)
#include "kernels/jit/kernel_spec.hpp"
#include "planner/fusion_graph.hpp"
#include "planner/plan.hpp"

namespace livefuse::planner {

jit::KernelPart lower_group(const FusionGraph& g, const Group& gr, PartIo* io);

}  // namespace livefuse::planner
