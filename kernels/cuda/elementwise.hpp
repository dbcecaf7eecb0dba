#pragma once
// Eager elementwise ops: the plan a host .cpp builds from an OpCall, and the per-group
// launchers compiled by nvcc (one translation unit per group of op-table rows, so ninja can
// compile them in parallel and no file grows an instantiation explosion).
#include <cuda_runtime_api.h>

#include "kernels/cuda/strided.hpp"
#include "livefuse/detail/op_table.hpp"
#include "livefuse/dtype.hpp"

namespace livefuse::cuda {

enum class Compute : uint8_t { f32, i32, i64 };

// How an input reaches the kernel.
enum class EwKind : uint8_t {
  dense,      // read through its strides (16-byte vectors on the vector paths)
  broadcast,  // vector paths: one element per vector, splat (a stride-0 innermost dim)
  immediate,  // the scalar operand of add(x, 2.0): EwPlan::imm
};

// Which kernel runs the plan.
enum class EwPath : uint8_t {
  vec,          // rank <= 1 after coalescing: 16-byte vectors over a flat range, 64-bit index
  vec_strided,  // innermost dim contiguous (or broadcast) for every operand: 16-byte vectors
                // along it, 32-bit offsets for the outer dims (bias adds, masks, row views)
  strided,      // anything else: element by element, 32- or 64-bit offsets
};

struct EwPlan {
  OpId op = OpId::kCount;
  int arity = 0;  // operands a, b, c the expression uses
  void* out = nullptr;
  DType out_dtype = DType::f32;
  int64_t numel = 0;
  const void* in[3] = {};
  DType in_dtype[3] = {};
  EwKind kind[3] = {};
  double imm[3] = {};
  double s0 = 0, s1 = 0;
  Compute compute = Compute::f32;
  // layout: operand 0 = output (dense), operands 1..arity = inputs (immediates get stride 0).
  StridedLayout layout;
  EwPath path = EwPath::strided;
  bool idx32 = true;  // 32-bit index math (strided path)
};

// Build the plan (host), then hand it to the group that owns its op.
// Returns false if `op` is not in that group.
bool launch_ew_float_unary(const EwPlan& p, cudaStream_t s);  // arity 1, float only; where
bool launch_ew_int_unary(const EwPlan& p, cudaStream_t s);    // arity 1, also integers
bool launch_ew_binary(const EwPlan& p, cudaStream_t s);       // arity 2
void launch_elementwise(const EwPlan& p, cudaStream_t s);

// The kernel lf::add runs for a contiguous f32 add, with the geometry the eager path picks,
// packed for cudaLaunchKernel: benchmarks launch it bare to measure what the eager path adds.
struct BareLaunch {
  const void* fn = nullptr;
  dim3 grid, block;
  alignas(16) unsigned char args[256] = {};
  void* argv[1] = {};
};
void make_bare_add_f32(BareLaunch& bl, const float* a, const float* b, float* out, int64_t n);

}  // namespace livefuse::cuda
