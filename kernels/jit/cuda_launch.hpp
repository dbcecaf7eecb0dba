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

// Register rows with both bodies rendered: the body a launch shape starts from (and keeps when
// it is never timed, e.g. only ever captured into graphs) until its first launches have measured
// both (row_tuner.hpp). From the blocks each keeps resident per SM at the launch shape
// (cuOccupancyMaxActiveBlocksPerMultiprocessor), the warps of a row, and whether the kernel
// reads global memory after its first loop (`late_loads`, which the pipelined body does not
// prefetch). Why (H200, us, plain vs pipelined, blocks; registers before values shared arrays,
// row_schedule.hpp):
//   one-warp rows have no barriers, and more resident warps hide latency on their own:
//     masked softmax f16, 512 cols: 73 vs 110 (8 vs 4 blocks)             -> plain if it has more
//   rows of 16+ warps stall on every barrier together: softmax f32, 8192 cols: 167 vs 147
//                                                                        -> pipelined
//   otherwise the pipelined body wins unless late reads need the plain body's occupancy:
//     softmax f32 1024 160 vs 150, softmax f16 1024 81 vs 76 (no late reads; 2x blocks)
//     layer_norm f32 1024 / 4096: 134 vs 143 / 134 vs 144 (late reads, 4 vs 2 blocks)
//     layer_norm bf16 105 vs 83 (5 vs 4), rms_norm bf16 82 vs 73 (6 vs 5)  -> pipelined unless
//     the plain body keeps a third more blocks
bool prefer_pipelined_rows(int plain_blocks, int pipelined_blocks, int warps_per_row, bool late_loads);
// Whether one wave of the pipelined body holds every row of a launch shape at most once a
// thread-row: `rows` is the shape's first launch, and a shape (row_shape_key) holds rows up to
// twice that. Then no thread-row has a next row to read while it finishes one -- the pipelined
// body is the plain one with staging on top -- so the shape runs the plain body, untimed. (BERT
// at batch 1, 128 rows: with the norms' late loads issued early the two bodies timed within
// noise at their first launches, and processes that kept the pipelined add + layer_norm ran
// 0.513-0.516 ms a forward against 0.481-0.483 with the plain one, H100, session 42.)
bool rows_in_one_pass(int64_t rows, int sms, int pipelined_blocks_per_sm, unsigned rows_per_block);

// Which variant a launch would use, and its launch shape (for tests and logs).
struct LaunchChoice {
  Variant variant = Variant::StridedI32;
  unsigned grid = 0, block_x = 0, block_y = 1, smem = 0;
  std::optional<Variant> missing;  // set when the best valid variant was not rendered
};
LaunchChoice choose_launch(const KernelSpec& spec, const CompiledKernel& k, std::span<const PartGeometry> geos,
                           int smem_optin, std::string* error);

}  // namespace livefuse::jit
