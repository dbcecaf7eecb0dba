#pragma once
// The pieces of flash-attention-2 on tensor cores that the prefill kernel (attention_mma.cu) and
// the split-KV decode kernel (attention_mma_decode.cu) share: PTX wrappers, swizzled
// shared-memory tiles, one warp's 16 query rows (scores, mask, online softmax, P V, the store)
// and the merge of key groups. The layouts, the swizzle and the numerics are described at the
// top of attention_mma.cu. Device code for those two files alone.
#include <cstdint>

#include "kernels/attention_args.hpp"
#include "kernels/cuda/dtype_io.cuh"

namespace livefuse::cuda::tc {

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
// Copied by `Threads` threads, this one being thread `t` of them: it takes 16-byte chunk
// t % kChunks of every kStep-th row from row t / kChunks, so its source steps by one constant
// and its row count is checked in 32 bits -- one 64-bit product a tile, not one a chunk (the
// loads' address arithmetic was ~half of BERT b1's attention kernel's instructions, ncu in
// session 45: ~45 a cp.async).
template <int D, int Rows, int Threads>
__device__ __forceinline__ void load_tile(lf_u16* tile, const lf_u16* src, int64_t st, int64_t row0,
                                          int64_t n, int t) {
  constexpr int kChunks = D / 8, kStep = Threads / kChunks;
  static_assert(Threads % kChunks == 0 && Rows % kStep == 0);
  const int c = t % kChunks, r0 = t / kChunks;
  const int64_t left = n - row0 - r0;  // rows r0 + i kStep valid while i kStep < left
  const int valid_rows = left <= 0 ? 0 : left >= Rows ? Rows : static_cast<int>(left);
  const lf_u16* p = src + (row0 + r0) * st + c * 8;
  const int64_t step = kStep * st;
  const uint32_t base = smem_address(tile);
#pragma unroll
  for (int it = 0; it < Rows / kStep; ++it) {
    const bool valid = it * kStep < valid_rows;
    cp_async16(base + 2 * swizzled<D>(r0 + it * kStep, c), valid ? p : src, valid);
    p += step;
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
// Keys are counted from the tile's first in 32 bits, the tile's base offsets taken once.
template <class S>
__device__ __forceinline__ void scale_and_mask(float (&s)[kBc / 8][4], const AttentionArgs& a,
                                               MaskKind kind, const lf_u16* const (&mask_rows)[2],
                                               int64_t j0, Lane ln) {
  const int64_t left = a.sk - j0;  // the tile's keys from `left` on are padding
  const int valid_keys = left >= kBc ? kBc : static_cast<int>(left);
  const int64_t mst = a.mask_st[3];
  const lf_u16* m0 = nullptr;
  const lf_u16* m1 = nullptr;
  if (kind != MaskKind::none)
    m0 = mask_rows[0] + (j0 + 2 * ln.t) * mst, m1 = mask_rows[1] + (j0 + 2 * ln.t) * mst;
#pragma unroll
  for (int n = 0; n < kBc / 8; ++n) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int key = 8 * n + 2 * ln.t + c;
      float add0 = 0.0f, add1 = 0.0f;  // rows g, g + 8
      if (key >= valid_keys) {
        add0 = add1 = kNegInf;
      } else if (kind != MaskKind::none) {
        add0 = S::to(__ldg(m0 + (8 * n + c) * mst));
        add1 = kind == MaskKind::keys ? add0 : S::to(__ldg(m1 + (8 * n + c) * mst));
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
    const float m0 = m_new == kNegInf ? 0.0f : m_new;
    // Nothing finite before this tile: drop what the accumulator holds (0, or NaN from
    // 0 * a NaN in V) as the CPU kernel skips such tiles; NaN once m is NaN.
    const bool fresh = m_old == kNegInf;
    float alpha, sum = 0.0f;
    if (m0 > -1e38f) {  // (a NaN m takes the other way: NaN either way)
      // exp(z - m) as one FMA and exp2: z * log2(e) - m * log2(e); a z near the f32 limit (a
      // masked key) goes to -inf inside the FMA, as its probability 0 wants.
      const float base = m0 * kLog2e;
      alpha = exp2_approx(m_old * kLog2e - base);
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n) {
#pragma unroll
        for (int e = 2 * i; e < 2 * i + 2; ++e) {
          s[n][e] = exp2_approx(fmaf(s[n][e], kLog2e, -base));
          sum += s[n][e];
        }
      }
    } else {
      // Every key so far masked with HF's padding value (the dtype's lowest, -3.39e38 in bf16):
      // m * log2(e) would overflow to -inf and the row turn NaN where eager averages its keys.
      // The difference first.
      alpha = exp2_approx((m_old - m0) * kLog2e);
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n) {
#pragma unroll
        for (int e = 2 * i; e < 2 * i + 2; ++e) {
          s[n][e] = exp2_approx((s[n][e] - m0) * kLog2e);
          sum += s[n][e];
        }
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
    lf_u16* o = out + row_offset32(row, a.rows_t, a.out_st[2], a.out_st_g) + 2 * ln.t;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const float y0 = finite ? acc[n][2 * i] * inv : nan;
      const float y1 = finite ? acc[n][2 * i + 1] * inv : nan;
      *reinterpret_cast<uint32_t*>(o + 8 * n) = pack2<S>(y0, y1);
    }
  }
}

// ---- merging key groups -------------------------------------------------------------------
// A warp's partial result in shared memory: its 16 rows of the accumulator (rows padded to
// D + 8 floats: the quads' stores fall on different banks), then the rows' max and whole sum.
template <int D>
constexpr int kPartFloats = 16 * (D + 8) + 32;

template <int D>
__device__ __forceinline__ void put_partial(float* part, const RowStats& st,
                                            const float (&acc)[D / 8][4], Lane ln) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float l = quad_sum(st.l[i]);
    const int row = ln.g + 8 * i;
    if (ln.t == 0) {
      part[16 * (D + 8) + row] = st.m[i];
      part[16 * (D + 8) + 16 + row] = l;
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<float2*>(part + row * (D + 8) + 8 * n + 2 * ln.t) =
          make_float2(acc[n][2 * i], acc[n][2 * i + 1]);
  }
}

// Group 0 takes in the partials of groups 1 .. KW - 1 for the same rows (`part0` is group 0's
// slot, `stride` floats apart), as its walk would have met their tiles: all rescaled to the
// largest max; a group whose scores were all -inf adds nothing (as a tile does before the first
// finite one); a NaN or +inf max makes the row NaN in store_rows.
template <int D, int KW>
__device__ __forceinline__ void merge_partials(RowStats& st, float (&acc)[D / 8][4],
                                               const float* part0, int stride, Lane ln) {
  constexpr float kLog2e = 1.4426950408889634f;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = ln.g + 8 * i;
    float m = st.m[i];
#pragma unroll
    for (int g = 1; g < KW; ++g) m = lf_max(m, part0[g * stride + 16 * (D + 8) + row]);
    const float own = st.m[i];
    const float w0 = own == kNegInf ? 0.0f : exp2_approx((own - m) * kLog2e);
    // Every lane takes part in the quad's shuffles (full-mask __shfl_xor_sync), also where its
    // row's own max is -inf: a row whose keys were all -inf here while another row's were not
    // would otherwise leave lanes out of a warp-wide shuffle (undefined; a hang where the
    // compiler keeps the branch).
    const float own_l = quad_sum(st.l[i]);
    float l = own == kNegInf ? 0.0f : own_l * w0;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      acc[n][2 * i] = own == kNegInf ? 0.0f : acc[n][2 * i] * w0;
      acc[n][2 * i + 1] = own == kNegInf ? 0.0f : acc[n][2 * i + 1] * w0;
    }
#pragma unroll
    for (int g = 1; g < KW; ++g) {
      const float* p = part0 + g * stride;
      const float mg = p[16 * (D + 8) + row];
      if (mg == kNegInf) continue;
      const float w = exp2_approx((mg - m) * kLog2e);
      l += p[16 * (D + 8) + 16 + row] * w;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        const float2 v = *reinterpret_cast<const float2*>(p + row * (D + 8) + 8 * n + 2 * ln.t);
        acc[n][2 * i] += v.x * w;
        acc[n][2 * i + 1] += v.y * w;
      }
    }
    st.m[i] = m;
    st.l[i] = ln.t == 0 ? l : 0.0f;  // store_rows sums the quad
  }
}

// Barrier of one key group's warps: they share its K and V buffers.
template <int RW, int KW>
__device__ __forceinline__ void group_sync(int kw) {
  if constexpr (KW == 1)
    __syncthreads();
  else if constexpr (RW == 1)
    __syncwarp();
  else
    asm volatile("bar.sync %0, %1;\n" ::"r"(1 + kw), "n"(32 * RW) : "memory");
}

// One key group's walk over its tiles first, first + step, ... (below end): each tile's scores,
// mask, online softmax and P V, with the group's next K loaded while this tile's softmax runs and
// its next V while P V runs (FlashAttention-2's schedule). The caller has loaded the group's first
// K and V (`GroupThreads` threads, this one `gt` of them) and waited for that K; `sync` is the
// group's barrier (its warps share the buffers).
template <class S, int D, int GroupThreads, class Sync>
__device__ __forceinline__ void walk_key_tiles(const AttentionArgs& a, MaskKind kind,
                                               const lf_u16* const (&mask_rows)[2],
                                               const lf_u16* q_s, lf_u16* k_s, lf_u16* v_s,
                                               const lf_u16* k, const lf_u16* v, int64_t first,
                                               int64_t end, int step, int row_warp, int gt, Lane ln,
                                               Sync sync, RowStats& st, float (&acc)[D / 8][4]) {
  for (int64_t j = first; j < end; j += step) {
    const int64_t j0 = j * kBc, next = j0 + step * kBc;
    const bool more = j + step < end;
    float s[kBc / 8][4];
    tile_scores<S, D>(s, q_s, k_s, row_warp, ln);
    sync();  // every warp of the group has read K_j
    if (more) load_tile<D, kBc, GroupThreads>(k_s, k, a.k_st[2], next, a.sk, gt);
    cp_async_commit();  // (possibly empty: keeps the group count the same every tile)
    scale_and_mask<S>(s, a, kind, mask_rows, j0, ln);
    uint32_t p[kBc / 16][4];
    softmax_tile<S, D>(s, st, acc, p);
    cp_async_wait<1>();  // V_j
    sync();
    accumulate_pv<S, D>(acc, p, v_s, ln);
    sync();  // every warp of the group has read V_j
    if (more) load_tile<D, kBc, GroupThreads>(v_s, v, a.v_st[2], next, a.sk, gt);
    cp_async_commit();
    cp_async_wait<1>();  // K of the group's next tile
    sync();
  }
}

#endif  // sm_80+

}  // namespace livefuse::cuda::tc
