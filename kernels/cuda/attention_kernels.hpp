#pragma once
// The CUDA attention kernels behind launch_attention (kernels/attention_args.hpp), declared
// apart so that the kernel benchmark (bench/attention_kernel.cpp) can time each one.
#include "kernels/attention_args.hpp"

namespace livefuse::cuda {

// attention_mma.cu: flash-attention-2 on tensor cores (sm_80+). f16/bf16, d = dv in {64, 128},
// sk > 0, q/k/v rows unit-stride and 16-byte aligned, out pairs 4-byte aligned. The launch
// takes a non-empty case that fits.
bool attention_mma_fits(const AttentionArgs& a);
void launch_attention_mma(const AttentionArgs& a, void* stream);

// attention.cu: any float dtype, any strides, d and dv up to kAttentionMaxHeadDim; f32 FMA.
void launch_attention_general(const AttentionArgs& a, void* stream);

}  // namespace livefuse::cuda
