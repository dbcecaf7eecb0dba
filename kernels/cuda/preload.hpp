#pragma once
// Loading the kernels plans launch before the first plan runs.
//
// [ Note -- kernels loaded before the first plan ]
// CUDA loads a kernel lazily, at its first launch. The kernels a decode plan launches -- GEMVs
// with a norm, an epilogue or a gate inside, the fused attention, the rotary template -- are
// ones eager calls never launched, so they loaded inside the token where the plan first ran: a
// GPT-2 warm-up token of 2.4-2.9x eager's (H200, session 26; 1.5-1.8x with
// CUDA_MODULE_LOADING=EAGER). Loading them on the planner thread was worse (4.6-7.2x): the loads
// held up the program's own launches token after token. So they load on the program's thread,
// once a process and dtype, at its first eager product of that dtype in a mode that plans (the
// prompt's forward, before any decode token): ~60 kernels a dtype.
#include "livefuse/dtype.hpp"

namespace livefuse::cuda {

// Loads every plan kernel of `dt` (f32, f16, bf16) onto the current device, once a process and
// dtype; other dtypes, and calls after the first, return at once. Load errors are left for the
// launches to report.
void preload_plan_kernels(DType dt);

// Each kernel family's part (in its own .cu, where its templates are).
void preload_gemv_kernels(DType dt);
void preload_attention_decode_kernels(DType dt);
void preload_attention_mma_kernels(DType dt);
void preload_attention_decode_tc_kernels(DType dt);
void preload_attention_decode_stream_kernels(DType dt);
void preload_attention_f32_kernels(DType dt);
void preload_rotary_kernels(DType dt);

}  // namespace livefuse::cuda
