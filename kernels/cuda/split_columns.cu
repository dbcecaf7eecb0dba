// One thread per element of the source (grid-stride): find its part, store it densely there.
// The part search is a short scan (at most kMaxSplitParts entries, the same for a whole row).
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/launch_util.hpp"
#include "kernels/cuda/split_columns.hpp"

namespace livefuse::cuda {
namespace {

template <class Word>
__global__ void split_columns_kernel(SplitColumnsArgs a) {
  const int64_t total = a.rows * a.cols;
  const Word* src = static_cast<const Word*>(a.src);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / a.cols, c = i % a.cols;
    int p = 0;
    while (p + 1 < a.parts && c >= a.begin[p + 1]) ++p;
    const int64_t width = a.begin[p + 1] - a.begin[p];
    static_cast<Word*>(a.dst[p])[r * width + (c - a.begin[p])] = src[i];
  }
}

}  // namespace

void split_columns(const SplitColumnsArgs& a, void* stream) {
  const int64_t total = a.rows * a.cols;
  if (total == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const unsigned grid = grid_for(total);
  if (a.elem_bytes == 2)
    split_columns_kernel<uint16_t><<<grid, kEwThreads, 0, s>>>(a);
  else
    split_columns_kernel<uint32_t><<<grid, kEwThreads, 0, s>>>(a);
  LF_CUDA_LAUNCH_CHECK("split_columns");
}

}  // namespace livefuse::cuda
