#pragma once
// The CPU executor of fused kernels: a tiled interpreter of the same KernelSpec the CUDA
// renderer compiles. TBB runs tiles in parallel; each tile keeps every intermediate in a small
// buffer (kTile elements, a few KiB each), so a fused chain touches main memory once per input
// and output instead of once per op.
#include <span>

#include "kernels/jit/geometry.hpp"
#include "kernels/jit/kernel_spec.hpp"

namespace livefuse::jit {

// Runs `spec` with one binding per part. Synchronous.
void run_spec_cpu(const KernelSpec& spec, std::span<const PartBinding> parts);

namespace cpu_interp {
void run_pointwise_part(const KernelPart& part, const PartGeometry& g);
void run_row_part(const KernelPart& part, const PartGeometry& g);
}  // namespace cpu_interp

}  // namespace livefuse::jit
