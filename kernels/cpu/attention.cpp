// Fused attention on the CPU: out = softmax(q kᵀ * scale + mask) v without writing the scores.
// Tasks are (batch * head, block of query rows): enough of them for the TBB threads even with
// few heads, as few as that allows, since a task packs its head's K and V. A block of query rows
// runs as small GEMMs on the GEMM's own micro-kernel (gemm_microkernel.hpp): S = Q Kᵀ for a tile
// of keys into a scratch tile that stays in L1, the online softmax over its rows (a running max
// and sum; the accumulator is rescaled when the max grows), then acc += P V, all in f32. Fewer
// than kMinRows query rows a head (decode) read K and V in place, one row at a time, instead.
//
// Semantics are eager's (kernels/cpu/norm.cpp run_softmax, then the GEMM): scores are scaled,
// then the mask added; a row whose scores are all -inf, or that holds a NaN or +inf, is NaN
// throughout; no key is skipped because its probability is 0 (0 * a NaN in V is NaN, as in the
// GEMM). The eager GEMM rounds f16/bf16 scores to the dtype before the softmax, and so does this
// kernel (kernels/cuda/attention.cu says why); the probabilities stay f32 here where eager
// rounds them, a difference below the dtype's rounding of each.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/attention_args.hpp"
#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/gemm_microkernel.hpp"
#include "kernels/cpu/row_sums.hpp"

namespace livefuse::cpu {
namespace {

constexpr int64_t kMinRows = 4;    // fewest query rows per task
constexpr int64_t kKeyTile = 64;   // keys per online-softmax step (a multiple of kNR)
constexpr int64_t kQueryBlock = 64;  // query rows whose scores tile is computed at once

void load_strided(const std::byte* base, DType dt, int64_t off, int64_t n, int64_t stride,
                  float* dst) {
  load_floats(base, dt, off, n, stride, dst);
}

void store_strided(std::byte* base, DType dt, int64_t off, int64_t n, int64_t stride,
                   const float* src) {
  visit_dtype(dt, [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    if constexpr (D == DType::f32 || D == DType::f16 || D == DType::bf16) {
      auto* p = reinterpret_cast<typename DT<D>::T*>(base) + off;
      for (int64_t i = 0; i < n; ++i) store_as<D, float>(p + i * stride, src[i]);
    } else {
      LF_ASSERT(false, "attention on a non-float dtype");
    }
  });
}

// x[0, n) as values written in dt hold them (f16/bf16 round; f32 is exact).
void round_to(DType dt, float* x, int64_t n) {
  visit_dtype(dt, [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    if constexpr (D == DType::f16 || D == DType::bf16) {
      typename DT<D>::T t;
      for (int64_t i = 0; i < n; ++i) {
        store_as<D, float>(&t, x[i]);
        x[i] = load_as<D, float>(&t);
      }
    }
  });
}

// One query row's online softmax: its running max m and sum l over the key tiles seen so far.
struct RowState {
  float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
};

// Takes a tile of nj raw scores s (q · k of keys j0 ..) of one row to probabilities relative to
// the row's new running max, and returns alpha, the factor the row's accumulator is rescaled by
// -- or a negative value when the tile leaves nothing to accumulate (every score so far -inf:
// these keys have probability 0, and a later finite score must still give eager's finite row).
float softmax_step(const AttentionArgs& a, const float* mask_row, int64_t j0, int64_t nj, float* s,
                   RowState& st) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  round_to(a.dtype, s, nj);
  for (int64_t j = 0; j < nj; ++j) s[j] *= a.scale;
  if (mask_row)
    for (int64_t j = 0; j < nj; ++j) s[j] += mask_row[j0 + j];
  const float m_new = max_float(s, nj, st.m);
  if (m_new == neg_inf) return -1.0f;
  // alpha: 0 on the first finite tile; NaN once m is NaN.
  const float alpha = exp_shifted(st.m, m_new);
  st.l *= alpha;
  for (int64_t j = 0; j < nj; ++j) s[j] = exp_shifted(s[j], m_new);
  // A local sum in lanes: `st.l += s[j]` was one dependent add per key through memory (st may
  // alias s for all the compiler knows), a third of the kernel's time.
  st.l += static_cast<float>(sum_double(s, nj));
  st.m = m_new;
  return alpha;  // >= 0, or NaN (which is not < 0: it is applied, and poisons the row)
}

// out[0, dv) = acc / l, or NaN throughout: eager's softmax gives NaN for a row of all -inf
// (-inf - -inf), and a NaN or +inf score poisons its row's sum.
void finish_row(const AttentionArgs& a, const RowState& st, const float* acc, float* out) {
  const bool finite = std::isfinite(st.m);
  const float inv = 1.0f / st.l;
  for (int64_t c = 0; c < a.dv; ++c)
    out[c] = finite ? acc[c] * inv : std::numeric_limits<float>::quiet_NaN();
}

// q · k over d, 16 lanes of partial sums.
constexpr int64_t kLanes = 16;
float dot(const float* q, const float* k, int64_t d) {
  float part[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= d; c += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) part[l] += q[c + l] * k[c + l];
  float sum = 0.0f;
  for (int64_t l = 0; l < kLanes; ++l) sum += part[l];
  for (; c < d; ++c) sum += q[c] * k[c];
  return sum;
}

// A few query rows (decode: one): the keys and values read where they are, one row at a time
// -- f32 rows with unit stride in place, others converted into a row buffer. Packing the whole
// head first costs more than the row's products (a GPT-style decode step spent 9% of its time
// there, more than eager's matmul + softmax + matmul).
void attend_row_direct(const AttentionArgs& a, const std::byte* kb, const std::byte* vb,
                       int64_t b, int64_t h, const float* q, const float* mask_row, float* krow,
                       float* vrow, float* acc, float* s, float* out) {
  const bool k_in_place = a.dtype == DType::f32 && a.k_st[3] == 1;
  const bool v_in_place = a.dtype == DType::f32 && a.v_st[3] == 1;
  const int64_t k0 = b * a.k_st[0] + h * a.k_st[1], v0 = b * a.v_st[0] + h * a.v_st[1];
  auto key = [&](int64_t j) -> const float* {
    if (k_in_place) return reinterpret_cast<const float*>(kb) + k0 + j * a.k_st[2];
    load_strided(kb, a.dtype, k0 + j * a.k_st[2], a.d, a.k_st[3], krow);
    return krow;
  };
  auto value = [&](int64_t j) -> const float* {
    if (v_in_place) return reinterpret_cast<const float*>(vb) + v0 + j * a.v_st[2];
    load_strided(vb, a.dtype, v0 + j * a.v_st[2], a.dv, a.v_st[3], vrow);
    return vrow;
  };
  RowState st;
  for (int64_t c = 0; c < a.dv; ++c) acc[c] = 0.0f;
  for (int64_t j0 = 0; j0 < a.sk; j0 += kKeyTile) {
    const int64_t nj = std::min(kKeyTile, a.sk - j0);
    for (int64_t j = 0; j < nj; ++j) s[j] = dot(q, key(j0 + j), a.d);
    const float alpha = softmax_step(a, mask_row, j0, nj, s, st);
    if (alpha < 0.0f) continue;
    for (int64_t c = 0; c < a.dv; ++c) acc[c] *= alpha;
    for (int64_t j = 0; j < nj; ++j) {
      const float pj = s[j];
      const float* vr = value(j0 + j);
      for (int64_t c = 0; c < a.dv; ++c) acc[c] += pj * vr[c];
    }
  }
  finish_row(a, st, acc, out);
}

// A head's K and V packed as the micro-kernel's B panels (kNR columns each, zero-padded):
// kt: Kᵀ, [d, sk] -- panel p holds keys [p kNR, (p + 1) kNR), element (c, j) at
// p d kNR + c kNR + j % kNR; v: V, [sk, dv] -- panel p holds columns [p kNR, ..), element (j, c)
// at p sk kNR + j kNR + c % kNR.
void pack_head(const AttentionArgs& a, const std::byte* kb, const std::byte* vb, int64_t b,
               int64_t h, float* row, float* kt, float* v) {
  const int64_t skp = round_up(a.sk, kNR), dvp = round_up(a.dv, kNR);
  std::fill_n(kt, a.d * skp, 0.0f);
  std::fill_n(v, a.sk * dvp, 0.0f);
  for (int64_t j = 0; j < a.sk; ++j) {
    load_strided(kb, a.dtype, b * a.k_st[0] + h * a.k_st[1] + j * a.k_st[2], a.d, a.k_st[3], row);
    float* kp = kt + (j / kNR) * a.d * kNR + j % kNR;
    for (int64_t c = 0; c < a.d; ++c) kp[c * kNR] = row[c];
    load_strided(vb, a.dtype, b * a.v_st[0] + h * a.v_st[1] + j * a.v_st[2], a.dv, a.v_st[3], row);
    for (int64_t c0 = 0; c0 < a.dv; c0 += kNR)
      std::copy_n(row + c0, std::min<int64_t>(kNR, a.dv - c0), v + c0 * a.sk + j * kNR);
  }
}

struct Scratch {
  std::vector<float> row, kt, v, qa, s, pa, acc, m, out;
  std::vector<RowState> st;
};

// Query rows [r0, r0 + rb) of head (b, h) against its packed K and V: per tile of keys,
// S = Q Kᵀ (rows of S padded to kKeyTile), each row's softmax step, acc = acc * alpha + P V.
void attend_block(const AttentionArgs& a, int64_t b, int64_t h, int64_t r0, int64_t rb,
                  Scratch& t, MicroKernel mk) {
  const auto* qb = static_cast<const std::byte*>(a.q);
  const auto* mb = static_cast<const std::byte*>(a.mask);
  auto* ob = static_cast<std::byte*>(a.out);
  const int64_t rbp = round_up(rb, kMR), dvp = round_up(a.dv, kNR);
  // Q as A panels (kMR rows each): element (r, c) at (r / kMR) d kMR + c kMR + r % kMR.
  std::fill_n(t.qa.data(), rbp * a.d, 0.0f);
  for (int64_t r = 0; r < rb; ++r) {
    load_strided(qb, a.dtype, b * a.q_st[0] + h * a.q_st[1] + (r0 + r) * a.q_st[2], a.d, a.q_st[3],
                 t.row.data());
    float* qp = t.qa.data() + (r / kMR) * a.d * kMR + r % kMR;
    for (int64_t c = 0; c < a.d; ++c) qp[c * kMR] = t.row[c];
  }
  std::fill_n(t.acc.data(), rbp * dvp, 0.0f);
  for (int64_t r = 0; r < rb; ++r) t.st[r] = RowState{};
  std::fill_n(t.pa.data(), rbp * kKeyTile, 0.0f);  // padded rows stay 0
  for (int64_t j0 = 0; j0 < a.sk; j0 += kKeyTile) {
    const int64_t nj = std::min(kKeyTile, a.sk - j0), njp = round_up(nj, kNR);
    float* s = t.s.data();
    std::fill_n(s, rbp * kKeyTile, 0.0f);
    for (int64_t rp = 0; rp < rbp; rp += kMR)
      for (int64_t jp = 0; jp < njp; jp += kNR)
        mk(a.d, t.qa.data() + rp * a.d, t.kt.data() + (j0 + jp) * a.d, s + rp * kKeyTile + jp,
           kKeyTile);
    for (int64_t r = 0; r < rb; ++r) {
      float* sr = s + r * kKeyTile;
      const float* mask_row = nullptr;
      if (a.mask) {
        if (j0 == 0) {
          load_strided(mb, a.dtype,
                       b * a.mask_st[0] + h * a.mask_st[1] +
                           row_offset(r0 + r, a.rows_t, a.mask_st[2], a.mask_st_g),
                       a.sk, a.mask_st[3], t.m.data() + r * a.sk);
        }
        mask_row = t.m.data() + r * a.sk;
      }
      float alpha = softmax_step(a, mask_row, j0, nj, sr, t.st[r]);
      if (alpha < 0.0f) {  // nothing to accumulate: probabilities 0, acc stays as it is
        std::fill_n(sr, nj, 0.0f);
        alpha = 1.0f;
      }
      float* acc = t.acc.data() + r * dvp;
      for (int64_t c = 0; c < dvp; ++c) acc[c] *= alpha;
      // P as A panels: element (r, j) at (r / kMR) kKeyTile kMR + j kMR + r % kMR.
      float* pp = t.pa.data() + (r / kMR) * kKeyTile * kMR + r % kMR;
      for (int64_t j = 0; j < nj; ++j) pp[j * kMR] = sr[j];
    }
    for (int64_t rp = 0; rp < rbp; rp += kMR)
      for (int64_t cp = 0; cp < dvp; cp += kNR)
        mk(nj, t.pa.data() + rp * kKeyTile, t.v.data() + cp * a.sk + j0 * kNR,
           t.acc.data() + rp * dvp + cp, dvp);
  }
  for (int64_t r = 0; r < rb; ++r) {
    finish_row(a, t.st[r], t.acc.data() + r * dvp, t.out.data());
    const int64_t o_off =
        b * a.out_st[0] + h * a.out_st[1] + row_offset(r0 + r, a.rows_t, a.out_st[2], a.out_st_g);
    store_strided(ob, a.dtype, o_off, a.dv, a.out_st[3], t.out.data());
  }
}

// Rows [from, to) of every (batch, head) of a [batch, heads, rows, cols] operand from `src`
// (its row `from` at src row 0) into `dst`, bits as they are.
void copy_rows(const void* src, const int64_t (&src_st)[4], void* dst, const int64_t (&dst_st)[4],
               const AttentionArgs& a, int64_t from, int64_t to, int64_t cols) {
  const size_t es = dtype_size(a.dtype);
  const auto* s = static_cast<const std::byte*>(src);
  auto* d = static_cast<std::byte*>(dst);
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h)
      for (int64_t r = from; r < to; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t si = b * src_st[0] + h * src_st[1] + (r - from) * src_st[2] + c * src_st[3];
          const int64_t di = b * dst_st[0] + h * dst_st[1] + r * dst_st[2] + c * dst_st[3];
          std::memcpy(d + di * static_cast<int64_t>(es), s + si * static_cast<int64_t>(es), es);
        }
}

// The append of `a` (AttentionArgs::first_new): the new rows, and the old ones when the cache
// was not grown in place, into the caches after it.
void land_append(const AttentionArgs& a) {
  if (a.copy_old_k) copy_rows(a.k, a.k_st, a.k_dst, a.k_dst_st, a, 0, a.first_new, a.d);
  if (a.copy_old_v) copy_rows(a.v, a.v_st, a.v_dst, a.v_dst_st, a, 0, a.first_new, a.dv);
  copy_rows(a.k_new, a.k_new_st, a.k_dst, a.k_dst_st, a, a.first_new, a.sk, a.d);
  copy_rows(a.v_new, a.v_new_st, a.v_dst, a.v_dst_st, a, a.first_new, a.sk, a.dv);
}

}  // namespace

void run_attention(const AttentionArgs& args) {
  // The append first (a cache lands whatever the query rows: an empty batch of rows still
  // grows it), then the attention over the caches after it.
  if (args.first_new >= 0) land_append(args);
  const AttentionArgs a = after_append(args);
  if (a.batch * a.heads * a.sq * a.dv == 0) return;
  const auto* qb = static_cast<const std::byte*>(a.q);
  const auto* kb = static_cast<const std::byte*>(a.k);
  const auto* vb = static_cast<const std::byte*>(a.v);
  const auto* mb = static_cast<const std::byte*>(a.mask);
  auto* ob = static_cast<std::byte*>(a.out);
  // Blocks of rows per head: enough tasks for the threads (4 each), as few as that allows,
  // since each task packs its head's K and V anew.
  const int64_t want = 4 * cpu_workers();
  const int64_t per_head = std::clamp<int64_t>((want + a.batch * a.heads - 1) / (a.batch * a.heads),
                                               1, (a.sq + kMinRows - 1) / kMinRows);
  const int64_t row_block = (a.sq + per_head - 1) / per_head;
  const int64_t blocks = (a.sq + row_block - 1) / row_block;
  const int64_t tasks = a.batch * a.heads * blocks;
  const int64_t work = a.batch * a.heads * a.sq * std::max<int64_t>(1, a.sk) * (a.d + a.dv);
  const bool direct = a.sq < kMinRows;
  const MicroKernel mk = microkernel();
  parallel_range(tasks, work, [&](int64_t begin, int64_t end) {
    thread_local Scratch t;
    const int64_t skp = round_up(a.sk, kNR), dvp = round_up(a.dv, kNR);
    const int64_t qbp = round_up(std::min(kQueryBlock, row_block), kMR);
    t.row.resize(static_cast<size_t>(std::max({a.d, a.dv, int64_t{1}})));
    t.out.resize(static_cast<size_t>(dvp));
    if (direct) {
      t.v.resize(static_cast<size_t>(dvp));  // one value row
      t.qa.resize(static_cast<size_t>(a.d));  // one query row
      t.acc.resize(static_cast<size_t>(dvp));
      t.s.resize(static_cast<size_t>(kKeyTile));
      t.m.resize(static_cast<size_t>(a.mask ? a.sk : 0));
    } else {
      t.kt.resize(static_cast<size_t>(a.d * skp));
      t.v.resize(static_cast<size_t>(a.sk * dvp));
      t.qa.resize(static_cast<size_t>(qbp * a.d));
      t.s.resize(static_cast<size_t>(qbp * kKeyTile));
      t.pa.resize(static_cast<size_t>(qbp * kKeyTile));
      t.acc.resize(static_cast<size_t>(qbp * dvp));
      t.m.resize(static_cast<size_t>(a.mask ? qbp * a.sk : 0));
      t.st.resize(static_cast<size_t>(qbp));
    }
    int64_t packed = -1;  // the (batch, head) whose K and V are in the scratch
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / blocks, blk = task % blocks;
      const int64_t b = bh / a.heads, h = bh % a.heads;
      const int64_t r_begin = blk * row_block, r_end = std::min(a.sq, (blk + 1) * row_block);
      if (a.sk == 0) {  // an empty softmax times an empty V: the GEMM's zeros
        std::fill_n(t.out.data(), a.dv, 0.0f);
        for (int64_t r = r_begin; r < r_end; ++r)
          store_strided(ob, a.dtype,
                        b * a.out_st[0] + h * a.out_st[1] + row_offset(r, a.rows_t, a.out_st[2], a.out_st_g),
                        a.dv, a.out_st[3], t.out.data());
        continue;
      }
      if (!direct) {
        if (bh != packed) pack_head(a, kb, vb, b, h, t.row.data(), t.kt.data(), t.v.data());
        packed = bh;
        for (int64_t r0 = r_begin; r0 < r_end; r0 += kQueryBlock)
          attend_block(a, b, h, r0, std::min(kQueryBlock, r_end - r0), t, mk);
        continue;
      }
      for (int64_t r = r_begin; r < r_end; ++r) {
        float* q = t.qa.data();
        load_strided(qb, a.dtype, b * a.q_st[0] + h * a.q_st[1] + r * a.q_st[2], a.d, a.q_st[3], q);
        const float* mask_row = nullptr;
        if (a.mask) {
          load_strided(mb, a.dtype,
                       b * a.mask_st[0] + h * a.mask_st[1] +
                           row_offset(r, a.rows_t, a.mask_st[2], a.mask_st_g),
                       a.sk, a.mask_st[3], t.m.data());
          mask_row = t.m.data();
        }
        attend_row_direct(a, kb, vb, b, h, q, mask_row, t.row.data(), t.v.data(),
                          t.acc.data(), t.s.data(), t.out.data());
        const int64_t o_off =
            b * a.out_st[0] + h * a.out_st[1] + row_offset(r, a.rows_t, a.out_st[2], a.out_st_g);
        store_strided(ob, a.dtype, o_off, a.dv, a.out_st[3], t.out.data());
      }
    }
  });
}

}  // namespace livefuse::cpu
