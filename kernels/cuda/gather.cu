// Embedding: a warp per id copies one weight row (16-byte vectors when rows are contiguous and
// aligned). Rows are copied as bits: the output dtype is the weight's.
//
// Out-of-range ids. The CPU backend throws. Here the id is only known on the device, and
// reporting it at the call would need a host sync (copy the flag back, wait) on every
// embedding -- which would also make the op impossible to capture in a CUDA graph. So the
// kernel writes NaN into that output row (never a clamped, plausible-looking row) and records
// the id in a per-device flag; dispatch checks the flag after the call only when
// LIVEFUSE_VERIFY is set (and the stream is not capturing), turning it into an Error there.
#include <cstdint>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/launch_util.hpp"
#include "kernels/cuda/layout.hpp"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/pdl.hpp"
#include "kernels/cuda/offset_calc.cuh"

namespace livefuse::cuda {
namespace {

// [0] = count of bad ids, [1] = one of them.
__device__ unsigned long long g_gather_error[2];

struct GatherArgs {
  const void* w;
  const void* ids;
  void* out;
  DType ids_dt;
  int64_t num, dim, n_ids, w_rs, w_cs;
  int64_t es;         // element bytes (2 or 4)
  uint16_t nan_bits;  // NaN of the element type (2-byte types); 4-byte types use 0x7fc00000
  OffsetCalc<int64_t, 1> oc;
};

template <class Word>
__device__ __forceinline__ Word nan_word(const GatherArgs& a) {
  if constexpr (sizeof(Word) == 2) {
    return a.nan_bits;
  } else if constexpr (sizeof(Word) == 4) {
    return 0x7fc00000u;
  } else {  // 16-byte vector: fill every lane
    Word w;
    const uint32_t lane = a.es == 2 ? uint32_t{a.nan_bits} * 0x10001u : 0x7fc00000u;
    for (int t = 0; t < 4; ++t) w.v[t] = lane;
    return w;
  }
}

// Word: the unit copied per lane (uint16_t / uint32_t element, or Vec16<uint32_t> when vec).
template <class Word>
__global__ void __launch_bounds__(256) gather_kernel(const GatherArgs a) {
  pdl_wait();
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  constexpr bool kVec = sizeof(Word) == 16;
  for (int64_t r = int64_t{blockIdx.x} * (blockDim.x / 32) + threadIdx.x / 32; r < a.n_ids;
       r += warps) {
    int64_t off[1];
    a.oc.get(r, off);
    const int64_t id = load_as<int64_t>(a.ids, off[0], a.ids_dt);
    const bool bad = id < 0 || id >= a.num;
    if (bad && lane == 0) {
      atomicAdd(&g_gather_error[0], 1ull);
      g_gather_error[1] = static_cast<unsigned long long>(id);
    }
    const int64_t words = kVec ? a.dim * a.es / 16 : a.dim;
    Word* dst = static_cast<Word*>(a.out) + r * words;
    if (bad) {
      for (int64_t j = lane; j < words; j += 32) dst[j] = nan_word<Word>(a);
      continue;
    }
    if constexpr (kVec) {
      const Word* src =
          reinterpret_cast<const Word*>(static_cast<const char*>(a.w) + id * a.w_rs * a.es);
      for (int64_t j = lane; j < words; j += 32) dst[j] = src[j];
    } else {
      const Word* src = static_cast<const Word*>(a.w) + id * a.w_rs;
      for (int64_t j = lane; j < words; j += 32) dst[j] = src[j * a.w_cs];
    }
  }
}

uint16_t nan_bits_of(DType t) {
  switch (t) {
    case DType::f16:
      return 0x7e00;
    case DType::bf16:
      return 0x7fc0;
    default:
      return 0;
  }
}

}  // namespace

void launch_gather(const GatherPlan& p, cudaStream_t s) {
  if (p.n_ids == 0 || p.dim == 0) return;
  LF_ASSERT(is_floating(p.dtype), "embedding weight must be floating");
  GatherArgs a{};
  a.w = p.weight;
  a.ids = p.ids;
  a.out = p.out;
  a.ids_dt = p.ids_dtype;
  a.num = p.num;
  a.dim = p.dim;
  a.n_ids = p.n_ids;
  a.w_rs = p.w_row_stride;
  a.w_cs = p.w_col_stride;
  a.nan_bits = nan_bits_of(p.dtype);
  a.es = static_cast<int64_t>(dtype_size(p.dtype));
  a.oc = OffsetCalc<int64_t, 1>::make(p.ids_layout, 0);
  const size_t es = dtype_size(p.dtype);
  const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  const bool vec = p.w_col_stride == 1 && (p.dim * es) % 16 == 0 &&
                   (p.w_row_stride * es) % 16 == 0 && aligned(p.weight) && aligned(p.out);
  const int64_t blocks = (p.n_ids + 7) / 8;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(blocks, int64_t{1} << 30));
  if (vec) {
    launch_pdl("gather_kernel", gather_kernel<Vec16<uint32_t>>, grid, 256, 0, s, a);
  } else if (es == 2) {
    launch_pdl("gather_kernel", gather_kernel<uint16_t>, grid, 256, 0, s, a);
  } else {
    launch_pdl("gather_kernel", gather_kernel<uint32_t>, grid, 256, 0, s, a);
  }
}

int64_t take_gather_error(cudaStream_t s, int64_t* example) {
  unsigned long long host[2] = {0, 0};
  LF_CUDA_CALL(
      cudaMemcpyFromSymbolAsync(host, g_gather_error, sizeof(host), 0, cudaMemcpyDeviceToHost, s));
  LF_CUDA_CALL(cudaStreamSynchronize(s));
  if (host[0] != 0) {
    const unsigned long long zero[2] = {0, 0};
    LF_CUDA_CALL(
        cudaMemcpyToSymbolAsync(g_gather_error, zero, sizeof(zero), 0, cudaMemcpyHostToDevice, s));
    LF_CUDA_CALL(cudaStreamSynchronize(s));
  }
  if (example) *example = static_cast<int64_t>(host[1]);
  return static_cast<int64_t>(host[0]);
}

}  // namespace livefuse::cuda
