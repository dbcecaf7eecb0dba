#pragma once
// The operands of one fused attention, out = softmax(q kᵀ * scale + mask) v, as both kernels
// (kernels/cpu/attention.cpp, kernels/cuda/attention.cu) take them. Plain data only: nvcc
// compiles the CUDA kernel against this header without the runtime's headers.
//
// Every operand is seen as 4-D [batch, head, row, col] through element strides, so views (the
// permuted heads of a projection, a slice of a KV cache, an expanded K/V head) and broadcast
// operands (stride 0: a mask of shape [b, 1, 1, sk]) are read in place, and the output may be
// written in any layout (the [b, s, heads, d] of the permute + contiguous it replaces).
#include <cstdint>

#include "livefuse/dtype.hpp"

namespace livefuse {

struct AttentionArgs {
  const void* q = nullptr;     // [batch, heads, sq, d]
  const void* k = nullptr;     // [batch, heads, sk, d] (not transposed)
  const void* v = nullptr;     // [batch, heads, sk, dv]
  const void* mask = nullptr;  // additive, [batch, heads, sq, sk] as broadcast; null: none
  void* out = nullptr;         // [batch, heads, sq, dv]
  DType dtype = DType::f32;    // of every operand
  int64_t batch = 0, heads = 0, sq = 0, sk = 0, d = 0, dv = 0;
  // Element strides along [batch, head, row, col].
  int64_t q_st[4] = {}, k_st[4] = {}, v_st[4] = {}, mask_st[4] = {}, out_st[4] = {};
  // Grouped-query attention stacks a K/V head's query heads as its rows: row r of the mask and
  // of the result is (group r / rows_t, row r % rows_t), the group stepping by *_st_g there
  // (row_offset()). Without groups rows_t = sq and the group strides are 0.
  int64_t rows_t = 0;
  int64_t mask_st_g = 0, out_st_g = 0;
  float scale = 1.0f;
  // A KV cache's append, done by the attention itself (planner/pass_attention.cpp, "appends"):
  // keys [0, first_new) are read from k / v as above, keys [first_new, sk) from k_new / v_new
  // ([batch, heads, sk - first_new, d or dv]), and every key lands in k_dst / v_dst (the caches
  // after the append, [batch, heads, sk, d or dv]) -- the new rows always, the old ones only when
  // copy_old_k / _v (that cache was not grown in place: its block is not the old one's).
  // first_new < 0: no append, k and v hold every key.
  int64_t first_new = -1;
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  void* k_dst = nullptr;
  void* v_dst = nullptr;
  int64_t k_new_st[4] = {}, v_new_st[4] = {}, k_dst_st[4] = {}, v_dst_st[4] = {};
  bool copy_old_k = false, copy_old_v = false;
  // The keys read from k / v (all of them, or those before first_new) are written by no kernel
  // that may still run when this one starts: the FMA and streaming decode kernels launched with
  // PDL load their first of them before their wait (planner/early_reads.cpp, "a plan's reads
  // before its PDL wait"); the others ignore it.
  bool early_kv = false;
};

// The same attention once the append has landed: K and V read from the caches after it.
inline AttentionArgs after_append(const AttentionArgs& a) {
  AttentionArgs b = a;
  if (a.first_new < 0) return b;
  b.k = a.k_dst, b.v = a.v_dst;
  for (int i = 0; i < 4; ++i) b.k_st[i] = a.k_dst_st[i], b.v_st[i] = a.v_dst_st[i];
  b.first_new = -1;
  b.k_new = b.v_new = nullptr;
  b.k_dst = b.v_dst = nullptr;
  b.copy_old_k = b.copy_old_v = false;
  b.early_kv = false;  // the caches after the append: written by the launch before
  return b;
}

#if defined(__CUDACC__)
__host__ __device__
#endif
    inline int64_t
    row_offset(int64_t r, int64_t rows_t, int64_t st_row, int64_t st_g) {
  return (r / rows_t) * st_g + (r % rows_t) * st_row;
}

#if defined(__CUDACC__)
// row_offset for kernels whose rows and rows_t are below 2^31 (their launches check): in 32-bit
// division, where a 64-bit one is a long subroutine on the GPU.
__device__ __forceinline__ int64_t row_offset32(int64_t r, int64_t rows_t, int64_t st_row,
                                                int64_t st_g) {
  const uint32_t ru = static_cast<uint32_t>(r), rt = static_cast<uint32_t>(rows_t);
  return static_cast<int64_t>(ru / rt) * st_g + static_cast<int64_t>(ru % rt) * st_row;
}
#endif

// The CUDA kernel's limit on d and dv (a query row and its accumulator live in registers).
inline constexpr int64_t kAttentionMaxHeadDim = 128;
// The most rows (query rows times the query heads of one K/V head) the CUDA decode kernel takes.
inline constexpr int64_t kAttentionDecodeMaxRows = 16;

// Whether a fast CUDA kernel takes attention of this dtype, head dims and rows per K/V head,
// whatever the operands' strides turn out to be: the split-KV decode kernel (kernels/cuda/
// attention_decode.cu, few rows), the tensor-core one (attention_mma.cu: f16/bf16, d = dv in
// {64, 128}) or the f32 FMA one (attention_f32.cu: f32, d = dv in {64, 128}); those two check
// unit strides and alignment at launch, the general kernel runs otherwise.
// On the H200 (bench/attention_kernel.cpp) the tensor-core kernel took 12.5 us where the general
// FMA kernel took 70.5 (BERT-base f16, batch 1, seq 128); the general kernel alone loses to the
// unfused GEMMs + softmax.
inline bool attention_fast_on_cuda(DType t, int64_t d, int64_t dv, int64_t rows) {
  if (rows <= kAttentionDecodeMaxRows && d <= kAttentionMaxHeadDim && dv <= kAttentionMaxHeadDim)
    return true;
  return (t == DType::f16 || t == DType::bf16 || t == DType::f32) && d == dv && (d == 64 || d == 128);
}

namespace cpu {
// With an append (first_new >= 0) the rows land in k_dst / v_dst first, then the attention reads
// them there.
void run_attention(const AttentionArgs& a);
}
namespace cuda {
// Enqueues the kernel on `stream` (a cudaStream_t); never synchronises.
void launch_attention(const AttentionArgs& a, void* stream);
}  // namespace cuda

}  // namespace livefuse
