// Fused attention on tensor cores for f16/bf16, flash-attention-2 style: out = softmax(q kᵀ *
// scale + mask) v, the scores and probabilities living only in registers.
//
// Work split: a block of 4 warps takes one (batch, head, tile of kBr = 64 query rows) and walks
// the keys in tiles of kBc = 64. Each warp owns 16 query rows -- the M of one
// mma.m16n8k16 -- so the softmax of a row never leaves its warp: a row's scores sit in the 4
// lanes of one quad (the mma accumulator layout), and its max and sum take two shuffles.
//
// Shared memory (static; at d = 128 48 KiB, the most without an opt-in): the Q tile, one K tile
// and one V tile, all [rows][d] in the operand dtype, filled by cp.async. A 16-byte chunk c of row
// r is stored at chunk c ^ (r % 8): ldmatrix reads 8 rows of one chunk column at once, and the XOR
// spreads them over all 32 banks (rows are 128 or 256 bytes, so unswizzled they would share banks).
// K and V are single-buffered but loaded apart: V_j lands while S = Q K_jᵀ and its softmax run,
// K_{j+1} while P V_j runs (FlashAttention-2's schedule).
//
// Registers per thread: the tile's scores (kBc / 2 floats), the output accumulator (d / 2
// floats), and the running max and sum of its 2 rows. Q is read from smem again for every key
// tile (d / 16 ldmatrix against the K tile's d / 2): held in registers it would cost d / 4
// more, and at d = 128 that is past the 255 a thread can have.
//
// Numerics: scores accumulate in f32 (mma .f32), scale then mask as eager does, the online
// softmax runs in f32 in base 2 (ex2 of (z - m) log2 e), and P is rounded to the operand dtype
// for the P V mma (as FlashAttention does; within the dtype's tolerance). Semantics are those
// of the CPU kernel (kernels/cpu/attention.cpp), whose key tiles are also 64 wide:
//   * a row whose scores are all -inf so far accumulates nothing: its probabilities come out
//     exp2(-inf) = 0 (the max subtracted is taken as 0, not -inf, which would give NaN), and
//     what that tile added (0 * a NaN in V is NaN) is dropped when a finite max first appears,
//     as the CPU kernel skips such a tile;
//   * a row that ends all -inf, or whose max is NaN (max.NaN keeps a NaN) or +inf, is NaN;
//   * no key is skipped because its probability is 0.
// Keys past sk (the last tile's padding) are zero-filled in smem and scored -inf.
#include <cstdint>

#include "kernels/cuda/attention_kernels.hpp"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/dtype_io.cuh"

namespace livefuse::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBr = 16 * kWarps;  // query rows per block: one mma M of 16 per warp

// How the mask is read, straight from global memory (L1 keeps a tile's values for the block's
// rows). keys: one row of sk values for every query row of a head (BERT's [b, 1, 1, sk]), so
// a lane loads its 16 keys of a tile once for both its rows; rows: any other layout.
enum class MaskKind : int { none, keys, rows };

// The device code needs sm_80 (cp.async, ldmatrix, bf16 mma); for older targets (gpu_archs)
// the kernel is a trap that attention_mma_fits keeps every launch away from.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
constexpr int kBc = 64;  // keys per tile: the CPU kernel's key tile
constexpr float kNegInf = -__builtin_huge_valf();

// ---- PTX ----------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; `valid` false zero-fills the destination.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most `Pending` committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a b for one m16n8k16 tile, f32 accumulators.
template <class S>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (S::kDType == DType::f16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded (to nearest even) into one register of the operand dtype, lo in bits 0-15.
template <class S>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (S::kDType == DType::f16)
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// 2^x; exactly 0 at -inf, NaN stays NaN.
__device__ __forceinline__ float exp2_approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

// ---- shared-memory tiles ----------------------------------------------------------------------
// Element offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows][D] tile.
template <int D>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

// Rows [row0, row0 + Rows) of one head's operand (row stride `st` elements, unit column
// stride) into `tile`; rows at or past `n` are zero-filled, so padding keys add 0 * 0.
template <int D, int Rows>
__device__ __forceinline__ void load_tile(lf_u16* tile, const lf_u16* src, int64_t st, int64_t row0,
                                          int64_t n) {
  constexpr int kChunks = D / 8;
  static_assert(Rows * kChunks % kThreads == 0);
#pragma unroll
  for (int it = 0; it < Rows * kChunks / kThreads; ++it) {
    const int i = it * kThreads + static_cast<int>(threadIdx.x);
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = row0 + r < n;
    cp_async16(smem_address(tile + swizzled<D>(r, c)), valid ? src + (row0 + r) * st + c * 8 : src,
               valid);
  }
}

// ---- one warp's 16 rows -------------------------------------------------------------------
// Lane roles in the mma layouts: a quad (4 lanes) holds one row pair (g, g + 8) of a 16-row
// tile; within it, lane t holds columns 2t and 2t + 1 of every 8-column block.
struct Lane {
  int lane, g, t;
};

// s = Q K_jᵀ for the warp's 16 rows of q_s: 8 accumulator tiles of 8 keys. Q comes as A
// fragments (16 rows x 16 of d); K rows are the B operand untransposed (B is k-major per
// column, and a K row is one key's d values).
template <class S, int D>
__device__ __forceinline__ void tile_scores(float (&s)[kBc / 8][4], const lf_u16* q_s,
                                            const lf_u16* k_s, int warp, Lane ln) {
#pragma unroll
  for (int n = 0; n < kBc / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
  const int q_row = warp * 16 + (ln.lane & 15), q_half = ln.lane >> 4;
  const int key = (ln.lane & 7) + ((ln.lane >> 4) << 3), half = (ln.lane >> 3) & 1;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t qf[4];  // rows [0, 8) then [8, 16) of d chunk 2kk, then the same of chunk 2kk + 1
    ldmatrix_x4(qf, smem_address(q_s + swizzled<D>(q_row, 2 * kk + q_half)));
#pragma unroll
    for (int np = 0; np < kBc / 16; ++np) {
      uint32_t b[4];  // keys np*16 + [0, 8) then + [8, 16); each: d chunks 2kk, 2kk + 1
      ldmatrix_x4(b, smem_address(k_s + swizzled<D>(np * 16 + key, 2 * kk + half)));
      mma<S>(s[2 * np], qf, b[0], b[1]);
      mma<S>(s[2 * np + 1], qf, b[2], b[3]);
    }
  }
}

// z = s * scale + mask, -inf for keys past sk. Element e of tile n is row g + 8 (e / 2), key
// j0 + 8n + 2t + e % 2. `mask_rows` are the lane's two rows of the mask (the same for keys).
template <class S>
__device__ __forceinline__ void scale_and_mask(float (&s)[kBc / 8][4], const AttentionArgs& a,
                                               MaskKind kind, const lf_u16* const (&mask_rows)[2],
                                               int64_t j0, Lane ln) {
#pragma unroll
  for (int n = 0; n < kBc / 8; ++n) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int64_t key = j0 + 8 * n + 2 * ln.t + c;
      float add0 = 0.0f, add1 = 0.0f;  // rows g, g + 8
      if (key >= a.sk) {
        add0 = add1 = kNegInf;
      } else if (kind != MaskKind::none) {
        add0 = S::to(__ldg(mask_rows[0] + key * a.mask_st[3]));
        add1 = kind == MaskKind::keys ? add0 : S::to(__ldg(mask_rows[1] + key * a.mask_st[3]));
      }
      // The scores as eager's GEMM writes them, rounded to the dtype (attention.cu, the note).
      s[n][c] = S::to(S::from(s[n][c])) * a.scale + add0;
      s[n][2 + c] = S::to(S::from(s[n][2 + c])) * a.scale + add1;
    }
  }
}

// Per row of the pair: running max m (of z) and this lane's share of the running sum l.
struct RowStats {
  float m[2] = {kNegInf, kNegInf};
  float l[2] = {0.0f, 0.0f};
};

__device__ __forceinline__ float quad_max(float v) {
  v = lf_max(v, __shfl_xor_sync(0xffffffffu, v, 1));  // NaN wins
  return lf_max(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// The online-softmax step: s becomes the tile's probabilities exp(z - m_new), the accumulator
// and the sums are rescaled by exp(m_old - m_new), and P is packed as the A fragments of P V
// (the accumulator layout of keys 16kk..16kk+15 is the A layout of one k16 step).
template <class S, int D>
__device__ __forceinline__ void softmax_tile(float (&s)[kBc / 8][4], RowStats& st,
                                             float (&acc)[D / 8][4], uint32_t (&p)[kBc / 16][4]) {
  constexpr float kLog2e = 1.4426950408889634f;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float mx = kNegInf;
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n) mx = lf_max(mx, lf_max(s[n][2 * i], s[n][2 * i + 1]));
    const float m_old = st.m[i], m_new = lf_max(m_old, quad_max(mx));
    // All -inf so far: subtract 0, so the probabilities are exp2(-inf) = 0 rather than NaN.
    const float base = (m_new == kNegInf ? 0.0f : m_new) * kLog2e;
    // Nothing finite before this tile: drop what the accumulator holds (0, or NaN from
    // 0 * a NaN in V) as the CPU kernel skips such tiles; NaN once m is NaN.
    const bool fresh = m_old == kNegInf;
    const float alpha = exp2_approx(m_old * kLog2e - base);
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n) {
#pragma unroll
      for (int e = 2 * i; e < 2 * i + 2; ++e) {
        s[n][e] = exp2_approx(fmaf(s[n][e], kLog2e, -base));
        sum += s[n][e];
      }
    }
    st.l[i] = fresh ? sum : st.l[i] * alpha + sum;
    st.m[i] = m_new;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      acc[n][2 * i] = fresh ? 0.0f : acc[n][2 * i] * alpha;
      acc[n][2 * i + 1] = fresh ? 0.0f : acc[n][2 * i + 1] * alpha;
    }
  }
#pragma unroll
  for (int kk = 0; kk < kBc / 16; ++kk) {
    p[kk][0] = pack2<S>(s[2 * kk][0], s[2 * kk][1]);
    p[kk][1] = pack2<S>(s[2 * kk][2], s[2 * kk][3]);
    p[kk][2] = pack2<S>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    p[kk][3] = pack2<S>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// acc += P V_j. V rows are keys, so the B operand (k-major per output column) is V
// transposed: ldmatrix .trans.
template <class S, int D>
__device__ __forceinline__ void accumulate_pv(float (&acc)[D / 8][4],
                                              const uint32_t (&p)[kBc / 16][4], const lf_u16* v_s,
                                              Lane ln) {
  const int key = (ln.lane & 7) + (((ln.lane >> 3) & 1) << 3), half = ln.lane >> 4;
#pragma unroll
  for (int kk = 0; kk < kBc / 16; ++kk) {
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b[4];  // keys kk*16 + [0, 16) of columns dp*16 + [0, 8), then of + [8, 16)
      ldmatrix_x4_trans(b, smem_address(v_s + swizzled<D>(kk * 16 + key, 2 * dp + half)));
      mma<S>(acc[2 * dp], p[kk], b[0], b[1]);
      mma<S>(acc[2 * dp + 1], p[kk], b[2], b[3]);
    }
  }
}

// out = acc / l for the warp's rows below sq; NaN for rows whose max is not finite.
template <class S, int D>
__device__ __forceinline__ void store_rows(const AttentionArgs& a, const RowStats& st,
                                           const float (&acc)[D / 8][4], lf_u16* out, int64_t row0,
                                           Lane ln) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float l = quad_sum(st.l[i]);  // every lane: the shuffles need the whole warp
    const int64_t row = row0 + ln.g + 8 * i;
    if (row >= a.sq) continue;
    const bool finite = isfinite(st.m[i]);
    const float inv = 1.0f / l, nan = __int_as_float(0x7fc00000);
    lf_u16* o = out + row_offset(row, a.rows_t, a.out_st[2], a.out_st_g) + 2 * ln.t;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const float y0 = finite ? acc[n][2 * i] * inv : nan;
      const float y1 = finite ? acc[n][2 * i + 1] * inv : nan;
      *reinterpret_cast<uint32_t*>(o + 8 * n) = pack2<S>(y0, y1);
    }
  }
}

#endif  // sm_80+

// Blocks per SM the registers are capped for: at d = 64 the compiler would otherwise take ~245
// registers (hoisting mask loads and addresses), leaving 2 blocks per SM where 3 fit without
// spills (ptxas -v: 167). At d = 128 2 blocks is what 48 KiB of smem and ~240 registers allow.
template <int D>
constexpr int kMinBlocksPerSm = D == 64 ? 3 : 2;

template <class S, int D>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm<D>)
    attention_mma_kernel(AttentionArgs a, int64_t row_tiles, MaskKind mask_kind) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  __shared__ alignas(128) lf_u16 q_s[kBr * D];
  __shared__ alignas(128) lf_u16 k_s[kBc * D];
  __shared__ alignas(128) lf_u16 v_s[kBc * D];
  const int64_t tile = blockIdx.x % row_tiles, bh = blockIdx.x / row_tiles;
  const int64_t b = bh / a.heads, h = bh % a.heads, row0 = tile * kBr;
  const int warp = threadIdx.x / 32;
  const Lane ln{static_cast<int>(threadIdx.x % 32), static_cast<int>(threadIdx.x % 32) / 4,
                static_cast<int>(threadIdx.x % 4)};
  const auto* q = static_cast<const lf_u16*>(a.q) + b * a.q_st[0] + h * a.q_st[1];
  const auto* k = static_cast<const lf_u16*>(a.k) + b * a.k_st[0] + h * a.k_st[1];
  const auto* v = static_cast<const lf_u16*>(a.v) + b * a.v_st[0] + h * a.v_st[1];
  const auto* mask = static_cast<const lf_u16*>(a.mask) + b * a.mask_st[0] + h * a.mask_st[1];
  // The mask's rows for this lane's two rows (rows past sq read row sq - 1: never stored).
  const lf_u16* mask_rows[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t row = min(row0 + warp * 16 + ln.g + 8 * i, a.sq - 1);
    mask_rows[i] = mask + row_offset(row, a.rows_t, a.mask_st[2], a.mask_st_g);
  }
  const int64_t tiles = (a.sk + kBc - 1) / kBc;

  load_tile<D, kBr>(q_s, q, a.q_st[2], row0, a.sq);
  load_tile<D, kBc>(k_s, k, a.k_st[2], 0, a.sk);
  cp_async_commit();
  load_tile<D, kBc>(v_s, v, a.v_st[2], 0, a.sk);
  cp_async_commit();
  cp_async_wait<1>();  // Q and K_0
  __syncthreads();

  RowStats st;
  float acc[D / 8][4] = {};
  for (int64_t j = 0; j < tiles; ++j) {
    const int64_t j0 = j * kBc;
    float s[kBc / 8][4];
    tile_scores<S, D>(s, q_s, k_s, warp, ln);
    __syncthreads();  // every warp has read K_j
    if (j + 1 < tiles) load_tile<D, kBc>(k_s, k, a.k_st[2], j0 + kBc, a.sk);
    cp_async_commit();  // (possibly empty: keeps the group count the same every tile)
    scale_and_mask<S>(s, a, mask_kind, mask_rows, j0, ln);
    uint32_t p[kBc / 16][4];
    softmax_tile<S, D>(s, st, acc, p);
    cp_async_wait<1>();  // V_j
    __syncthreads();
    accumulate_pv<S, D>(acc, p, v_s, ln);
    __syncthreads();  // every warp has read V_j
    if (j + 1 < tiles) load_tile<D, kBc>(v_s, v, a.v_st[2], j0 + kBc, a.sk);
    cp_async_commit();
    cp_async_wait<1>();  // K_{j+1}
    __syncthreads();
  }
  lf_u16* out = static_cast<lf_u16*>(a.out) + b * a.out_st[0] + h * a.out_st[1];
  store_rows<S, D>(a, st, acc, out, row0 + warp * 16, ln);
#else
  __trap();
#endif
}

// Unit column stride and 16-byte aligned rows (cp.async); strides of size-1 dims are unused.
bool rows_aligned(const void* p, const int64_t (&st)[4], const int64_t (&n)[3], int64_t elems) {
  bool ok = reinterpret_cast<uintptr_t>(p) % (2 * elems) == 0 && st[3] == 1;
  for (int i = 0; i < 3; ++i) ok = ok && (n[i] == 1 || st[i] % elems == 0);
  return ok;
}

template <class S, int D>
void launch_for(const AttentionArgs& a, cudaStream_t stream) {
  const int64_t row_tiles = (a.sq + kBr - 1) / kBr;
  const int64_t blocks = a.batch * a.heads * row_tiles;
  LF_CHECK(blocks < (int64_t{1} << 31), "attention", "too many blocks: ", blocks);
  const bool mask_by_key = a.mask_st[2] == 0 && a.mask_st_g == 0;
  const MaskKind kind = !a.mask ? MaskKind::none : mask_by_key ? MaskKind::keys : MaskKind::rows;
  attention_mma_kernel<S, D>
      <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a, row_tiles, kind);
  LF_CUDA_LAUNCH_CHECK("attention_mma_kernel");
}

}  // namespace

bool attention_mma_fits(const AttentionArgs& a) {
  if (a.dtype != DType::f16 && a.dtype != DType::bf16) return false;
  if (a.d != a.dv || (a.d != 64 && a.d != 128) || a.sk == 0) return false;
  const int64_t q_n[3] = {a.batch, a.heads, a.sq}, kv_n[3] = {a.batch, a.heads, a.sk};
  const int64_t out_n[3] = {a.batch, a.heads, a.rows_t};
  const bool groups_even = a.rows_t >= a.sq || a.out_st_g % 2 == 0;
  return rows_aligned(a.q, a.q_st, q_n, 8) && rows_aligned(a.k, a.k_st, kv_n, 8) &&
         rows_aligned(a.v, a.v_st, kv_n, 8) && rows_aligned(a.out, a.out_st, out_n, 2) &&
         groups_even && current_device_info().cc_major >= 8;
}

void launch_attention_mma(const AttentionArgs& a, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const bool wide = a.d == 128;
  if (a.dtype == DType::f16)
    wide ? launch_for<F16, 128>(a, s) : launch_for<F16, 64>(a, s);
  else
    wide ? launch_for<BF16, 128>(a, s) : launch_for<BF16, 64>(a, s);
}

}  // namespace livefuse::cuda
