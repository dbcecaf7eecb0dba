// Strided copies (contiguous, concat, operands materialised for cuBLASLt). Bits are copied as
// they are. After coalescing:
//  * one dense range                      -> cudaMemcpyAsync
//  * innermost dim contiguous on both sides -> copied in the widest word (16/8/4 bytes) its
//    sizes, strides and addresses allow, 4 words in flight per thread
//  * a transpose (the source is contiguous along another dim than the destination) -> 32x32
//    tiles through shared memory, so both the reads and the writes are coalesced
//  * anything else                         -> element by element, 4 in flight per thread
#include <cstdint>
#include <vector>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/launch_util.hpp"
#include "kernels/cuda/layout.hpp"
#include "kernels/cuda/offset_calc.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/pdl.hpp"

namespace livefuse::cuda {
namespace {

constexpr int kCopyUnroll = 4;

struct PreparedCopy {
  enum class Kind { none, memcpy, transpose, words } kind = Kind::none;
  void* dst = nullptr;
  const void* src = nullptr;
  StridedLayout l;         // coalesced; for words, counted in words
  int64_t es = 0;          // bytes a transposed element or a word
  int transpose_dim = -1;  // the source's contiguous dim (transpose)
  size_t bytes = 0;        // memcpy
  bool idx32 = true;       // words: offsets fit 32 bits
};

template <class Word, class Idx>
struct CopyArgs {
  Word* dst;
  const Word* src;
  Idx n;
  OffsetCalc<Idx, 2> oc;  // (dst, src)
};

// Elements [0, a.n) of one copy, by `blocks` blocks of which this is `block`.
template <class Word, class Idx>
__device__ __forceinline__ void copy_part(const CopyArgs<Word, Idx>& a, Idx block, Idx blocks) {
  const Idx step = blocks * blockDim.x * kCopyUnroll;
  for (Idx base = block * blockDim.x * kCopyUnroll + threadIdx.x; base < a.n; base += step) {
    Word w[kCopyUnroll];
    Idx dst_off[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) {
      const Idx i = base + static_cast<Idx>(u) * blockDim.x;
      if (i >= a.n) continue;
      Idx off[2];
      a.oc.get(i, off);
      dst_off[u] = off[0];
      w[u] = a.src[off[1]];
    }
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u)
      if (base + static_cast<Idx>(u) * blockDim.x < a.n) a.dst[dst_off[u]] = w[u];
  }
}

template <class Word, class Idx>
__global__ void __launch_bounds__(kEwThreads) copy_kernel(const CopyArgs<Word, Idx> a) {
  pdl_wait();
  copy_part(a, static_cast<Idx>(blockIdx.x), static_cast<Idx>(gridDim.x));
}

// Several copies of one word size in one launch (a concat's inputs into their slabs; a decode
// step's two cache concats; a static cache's held K and V writes): each copy owns a run of the
// grid's blocks. One launch costs the host 3-4 us on the H200 machine; a KV-cache concat is two
// copies of a few hundred KB. The arguments come in 2, 4 and 8 slots: a launch's parameter
// block is copied at every launch (and every patch of a recorded one); eight slots are ~1.5 KB.
constexpr int kMaxBatchedCopies = 8;
template <class Word, class Idx, int kSlots>
struct CopyBatchArgs {
  int n = 0;
  unsigned first_block[kSlots + 1] = {};
  CopyArgs<Word, Idx> copy[kSlots];
};

static_assert(sizeof(CopyBatchArgs<Vec16<uint32_t>, int64_t, kMaxBatchedCopies>) <= 4096,
              "kernel parameters over 4 KB");

template <class Word, class Idx, int kSlots>
__global__ void __launch_bounds__(kEwThreads)
    copy_batch_kernel(const CopyBatchArgs<Word, Idx, kSlots> a) {
  pdl_wait();
  int j = 0;
  while (j + 1 < a.n && blockIdx.x >= a.first_block[j + 1]) ++j;
  copy_part(a.copy[j], static_cast<Idx>(blockIdx.x - a.first_block[j]),
            static_cast<Idx>(a.first_block[j + 1] - a.first_block[j]));
}

template <class Word, class Idx>
void launch_typed(void* dst, const void* src, const StridedLayout& l, cudaStream_t s) {
  CopyArgs<Word, Idx> a{};
  a.dst = static_cast<Word*>(dst);
  a.src = static_cast<const Word*>(src);
  a.n = static_cast<Idx>(l.numel());
  a.oc = OffsetCalc<Idx, 2>::make(l, 0);
  const unsigned grid = grid_for((l.numel() + kCopyUnroll - 1) / kCopyUnroll);
  launch_pdl("copy_kernel", copy_kernel<Word, Idx>, grid, kEwThreads, 0, s, a);
}

template <class Word>
void launch_word(void* dst, const void* src, const StridedLayout& l, cudaStream_t s) {
  if (fits_uint32(l)) {
    launch_typed<Word, uint32_t>(dst, src, l, s);
  } else {
    launch_typed<Word, int64_t>(dst, src, l, s);
  }
}

// Copies of one (Word, Idx) kind, at most kSlots, in one launch.
template <class Word, class Idx, int kSlots>
void launch_slots(const PreparedCopy* const* cs, int n, cudaStream_t s) {
  CopyBatchArgs<Word, Idx, kSlots> a{};
  a.n = n;
  unsigned blocks = 0;
  for (int j = 0; j < n; ++j) {
    const PreparedCopy& c = *cs[j];
    a.copy[j].dst = static_cast<Word*>(c.dst);
    a.copy[j].src = static_cast<const Word*>(c.src);
    a.copy[j].n = static_cast<Idx>(c.l.numel());
    a.copy[j].oc = OffsetCalc<Idx, 2>::make(c.l, 0);
    a.first_block[j] = blocks;
    blocks += grid_for((c.l.numel() + kCopyUnroll - 1) / kCopyUnroll);
  }
  a.first_block[n] = blocks;
  launch_pdl("copy_batch_kernel", copy_batch_kernel<Word, Idx, kSlots>, blocks, kEwThreads, 0, s,
             a);
}

// Copies of one (Word, Idx) kind, at most kMaxBatchedCopies, in one launch of the fewest slots.
template <class Word, class Idx>
void launch_batch(const PreparedCopy* const* cs, int n, cudaStream_t s) {
  if (n <= 2) return launch_slots<Word, Idx, 2>(cs, n, s);
  if (n <= 4) return launch_slots<Word, Idx, 4>(cs, n, s);
  launch_slots<Word, Idx, kMaxBatchedCopies>(cs, n, s);
}

// ---- tiled transpose ------------------------------------------------------------------------
constexpr int kTile = 32, kTileRows = 8;

template <class Word>
struct TransposeArgs {
  Word* dst;
  const Word* src;
  int64_t P, Q;  // p: the source's contiguous dim, q: the destination's
  int64_t dst_p, dst_q, src_p, src_q;
  int64_t batch;
  OffsetCalc<int64_t, 2> oc;  // the other dims: (dst, src)
};

template <class Word>
__global__ void __launch_bounds__(kTile* kTileRows) transpose_kernel(const TransposeArgs<Word> a) {
  __shared__ Word tile[kTile][kTile + 1];
  const int64_t tiles_p = (a.P + kTile - 1) / kTile, tiles_q = (a.Q + kTile - 1) / kTile;
  for (int64_t b = blockIdx.z; b < a.batch; b += gridDim.z) {
    int64_t off[2];
    a.oc.get(b, off);
    for (int64_t tp = blockIdx.y; tp < tiles_p; tp += gridDim.y) {
      for (int64_t tq = blockIdx.x; tq < tiles_q; tq += gridDim.x) {
        const int64_t p = tp * kTile + threadIdx.x;  // reads walk p: coalesced in the source
        for (int j = threadIdx.y; j < kTile; j += kTileRows) {
          const int64_t q = tq * kTile + j;
          if (p < a.P && q < a.Q) tile[j][threadIdx.x] = a.src[off[1] + p * a.src_p + q * a.src_q];
        }
        __syncthreads();
        const int64_t q = tq * kTile + threadIdx.x;  // writes walk q: coalesced in the destination
        for (int j = threadIdx.y; j < kTile; j += kTileRows) {
          const int64_t pp = tp * kTile + j;
          if (pp < a.P && q < a.Q)
            a.dst[off[0] + pp * a.dst_p + q * a.dst_q] = tile[threadIdx.x][j];
        }
        __syncthreads();
      }
    }
  }
}

template <class Word>
void launch_transpose(void* dst, const void* src, const StridedLayout& l, int p, cudaStream_t s) {
  const int q = l.rank - 1;
  TransposeArgs<Word> a{};
  a.dst = static_cast<Word*>(dst);
  a.src = static_cast<const Word*>(src);
  a.P = l.sizes[p], a.Q = l.sizes[q];
  a.dst_p = l.strides[0][p], a.dst_q = l.strides[0][q];
  a.src_p = l.strides[1][p], a.src_q = l.strides[1][q];
  StridedLayout rest;
  rest.n_operands = 2;
  for (int d = 0; d < l.rank; ++d) {
    if (d == p || d == q) continue;
    rest.sizes[rest.rank] = l.sizes[d];
    rest.strides[0][rest.rank] = l.strides[0][d];
    rest.strides[1][rest.rank] = l.strides[1][d];
    ++rest.rank;
  }
  a.batch = rest.numel();
  a.oc = OffsetCalc<int64_t, 2>::make(rest, 0);
  const int64_t tq = (a.Q + kTile - 1) / kTile, tp = (a.P + kTile - 1) / kTile;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(tq, 1 << 30)),
                  static_cast<unsigned>(std::min<int64_t>(tp, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(a.batch, 65535)));
  if (record_launch(transpose_kernel<Word>, grid, dim3(kTile, kTileRows), 0, 1, a)) return;
  transpose_kernel<Word><<<grid, dim3(kTile, kTileRows), 0, s>>>(a);
  LF_CUDA_LAUNCH_CHECK("transpose_kernel");
}

// The widest word (bytes) the copy can move at once: the innermost dim contiguous on both
// sides, its byte length, every other stride and both addresses multiples of the word.
int64_t widest_word(const StridedLayout& l, const void* dst, const void* src, int64_t es) {
  const int inner = l.rank - 1;
  if (inner < 0 || l.strides[0][inner] != 1 || l.strides[1][inner] != 1) return es;
  for (int64_t w = 16; w > es; w /= 2) {
    bool ok = (l.sizes[inner] * es) % w == 0 && reinterpret_cast<uintptr_t>(dst) % w == 0 &&
              reinterpret_cast<uintptr_t>(src) % w == 0;
    for (int k = 0; k < 2 && ok; ++k)
      for (int d = 0; d < inner && ok; ++d) ok = (l.strides[k][d] * es) % w == 0;
    if (ok) return w;
  }
  return es;
}

}  // namespace

namespace {

// How one copy runs, decided once (launch_copy alone, launch_copies together).
PreparedCopy prepare(void* dst, const void* src, size_t elem_bytes, const StridedLayout& layout) {
  PreparedCopy c;
  c.dst = dst, c.src = src, c.l = layout;
  StridedLayout& l = c.l;
  LF_ASSERT(l.n_operands == 2, "a copy takes a layout of (dst, src)");
  const int64_t n = l.numel();
  if (n == 0) return c;
  coalesce(l);
  if (l.rank == 0 || (l.rank == 1 && l.strides[0][0] == 1 && l.strides[1][0] == 1)) {
    c.kind = PreparedCopy::Kind::memcpy;
    c.bytes = static_cast<size_t>(n) * elem_bytes;
    return c;
  }
  int64_t es = static_cast<int64_t>(elem_bytes);
  const int inner = l.rank - 1;
  // A transpose: the destination walks its innermost dim densely, the source walks another.
  if (l.strides[0][inner] == 1 && l.strides[1][inner] != 1 && l.sizes[inner] >= 8 && es <= 8 &&
      (es & (es - 1)) == 0) {
    for (int p = 0; p < inner; ++p) {
      if (l.strides[1][p] != 1 || l.sizes[p] < 8) continue;
      c.kind = PreparedCopy::Kind::transpose;
      c.es = es;
      c.transpose_dim = p;
      return c;
    }
  }
  const int64_t w = widest_word(l, dst, src, es);
  if (w != es) {
    const int64_t f = w / es;
    l.sizes[inner] /= f;
    for (int k = 0; k < 2; ++k)
      for (int d = 0; d < inner; ++d) l.strides[k][d] /= f;
    es = w;
  }
  LF_ASSERT(es == 1 || es == 2 || es == 4 || es == 8 || es == 16, "unsupported element size ", es);
  c.kind = PreparedCopy::Kind::words;
  c.es = es;
  c.idx32 = fits_uint32(l);
  return c;
}

template <class Word>
void launch_transpose_of(const PreparedCopy& c, cudaStream_t s) {
  launch_transpose<Word>(c.dst, c.src, c.l, c.transpose_dim, s);
}

void launch_alone(const PreparedCopy& c, cudaStream_t s) {
  switch (c.kind) {
    case PreparedCopy::Kind::none:
      return;
    case PreparedCopy::Kind::memcpy:
      if (LaunchRecorder* r = recorder()) return r->copy(c.dst, c.src, c.bytes);
      LF_CUDA_CALL(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDeviceToDevice, s));
      return;
    case PreparedCopy::Kind::transpose:
      switch (c.es) {
        case 1: return launch_transpose_of<uint8_t>(c, s);
        case 2: return launch_transpose_of<uint16_t>(c, s);
        case 4: return launch_transpose_of<uint32_t>(c, s);
        default: return launch_transpose_of<uint64_t>(c, s);
      }
    case PreparedCopy::Kind::words:
      switch (c.es) {
        case 1: return launch_word<uint8_t>(c.dst, c.src, c.l, s);
        case 2: return launch_word<uint16_t>(c.dst, c.src, c.l, s);
        case 4: return launch_word<uint32_t>(c.dst, c.src, c.l, s);
        case 8: return launch_word<uint64_t>(c.dst, c.src, c.l, s);
        default: return launch_word<Vec16<uint32_t>>(c.dst, c.src, c.l, s);
      }
  }
}

template <class Idx>
void launch_batch_of(const PreparedCopy* const* cs, int n, int64_t es, cudaStream_t s) {
  switch (es) {
    case 1: return launch_batch<uint8_t, Idx>(cs, n, s);
    case 2: return launch_batch<uint16_t, Idx>(cs, n, s);
    case 4: return launch_batch<uint32_t, Idx>(cs, n, s);
    case 8: return launch_batch<uint64_t, Idx>(cs, n, s);
    default: return launch_batch<Vec16<uint32_t>, Idx>(cs, n, s);
  }
}

}  // namespace

void launch_copy(void* dst, const void* src, size_t elem_bytes, StridedLayout& l, cudaStream_t s) {
  const PreparedCopy c = prepare(dst, src, elem_bytes, l);
  l = c.l;
  launch_alone(c, s);
}

void launch_copies(const CopyJob* jobs, int n, cudaStream_t s) {
  std::vector<PreparedCopy> cs;
  cs.reserve(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) cs.push_back(prepare(jobs[j].dst, jobs[j].src, jobs[j].elem_bytes, jobs[j].l));
  // Word copies of one word size and index width go together; the rest run alone.
  std::vector<bool> done(cs.size(), false);
  for (size_t j = 0; j < cs.size(); ++j) {
    if (done[j]) continue;
    done[j] = true;
    if (cs[j].kind != PreparedCopy::Kind::words) {
      launch_alone(cs[j], s);
      continue;
    }
    const PreparedCopy* group[kMaxBatchedCopies] = {&cs[j]};
    int g = 1;
    for (size_t k = j + 1; k < cs.size() && g < kMaxBatchedCopies; ++k)
      if (!done[k] && cs[k].kind == PreparedCopy::Kind::words && cs[k].es == cs[j].es &&
          cs[k].idx32 == cs[j].idx32)
        group[g++] = &cs[k], done[k] = true;
    if (g == 1) launch_alone(cs[j], s);
    else if (cs[j].idx32) launch_batch_of<uint32_t>(group, g, cs[j].es, s);
    else launch_batch_of<int64_t>(group, g, cs[j].es, s);
  }
}

}  // namespace livefuse::cuda
