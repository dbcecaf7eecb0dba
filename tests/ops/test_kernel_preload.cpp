// The library kernels a plan launches are loaded on the planner thread before its first run
// (planner/service.cpp, preload_modules): CUDA loads a kernel lazily at its first launch, which
// stalled a decode token as plans first served. Each family's preload must load every kernel
// of every float dtype without leaving an error behind, and the kernels must then run as before
// (a GEMV with a norm inside against the one without, on normalized input).
#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/attention_decode.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/rotary_args.hpp"
#include "livefuse/ops.hpp"
#include "tests/ops/ops_util.hpp"

using namespace opstest;
namespace cu = livefuse::cuda;

LF_CUDA_TEST_CASE("kernel preload: every plan kernel of every float dtype loads without an error") {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    cu::preload_gemv_kernels(dt);
    cu::preload_attention_decode_kernels(dt);
    cu::preload_rotary_kernels(dt);
    CHECK(cudaGetLastError() == cudaSuccess);
    // Twice is harmless (the planner calls once a device and dtype; users may call again).
    cu::preload_gemv_kernels(dt);
    CHECK(cudaGetLastError() == cudaSuccess);
  }
  // Launches still work after the loads: a linear over one row through the GEMV.
  const Tensor x = rand_tensor({1, 256}, DType::f16, Device::cuda(0), 1, -1, 1);
  const Tensor w = rand_tensor({96, 256}, DType::f16, Device::cuda(0), 2, -1, 1);
  const Tensor y = lf::linear(x, w).to(Device::cpu());
  const Tensor want = lf::linear(x.to(Device::cpu()), w.to(Device::cpu()));
  CHECK(lftest::allclose(y.to_doubles(), want.to_doubles(), 1e-2, 1e-2));
}

#endif  // LIVEFUSE_HAS_CUDA
