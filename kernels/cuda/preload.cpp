#include "kernels/cuda/preload.hpp"

#include <atomic>

namespace livefuse::cuda {

void preload_plan_kernels(DType dt) {
  static std::atomic<bool> done[3];
  const int slot = dt == DType::f32 ? 0 : dt == DType::f16 ? 1 : dt == DType::bf16 ? 2 : -1;
  if (slot < 0 || done[slot].load(std::memory_order_acquire) || done[slot].exchange(true)) return;
  preload_gemv_kernels(dt);
  preload_attention_decode_kernels(dt);
  preload_attention_mma_kernels(dt);
  preload_attention_decode_tc_kernels(dt);
  preload_attention_decode_stream_kernels(dt);
  preload_attention_f32_kernels(dt);
  preload_rotary_kernels(dt);
}

}  // namespace livefuse::cuda
