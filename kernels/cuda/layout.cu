// Strided copies. One kernel per element size (1, 2, 4, 8 bytes) and index width; dims are
// coalesced first, so a concat along the last dim is a rank-2 copy and a dense copy is a
// cudaMemcpyAsync.
#include <cstdint>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/launch_util.hpp"
#include "kernels/cuda/layout.hpp"
#include "kernels/cuda/offset_calc.cuh"

namespace livefuse::cuda {
namespace {

template <class Word, class Idx>
struct CopyArgs {
  Word* dst;
  const Word* src;
  Idx n;
  OffsetCalc<Idx, 2> oc;
};

template <class Word, class Idx>
__global__ void __launch_bounds__(kEwThreads) copy_kernel(const CopyArgs<Word, Idx> a) {
  const Idx step = static_cast<Idx>(gridDim.x) * blockDim.x;
  for (Idx i = static_cast<Idx>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += step) {
    Idx off[2];
    a.oc.get(i, off);
    a.dst[off[0]] = a.src[off[1]];
  }
}

template <class Word, class Idx>
void launch_typed(void* dst, const void* src, const StridedLayout& l, cudaStream_t s) {
  CopyArgs<Word, Idx> a{};
  a.dst = static_cast<Word*>(dst);
  a.src = static_cast<const Word*>(src);
  a.n = static_cast<Idx>(l.numel());
  a.oc = OffsetCalc<Idx, 2>::make(l, 0);
  copy_kernel<Word, Idx><<<grid_for(l.numel()), kEwThreads, 0, s>>>(a);
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
  switch (elem_bytes) {
    case 1: return launch_word<uint8_t>(dst, src, l, s);
    case 2: return launch_word<uint16_t>(dst, src, l, s);
    case 4: return launch_word<uint32_t>(dst, src, l, s);
    case 8: return launch_word<uint64_t>(dst, src, l, s);
    default: LF_ASSERT(false, "unsupported element size ", elem_bytes);
  }
}

}  // namespace livefuse::cuda
