#pragma once
// Cache-blocked GEMM for matmul and linear:
//   out[b, m, n] = sum_k A_b[m, k] * B_b[k, n] (+ bias[n]),  out dense [batch, M, N].
// A and B are read through strides (transposed or sliced views need no copy) in any floating
// dtype; they are packed into f32 panels block by block, and accumulation is f32.
#include <memory>

#include "kernels/cpu/cpu_common.hpp"

namespace livefuse::cpu {

struct GemmOperand {
  const std::byte* base = nullptr;
  DType dtype = DType::f32;
  int64_t rs = 0, cs = 0;  // element strides of rows and columns
  StridedIndex batch;      // batch index -> element offset (strides 0 where broadcast)
  // The storage `base` points into, when known: lets the packed form of a B operand be kept
  // across calls (gemm_pack_cache.hpp).
  std::shared_ptr<Storage> owner;
};

struct GemmProblem {
  int64_t M = 0, N = 0, K = 0, batch = 1;
  GemmOperand a, b;
  std::byte* out = nullptr;
  DType out_dtype = DType::f32;
  const std::byte* bias = nullptr;  // optional, [N] with bias_stride
  DType bias_dtype = DType::f32;
  int64_t bias_stride = 1;
  // A pointwise tail applied to each f32 result row in the tile loop, after the bias (a plan's
  // GEMM step, gemm_tail.hpp): act(row) over n values, then + residual (dense, the output's
  // layout). Both optional; s0, s1 are the op's scalar attributes (clamp's bounds).
  void (*act)(float* row, int64_t n, float s0, float s1) = nullptr;
  float act_s0 = 0, act_s1 = 0;
  const std::byte* residual = nullptr;
  DType residual_dtype = DType::f32;
  // Columns to separate dense outputs instead of `out` (a merged sibling GEMM, Q/K/V over one
  // input): columns [begin[i], begin[i + 1]) of output row r go to out[i] at row r of width
  // begin[i + 1] - begin[i]. The tile loop stores each sibling's part where eager would, so the
  // merged GEMM needs no copy after it. parts == 0: the dense `out` above. No tail with it.
  struct Split {
    static constexpr int kMaxParts = 8;
    int parts = 0;
    std::byte* out[kMaxParts] = {};
    int64_t begin[kMaxParts + 1] = {};
  } split;
};

void gemm(const GemmProblem& p);

// How gemm() cuts its output: tiles of mc x nc, mt x nt of them (gemm.cpp says how). `work` in
// multiply-adds, `workers` the threads that may run tiles. Here for its tests.
struct GemmTiling {
  int64_t mc = 0, nc = 0, mt = 1, nt = 1;
};
GemmTiling gemm_tiling(int64_t M, int64_t N, int64_t batch, int64_t work, int workers);

// matmul / linear calls as problems writing the dense `out` (matmul.cpp).
GemmProblem matmul_problem(const OpCall& call, const Tensor& out);
GemmProblem linear_problem(const OpCall& call, const Tensor& out);

// Name of the micro-kernel in use ("avx512", "avx2", "generic"), for benchmarks and logs.
const char* gemm_kernel_name();
// Makes this thread's GEMM scratch now (see livefuse::cpu::prepare_thread).
void gemm_prepare_thread();

}  // namespace livefuse::cpu
