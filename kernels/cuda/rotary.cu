// The rotary template on CUDA (kernels/rotary_args.hpp): a thread per (row, column pair c,
// c + h) reads x, cos and sin at both columns and writes both results, so rotate_half(x) is
// never stored -- eager's slice, neg, slice, concat and the two muls and the add (4 launches
// of a Llama decode layer after elementwise fusion) become one, for q and k together (the
// parts: blockIdx.y). Products and the sum are rounded to the dtype as eager's ops round them,
// with __fmul_rn / __fadd_rn so that nvcc contracts nothing into an FMA.
#include <cstdint>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/launch_util.hpp"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/pdl.hpp"
#include "kernels/cuda/preload.hpp"
#include "kernels/rotary_args.hpp"

namespace livefuse::cuda {
namespace {

constexpr int kThreads = 128;

struct RotaryLaunch {
  RotaryArgs part[kRotaryMaxParts];
};

template <class S>
__global__ void __launch_bounds__(kThreads) rotary_kernel(const RotaryLaunch l) {
  using Bits = typename S::Bits;
  pdl_wait();
  const RotaryArgs& a = l.part[blockIdx.y];
  const int64_t h = a.d / 2, items = a.rows() * h;
  for (int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x; i < items;
       i += int64_t{gridDim.x} * kThreads) {
    const int64_t r = i / h, c = i % h;
    const int64_t i2 = r % a.n[2], i1 = (r / a.n[2]) % a.n[1], i0 = r / (a.n[2] * a.n[1]);
    const Bits* x = static_cast<const Bits*>(a.x) + i0 * a.x_st[0] + i1 * a.x_st[1] + i2 * a.x_st[2];
    const Bits* cs =
        static_cast<const Bits*>(a.cos) + i0 * a.cos_st[0] + i1 * a.cos_st[1] + i2 * a.cos_st[2];
    const Bits* sn =
        static_cast<const Bits*>(a.sin) + i0 * a.sin_st[0] + i1 * a.sin_st[1] + i2 * a.sin_st[2];
    const float lo = S::to(x[c * a.x_st[3]]), hi = S::to(x[(c + h) * a.x_st[3]]);
    const float c_lo = S::to(cs[c * a.cos_st[3]]), c_hi = S::to(cs[(c + h) * a.cos_st[3]]);
    const float s_lo = S::to(sn[c * a.sin_st[3]]), s_hi = S::to(sn[(c + h) * a.sin_st[3]]);
    Bits* o = static_cast<Bits*>(a.out) + r * a.d;
    o[c] = S::from(rotate_half_element<S>(lo, hi, c_lo, s_lo, true));
    o[c + h] = S::from(rotate_half_element<S>(hi, lo, c_hi, s_hi, false));
  }
}

}  // namespace

void preload_rotary_kernels(DType dt) {
  with_float_storage(dt, [](auto tag) { load_kernel(rotary_kernel<decltype(tag)>); });
}

void launch_rotary(const RotaryArgs* parts, int count, void* stream) {
  LF_ASSERT(count >= 1 && count <= kRotaryMaxParts, "rotary: ", count, " parts");
  RotaryLaunch l{};
  int64_t most = 0;
  int used = 0;
  for (int p = 0; p < count; ++p) {
    LF_ASSERT(parts[p].dtype == parts[0].dtype && parts[p].d % 2 == 0, "rotary: parts disagree");
    if (parts[p].rows() == 0 || parts[p].d == 0) continue;
    l.part[used++] = parts[p];
    most = std::max(most, parts[p].rows() * (parts[p].d / 2));
  }
  if (used == 0) return;
  const dim3 grid(grid_for(most, kThreads), static_cast<unsigned>(used));
  const auto s = static_cast<cudaStream_t>(stream);
  switch (parts[0].dtype) {
    case DType::f32: return launch_pdl("rotary_kernel", rotary_kernel<F32>, grid, kThreads, 0, s, l);
    case DType::f16: return launch_pdl("rotary_kernel", rotary_kernel<F16>, grid, kThreads, 0, s, l);
    case DType::bf16: return launch_pdl("rotary_kernel", rotary_kernel<BF16>, grid, kThreads, 0, s, l);
    default: LF_ASSERT(false, "rotary: dtype ", dtype_name(parts[0].dtype));
  }
}

}  // namespace livefuse::cuda
