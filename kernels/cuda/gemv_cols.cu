// Few-row products over a row-major B (gemv.hpp, GemvColsArgs): out[m, :] = x[m, :] B, the
// columns of B contiguous. A decode step's eager p·v is one: a row of probabilities per head
// against the V cache, [L, d] row-major. (q·kᵀ is the GEMV proper: K's rows are contiguous
// along the sum.) Before a decode step is served by a plan these ran as cuBLASLt GEMMs of a new
// shape at every cache length, whose first heuristic for such a shape stalled the program's
// thread 15-25 ms (H200).
//
// One block a product: thread t takes 16-byte chunk t % C of the n columns (C chunks a row)
// and keys t / C, t / C + T / C, ... (T threads), kUnroll rows of B in flight; the T / C partial
// sums of each column are then added in shared memory, in a fixed order.
#include <cstdint>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/pdl.hpp"

namespace livefuse::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

template <class S, int kRows>
__global__ void __launch_bounds__(kThreads) gemv_cols_kernel(const GemvColsArgs a) {
  using Bits = typename S::Bits;
  constexpr int kPer = 16 / sizeof(Bits);
  __shared__ float red[kThreads][kRows * kPer + 1];  // +1: no bank conflicts down a column
  pdl_wait();
  const int64_t bi = blockIdx.y, es = sizeof(Bits);
  const char* x = static_cast<const char*>(a.x) + bi * a.x_bstride * es;
  const char* b = static_cast<const char*>(a.b) + bi * a.b_bstride * es;
  Bits* out = static_cast<Bits*>(a.out) + bi * a.o_bstride;
  const int chunks = static_cast<int>(a.n / kPer), lanes = kThreads / chunks;
  const int t = threadIdx.x, cc = t % chunks, kl = t / chunks;
  float acc[kRows][kPer] = {};
  if (kl < lanes) {
    for (int64_t k0 = kl; k0 < a.k; k0 += int64_t{lanes} * kUnroll) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t k = k0 + int64_t{u} * lanes;
        if (k < a.k) v[u] = __ldg(reinterpret_cast<const uint4*>(b + (k * a.ldb) * es) + cc);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t k = k0 + int64_t{u} * lanes;
        if (k >= a.k) break;
        Bits e[kPer];
        __builtin_memcpy(e, &v[u], sizeof(e));
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
          if (m >= a.rows) break;
          const float xm = S::to(reinterpret_cast<const Bits*>(x)[m * a.ldx + k]);
#pragma unroll
          for (int j = 0; j < kPer; ++j) acc[m][j] = fmaf(xm, S::to(e[j]), acc[m][j]);
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kRows; ++m)
#pragma unroll
    for (int j = 0; j < kPer; ++j) red[t][m * kPer + j] = acc[m][j];
  __syncthreads();
  // Thread i < n * rows writes out[m, col]: the key shares of its column, in order.
  for (int i = t; i < kRows * a.n; i += kThreads) {
    const int m = static_cast<int>(i / a.n), col = static_cast<int>(i % a.n);
    if (m >= a.rows) break;
    const int c = col / kPer, j = col % kPer;
    float sum = 0.0f;
    for (int l = 0; l < lanes; ++l) sum += red[l * chunks + c][m * kPer + j];
    out[m * a.ldo + col] = S::from(sum);
  }
}

}  // namespace

bool gemv_cols_supported(const GemvColsArgs& a) {
  if (a.dtype != DType::f32 && a.dtype != DType::f16 && a.dtype != DType::bf16) return false;
  const int64_t es = static_cast<int64_t>(dtype_size(a.dtype)), per = 16 / es;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (a.rows < 1 || a.rows > kGemvColsMaxRows || a.k < 1 || a.n < per || a.n % per != 0) return false;
  if (a.n / per > kGemvColsMaxChunks || a.batch < 1 || a.batch > 65535) return false;
  return aligned(a.b) && a.ldb % per == 0 && a.b_bstride % per == 0 && a.ldo >= a.n;
}

void launch_gemv_cols(const GemvColsArgs& a, cudaStream_t s) {
  with_float_storage(a.dtype, [&](auto storage) {
    using S = decltype(storage);
    const dim3 grid(1, static_cast<unsigned>(a.batch));
    if (a.rows == 1) launch_pdl("gemv_cols_kernel", gemv_cols_kernel<S, 1>, grid, kThreads, 0, s, a);
    else launch_pdl("gemv_cols_kernel", gemv_cols_kernel<S, 2>, grid, kThreads, 0, s, a);
  });
}

}  // namespace livefuse::cuda
