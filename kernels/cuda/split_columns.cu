// Column split in words: the widest word (16, 8, 4 or 2 bytes) that every part's width, the
// source's row and every address are multiples of -- for Q/K/V of BERT-base (768 f16 columns a
// part) 16 bytes, eight elements a thread -- one thread per word (grid-stride), 32-bit indices
// when they fit. The part search is a short scan (at most kMaxSplitParts entries).
#include <cstdint>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/launch_util.hpp"
#include "kernels/cuda/split_columns.hpp"

namespace livefuse::cuda {
namespace {

// `begin` and `cols` in words.
template <class Word, class Idx>
__global__ void __launch_bounds__(kEwThreads) split_columns_kernel(SplitColumnsArgs a, Idx cols) {
  const Idx total = static_cast<Idx>(a.rows) * cols;
  const Word* src = static_cast<const Word*>(a.src);
  for (Idx i = blockIdx.x * Idx{blockDim.x} + threadIdx.x; i < total; i += Idx{gridDim.x} * blockDim.x) {
    const Idx r = i / cols, c = i - r * cols;
    int p = 0;
    while (p + 1 < a.parts && c >= static_cast<Idx>(a.begin[p + 1])) ++p;
    const Idx b = static_cast<Idx>(a.begin[p]), width = static_cast<Idx>(a.begin[p + 1]) - b;
    static_cast<Word*>(a.dst[p])[r * width + (c - b)] = src[i];
  }
}

template <class Word>
void launch_words(SplitColumnsArgs a, int64_t word_bytes, cudaStream_t s) {
  const int64_t f = word_bytes / a.elem_bytes;  // elements a word
  const int64_t cols = a.cols / f;
  for (int p = 0; p <= a.parts; ++p) a.begin[p] /= f;
  const int64_t total = a.rows * cols;
  const unsigned grid = grid_for(total);
  if (total < (int64_t{1} << 31))
    split_columns_kernel<Word, uint32_t><<<grid, kEwThreads, 0, s>>>(a, static_cast<uint32_t>(cols));
  else
    split_columns_kernel<Word, int64_t><<<grid, kEwThreads, 0, s>>>(a, cols);
  LF_CUDA_LAUNCH_CHECK("split_columns");
}

// The widest word that every column count, row and address of `a` is a multiple of.
int64_t word_of(const SplitColumnsArgs& a) {
  for (int64_t w = 16; w > a.elem_bytes; w /= 2) {
    bool ok = (a.cols * a.elem_bytes) % w == 0 && reinterpret_cast<uintptr_t>(a.src) % w == 0;
    for (int p = 0; p < a.parts && ok; ++p)
      ok = ((a.begin[p + 1] - a.begin[p]) * a.elem_bytes) % w == 0 &&
           (a.begin[p] * a.elem_bytes) % w == 0 && reinterpret_cast<uintptr_t>(a.dst[p]) % w == 0;
    if (ok) return w;
  }
  return a.elem_bytes;
}

}  // namespace

void split_columns(const SplitColumnsArgs& a, void* stream) {
  if (a.rows * a.cols == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (word_of(a)) {
    case 16: return launch_words<Vec16<uint32_t>>(a, 16, s);
    case 8: return launch_words<uint64_t>(a, 8, s);
    case 4: return launch_words<uint32_t>(a, 4, s);
    default: return launch_words<uint16_t>(a, 2, s);
  }
}

}  // namespace livefuse::cuda
