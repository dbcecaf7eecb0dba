// Fused attention on the CPU: out = softmax(q kᵀ * scale + mask) v without writing the scores.
// Tasks are (batch * head, block of query rows): enough of them for the TBB threads even with
// few heads, as few as that allows, since a task converts its head's K (transposed) and V to
// f32 (fewer than kMinRows query rows a head -- decode -- read K and V in place instead). Each
// query row walks the keys in tiles with an online softmax (a running max and sum; the
// accumulator is rescaled when the max grows), all in f32.
//
// Semantics are eager's (kernels/cpu/norm.cpp run_softmax, then the GEMM): scores are scaled,
// then the mask added; a row whose scores are all -inf, or that holds a NaN or +inf, is NaN
// throughout; no key is skipped because its probability is 0 (0 * a NaN in V is NaN, as in the
// GEMM). The eager GEMM rounds f16/bf16 scores to the dtype before the softmax, and so does this
// kernel (kernels/cuda/attention.cu says why); the probabilities stay f32 here where eager
// rounds them, a difference below the dtype's rounding of each.
#include <tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention_args.hpp"
#include "kernels/cpu/cpu_common.hpp"

namespace livefuse::cpu {
namespace {

constexpr int64_t kMinRows = 4;   // fewest query rows per task
constexpr int64_t kKeyTile = 64;  // keys per online-softmax step
constexpr float kLog2e = 1.4426950408889634f;

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

struct Scratch {
  std::vector<float> k, kt, v, q, acc, s, m;
};

constexpr int64_t kLanes = 16;  // one AVX-512 register of floats (two AVX2 ones)
int64_t padded(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// s[0, 16 NB) = q · kᵀ for 16 NB keys from kt (row stride skp). NB independent accumulators:
// one chain of FMAs waits on its previous one (4 cycles), so a single 16-key block at a time ran
// at a quarter of the FMA rate; NB of them interleave.
template <int NB>
void scores_block(const float* q, const float* kt, int64_t skp, int64_t d, float* s) {
  float part[NB][kLanes] = {};
  for (int64_t c = 0; c < d; ++c) {
    const float qc = q[c];
    const float* kc = kt + c * skp;
    for (int b = 0; b < NB; ++b)
      for (int64_t l = 0; l < kLanes; ++l) part[b][l] += qc * kc[b * kLanes + l];
  }
  for (int b = 0; b < NB; ++b)
    for (int64_t l = 0; l < kLanes; ++l) s[b * kLanes + l] = part[b][l];
}

// acc[0, 16 NC) = acc * alpha + Σ_j p[j] v[j] over nj keys (v: row stride dvp), the NC column
// blocks as independent accumulators (scores_block says why).
template <int NC>
void pv_block(const float* p, const float* v, int64_t dvp, int64_t nj, float alpha, float* acc) {
  float part[NC][kLanes];
  for (int b = 0; b < NC; ++b)
    for (int64_t c = 0; c < kLanes; ++c) part[b][c] = acc[b * kLanes + c] * alpha;
  for (int64_t j = 0; j < nj; ++j) {
    const float pj = p[j];
    const float* vr = v + j * dvp;
    for (int b = 0; b < NC; ++b)
      for (int64_t c = 0; c < kLanes; ++c) part[b][c] += pj * vr[b * kLanes + c];
  }
  for (int b = 0; b < NC; ++b)
    for (int64_t c = 0; c < kLanes; ++c) acc[b * kLanes + c] = part[b][c];
}

// s[0, padded(nj)) for the keys at kt[0, nj): in blocks of up to 4 x 16 keys.
void scores_tile(const float* q, const float* kt, int64_t skp, int64_t d, int64_t nj, float* s) {
  for (int64_t jb = 0; jb < nj; jb += 4 * kLanes) {
    switch ((std::min<int64_t>(nj - jb, 4 * kLanes) + kLanes - 1) / kLanes) {
      case 1: scores_block<1>(q, kt + jb, skp, d, s + jb); break;
      case 2: scores_block<2>(q, kt + jb, skp, d, s + jb); break;
      case 3: scores_block<3>(q, kt + jb, skp, d, s + jb); break;
      default: scores_block<4>(q, kt + jb, skp, d, s + jb); break;
    }
  }
}

// acc[0, dvp) = acc * alpha + p · v over nj keys: in blocks of up to 4 x 16 columns.
void pv_tile(const float* p, const float* v, int64_t dvp, int64_t nj, float alpha, float* acc) {
  for (int64_t cb = 0; cb < dvp; cb += 4 * kLanes) {
    switch (std::min<int64_t>(dvp - cb, 4 * kLanes) / kLanes) {
      case 1: pv_block<1>(p, v + cb, dvp, nj, alpha, acc + cb); break;
      case 2: pv_block<2>(p, v + cb, dvp, nj, alpha, acc + cb); break;
      case 3: pv_block<3>(p, v + cb, dvp, nj, alpha, acc + cb); break;
      default: pv_block<4>(p, v + cb, dvp, nj, alpha, acc + cb); break;
    }
  }
}

// One query row against the head's keys, in tiles of kKeyTile with an online softmax.
// `scores(j0, nj, s)` writes q · kᵀ for keys [j0, j0 + nj) to s; `pv(p, j0, nj, alpha, acc)`
// sets acc = acc * alpha + p · v over them. The two ways of reaching K and V (below) share
// everything else, so their semantics cannot drift apart.
template <class Scores, class PV>
void attend_row(const AttentionArgs& a, const float* mask_row, float* acc, float* s, float* out,
                Scores&& scores, PV&& pv) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float m = neg_inf, l = 0.0f;
  const int64_t dvp = padded(a.dv);
  for (int64_t c = 0; c < dvp; ++c) acc[c] = 0.0f;
  for (int64_t j0 = 0; j0 < a.sk; j0 += kKeyTile) {
    const int64_t nj = std::min(kKeyTile, a.sk - j0);
    scores(j0, nj, s);
    round_to(a.dtype, s, nj);
    float tile_max = neg_inf;
    for (int64_t j = 0; j < nj; ++j) {
      float z = s[j] * a.scale;
      if (mask_row) z += mask_row[j0 + j];
      s[j] = z;
      tile_max = lf_max(tile_max, z);
    }
    const float m_new = lf_max(m, tile_max);
    // Only -inf so far: these keys have probability 0 and nothing is accumulated yet (exp of
    // -inf - -inf would be NaN; a later finite score must still give eager's finite row).
    if (m_new == neg_inf) continue;
    // exp(x) as 2^(x log2 e) through lf_exp2, which vectorises (a libm call per score cost a
    // third of the kernel); exp2(-inf) is exactly 0 and NaN propagates, as with exp.
    // alpha: 0 on the first finite tile; NaN once m is NaN.
    const float alpha = lf_exp2((m - m_new) * kLog2e);
    l *= alpha;
    for (int64_t j = 0; j < nj; ++j) s[j] = lf_exp2((s[j] - m_new) * kLog2e);
    for (int64_t j = 0; j < nj; ++j) l += s[j];
    pv(s, j0, nj, alpha, acc);
    m = m_new;
  }
  // Eager's softmax gives NaN for a row of all -inf (-inf - -inf), and a NaN or +inf score
  // poisons its row's sum.
  const bool finite = std::isfinite(m);
  const float inv = 1.0f / l;
  for (int64_t c = 0; c < a.dv; ++c)
    out[c] = finite ? acc[c] * inv : std::numeric_limits<float>::quiet_NaN();
}

// Per head, K transposed and V in f32 (kt: [d, padded(sk)]; v: [sk, padded(dv)]; padding
// zero), converted once for all the head's query rows. Both products run 16 outputs a lane
// group with the reduction outermost, so the lanes stay in registers.
void attend_row_converted(const AttentionArgs& a, const float* kt, const float* v, const float* q,
                          const float* mask_row, float* acc, float* s, float* out) {
  const int64_t skp = padded(a.sk), dvp = padded(a.dv);
  attend_row(
      a, mask_row, acc, s, out,
      [&](int64_t j0, int64_t nj, float* sc) { scores_tile(q, kt + j0, skp, a.d, nj, sc); },
      [&](const float* p, int64_t j0, int64_t nj, float alpha, float* ac) {
        pv_tile(p, v + j0 * dvp, dvp, nj, alpha, ac);
      });
}

// q · k over d, 16 lanes of partial sums.
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
// -- f32 rows with unit stride in place, others converted into a row buffer. Converting and
// transposing the whole head first cost more than the row's products (a GPT-style decode step
// spent 9% of its time there, more than eager's matmul + softmax + matmul).
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
  attend_row(
      a, mask_row, acc, s, out,
      [&](int64_t j0, int64_t nj, float* sc) {
        for (int64_t j = 0; j < nj; ++j) sc[j] = dot(q, key(j0 + j), a.d);
      },
      [&](const float* p, int64_t j0, int64_t nj, float alpha, float* ac) {
        for (int64_t c = 0; c < a.dv; ++c) ac[c] *= alpha;
        for (int64_t j = 0; j < nj; ++j) {
          const float pj = p[j];
          const float* vr = value(j0 + j);
          for (int64_t c = 0; c < a.dv; ++c) ac[c] += pj * vr[c];
        }
      });
}

}  // namespace

void run_attention(const AttentionArgs& a) {
  if (a.batch * a.heads * a.sq * a.dv == 0) return;
  const auto* qb = static_cast<const std::byte*>(a.q);
  const auto* kb = static_cast<const std::byte*>(a.k);
  const auto* vb = static_cast<const std::byte*>(a.v);
  const auto* mb = static_cast<const std::byte*>(a.mask);
  auto* ob = static_cast<std::byte*>(a.out);
  // Blocks of rows per head: enough tasks for the threads (4 each), as few as that allows,
  // since each task converts its head's K and V anew.
  const int64_t want = 4 * tbb::this_task_arena::max_concurrency();
  const int64_t per_head = std::clamp<int64_t>((want + a.batch * a.heads - 1) / (a.batch * a.heads),
                                               1, (a.sq + kMinRows - 1) / kMinRows);
  const int64_t row_block = (a.sq + per_head - 1) / per_head;
  const int64_t blocks = (a.sq + row_block - 1) / row_block;
  const int64_t tasks = a.batch * a.heads * blocks;
  const int64_t work = a.batch * a.heads * a.sq * std::max<int64_t>(1, a.sk) * (a.d + a.dv);
  // Fewer query rows a head than kMinRows: converting the head's K and V would cost more than
  // the rows' products (attend_row_direct).
  const bool direct = a.sq < kMinRows;
  parallel_range(tasks, work, [&](int64_t begin, int64_t end) {
    thread_local Scratch t;
    t.k.resize(static_cast<size_t>(std::max(a.d, a.dv)));
    const int64_t skp = padded(a.sk), dvp = padded(a.dv);
    if (!direct) {
      t.kt.assign(static_cast<size_t>(skp * a.d), 0.0f);  // padding stays 0
      t.v.assign(static_cast<size_t>(a.sk * dvp), 0.0f);
    } else {
      t.v.resize(static_cast<size_t>(dvp));  // one value row
    }
    t.q.resize(static_cast<size_t>(a.d));
    t.acc.resize(static_cast<size_t>(dvp) * 2);
    t.s.resize(static_cast<size_t>(kKeyTile));
    t.m.resize(static_cast<size_t>(a.mask ? a.sk : 0));
    int64_t loaded = -1;  // the (batch, head) whose K and V are in the scratch
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / blocks, blk = task % blocks;
      const int64_t b = bh / a.heads, h = bh % a.heads;
      if (!direct && bh != loaded) {
        for (int64_t j = 0; j < a.sk; ++j) {
          load_strided(kb, a.dtype, b * a.k_st[0] + h * a.k_st[1] + j * a.k_st[2], a.d, a.k_st[3],
                       t.k.data());
          for (int64_t c = 0; c < a.d; ++c) t.kt[c * skp + j] = t.k[c];
          load_strided(vb, a.dtype, b * a.v_st[0] + h * a.v_st[1] + j * a.v_st[2], a.dv, a.v_st[3],
                       &t.v[j * dvp]);
        }
        loaded = bh;
      }
      float* out = t.acc.data() + dvp;
      const int64_t r_end = std::min(a.sq, (blk + 1) * row_block);
      for (int64_t r = blk * row_block; r < r_end; ++r) {
        const int64_t o_off =
            b * a.out_st[0] + h * a.out_st[1] + row_offset(r, a.rows_t, a.out_st[2], a.out_st_g);
        if (a.sk == 0) {  // an empty softmax times an empty V: the GEMM's zeros
          for (int64_t c = 0; c < a.dv; ++c) out[c] = 0.0f;
          store_strided(ob, a.dtype, o_off, a.dv, a.out_st[3], out);
          continue;
        }
        load_strided(qb, a.dtype, b * a.q_st[0] + h * a.q_st[1] + r * a.q_st[2], a.d, a.q_st[3],
                     t.q.data());
        const float* mask_row = nullptr;
        if (a.mask) {
          load_strided(mb, a.dtype,
                       b * a.mask_st[0] + h * a.mask_st[1] +
                           row_offset(r, a.rows_t, a.mask_st[2], a.mask_st_g),
                       a.sk, a.mask_st[3], t.m.data());
          mask_row = t.m.data();
        }
        if (direct)
          attend_row_direct(a, kb, vb, b, h, t.q.data(), mask_row, t.k.data(), t.v.data(),
                            t.acc.data(), t.s.data(), out);
        else
          attend_row_converted(a, t.kt.data(), t.v.data(), t.q.data(), mask_row, t.acc.data(),
                               t.s.data(), out);
        store_strided(ob, a.dtype, o_off, a.dv, a.out_st[3], out);
      }
    }
  });
}

}  // namespace livefuse::cpu
