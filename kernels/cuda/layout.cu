// Strided copies (contiguous, concat, operands materialised for cuBLASLt). Bits are copied as
// they are. After coalescing:
//  * one dense range                      -> cudaMemcpyAsync
//  * innermost dim contiguous on both sides -> copied in the widest word (16/8/4 bytes) its
//    sizes, strides and addresses allow, 4 words in flight per thread
//  * a transpose (the source is contiguous along another dim than the destination) -> 32x32
//    tiles through shared memory, so both the reads and the writes are coalesced
//  * anything else                         -> element by element, 4 in flight per thread
#include <cstdint>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/launch_util.hpp"
#include "kernels/cuda/layout.hpp"
#include "kernels/cuda/offset_calc.cuh"

namespace livefuse::cuda {
namespace {

constexpr int kCopyUnroll = 4;

template <class Word, class Idx>
struct CopyArgs {
  Word* dst;
  const Word* src;
  Idx n;
  OffsetCalc<Idx, 2> oc;  // (dst, src)
};

template <class Word, class Idx>
__global__ void __launch_bounds__(kEwThreads) copy_kernel(const CopyArgs<Word, Idx> a) {
  const Idx step = static_cast<Idx>(gridDim.x) * blockDim.x * kCopyUnroll;
  for (Idx base = static_cast<Idx>(blockIdx.x) * blockDim.x * kCopyUnroll + threadIdx.x; base < a.n;
       base += step) {
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
void launch_typed(void* dst, const void* src, const StridedLayout& l, cudaStream_t s) {
  CopyArgs<Word, Idx> a{};
  a.dst = static_cast<Word*>(dst);
  a.src = static_cast<const Word*>(src);
  a.n = static_cast<Idx>(l.numel());
  a.oc = OffsetCalc<Idx, 2>::make(l, 0);
  const unsigned grid = grid_for((l.numel() + kCopyUnroll - 1) / kCopyUnroll);
  copy_kernel<Word, Idx><<<grid, kEwThreads, 0, s>>>(a);
  LF_CUDA_LAUNCH_CHECK("copy_kernel");
}

template <class Word>
void launch_word(void* dst, const void* src, const StridedLayout& l, cudaStream_t s) {
  if (fits_uint32(l)) {
    launch_typed<Word, uint32_t>(dst, src, l, s);
  } else {
    launch_typed<Word, int64_t>(dst, src, l, s);
  }
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

void launch_copy(void* dst, const void* src, size_t elem_bytes, StridedLayout& l, cudaStream_t s) {
  LF_ASSERT(l.n_operands == 2, "launch_copy takes a layout of (dst, src)");
  const int64_t n = l.numel();
  if (n == 0) return;
  coalesce(l);
  if (l.rank == 0 || (l.rank == 1 && l.strides[0][0] == 1 && l.strides[1][0] == 1)) {
    LF_CUDA_CALL(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * elem_bytes,
                                 cudaMemcpyDeviceToDevice, s));
    return;
  }
  int64_t es = static_cast<int64_t>(elem_bytes);
  const int inner = l.rank - 1;
  // A transpose: the destination walks its innermost dim densely, the source walks another.
  if (l.strides[0][inner] == 1 && l.strides[1][inner] != 1 && l.sizes[inner] >= 8) {
    for (int p = 0; p < inner; ++p) {
      if (l.strides[1][p] != 1 || l.sizes[p] < 8) continue;
      switch (es) {
        case 1:
          return launch_transpose<uint8_t>(dst, src, l, p, s);
        case 2:
          return launch_transpose<uint16_t>(dst, src, l, p, s);
        case 4:
          return launch_transpose<uint32_t>(dst, src, l, p, s);
        case 8:
          return launch_transpose<uint64_t>(dst, src, l, p, s);
        default:
          break;
      }
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
  switch (es) {
    case 1:
      return launch_word<uint8_t>(dst, src, l, s);
    case 2:
      return launch_word<uint16_t>(dst, src, l, s);
    case 4:
      return launch_word<uint32_t>(dst, src, l, s);
    case 8:
      return launch_word<uint64_t>(dst, src, l, s);
    case 16:
      return launch_word<Vec16<uint32_t>>(dst, src, l, s);
    default:
      LF_ASSERT(false, "unsupported element size ", es);
  }
}

}  // namespace livefuse::cuda
