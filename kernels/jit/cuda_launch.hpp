#pragma once
// Launching a compiled KernelSpec on a CUDA stream: binds tensors (geometry.hpp), picks the
// variant (vec when every operand is dense and aligned, 64-bit indexing only when needed, the
// shared-memory row cache when it fits) and fills the parameter block.
#include <optional>
#include <span>
#include <string>

#include "kernels/jit/geometry.hpp"
#include "kernels/jit/kernel_cache.hpp"

namespace livefuse::jit {

// Returns "" on success, else the reason (nothing was launched). When the launch needs a variant
// the kernel was not rendered with, *missing names it: compile a sibling spec with that bit
// added to KernelSpec::variants and launch that.
std::string launch_spec_cuda(const KernelSpec& spec, CompiledKernel& k, std::span<const PartBinding> parts,
                             void* stream, std::optional<Variant>* missing = nullptr);

// Register rows with both bodies rendered: the pipelined one (VecPipe) unless the plain one
// keeps more than a third more blocks resident per SM for the same launch shape -- a row of 16
// warps or more takes the pipelined one regardless (its barriers stall all of them, which only
// the next row's reads in flight cover). Fits every case measured on the H200 (render_row.cpp);
// blocks from cuOccupancyMaxActiveBlocksPerMultiprocessor.
bool prefer_pipelined_rows(int plain_blocks, int pipelined_blocks, int warps_per_row);

// Which variant a launch would use, and its launch shape (for tests and logs).
struct LaunchChoice {
  Variant variant = Variant::StridedI32;
  unsigned grid = 0, block_x = 0, block_y = 1, smem = 0;
  std::optional<Variant> missing;  // set when the best valid variant was not rendered
};
LaunchChoice choose_launch(const KernelSpec& spec, const CompiledKernel& k, std::span<const PartGeometry> geos,
                           int smem_optin, std::string* error);

}  // namespace livefuse::jit
