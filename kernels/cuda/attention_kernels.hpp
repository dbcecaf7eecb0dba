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

// How launch_attention_mma cuts the work: blocks of row_warps x key_groups warps, each warp 16
// query rows, each key group every key_groups-th tile of 64 keys (merged at the end). {4, 1}
// where its blocks take more than one round of the SMs' block slots; else the keys split in two
// ({2, 2} where 32-row blocks still give every SM two, else {1, 2}; d = 64 only, the two groups'
// tiles must fit 48 KiB of shared memory; LIVEFUSE_ATTENTION_SPLIT=0: never).
struct AttentionMmaConfig {
  int row_warps = 4, key_groups = 1;
};
AttentionMmaConfig attention_mma_config(const AttentionArgs& a);
// Tests and the benchmark: 1 keeps every launch at one key group, 2 splits the keys wherever
// allowed (d = 64, two tiles or more), 0 (default) chooses by the grid as above.
void force_attention_key_groups(int groups);
// The benchmark: where the keys split in two, blocks of 1 or 2 row warps (16 or 32 rows) instead
// of the grid's choice (0, default).
void force_attention_row_warps(int row_warps);

// attention_f32.cu: prefill in f32 on FMA units, all of a warp's rows against two keys a lane
// at once -- d = dv in {64, 128}, K and V rows 16-byte vectors, sk > 0, no append. The launch
// takes a non-empty case that fits; launch_attention tries it before the general kernel.
bool attention_f32_fits(const AttentionArgs& a);
void launch_attention_f32(const AttentionArgs& a, void* stream);
// Tests and the benchmark: 2 or 4 rows a warp for every launch; anything else (0, the default)
// chooses by the grid (launch_d).
void set_attention_f32_rows(int rows);

// attention_mma_decode.cu: decode shapes on tensor cores -- at most 16 rows (a K/V head's stacked
// query rows), the keys split over blocks meeting in the stream's workspace; what
// attention_mma_fits takes. Enqueues and returns true, or declines (false, nothing enqueued):
// another shape, switched off (LIVEFUSE_DECODE_TC, or force_attention_decode_tc), or a long cache
// on a stream being captured before it had a workspace. launch_attention tries it first.
bool launch_attention_decode_tc(const AttentionArgs& a, void* stream);
// Tests and the benchmark: 1 takes every shape that fits, 0 none, -1 (default) as
// LIVEFUSE_DECODE_TC says.
void force_attention_decode_tc(int on);

// attention_decode_stream.cu: decode shapes whose every key of a 128- or 256-key split is in
// flight at once, one key a lane (its note says why) -- f16/bf16, d = dv in {64, 128}, at most 8
// rows, K and V rows 16-byte vectors, an append only into a cache grown in place, at most 64 splits.
// Enqueues and returns true, or declines (false, nothing enqueued): another shape, fewer keys
// read (cached keys x batch x K/V heads) than LIVEFUSE_DECODE_STREAM_KEYS (or forced off), or a
// long cache on a stream being captured before it had a workspace. launch_attention tries it
// before the FMA kernel.
bool launch_attention_decode_stream(const AttentionArgs& a, void* stream);
// Tests and the benchmark: 1 takes every shape that fits at any length, 0 none, -1 (default) as
// LIVEFUSE_DECODE_STREAM_KEYS says.
void force_attention_decode_stream(int on);
// Tests and the benchmark: blocks of 4 or 8 warps (128- or 256-key splits) for every launch, 12
// (384-key splits) where the head is d = 64, or 16 (512-key splits) where it is d = 64 with up
// to 4 rows (else as by default); 0 (default) chooses by the grid and the keys (launch_warps).
void set_attention_decode_stream_warps(int warps);
// Tests and the benchmark: the most splits of a head that meet in a cluster (up to 8; 0 or 1:
// never a cluster, always the workspace); -1 (default): 8 where the kernel's rule takes one.
void set_attention_decode_stream_cluster(int most);

// Calls of launch_attention (attention_args.hpp) by the kernel that took them -- launched or
// recorded into a graph -- since the process began; the report's "cuda.attention" counters
// (attention_counts.cpp): which kernel a decode step's attention ran on, and of the FMA and
// streaming decode kernels' launches those that loaded their first keys before their PDL wait
// (early_kv); prefill_f32: attention_f32.cu's.
struct AttentionLaunchCounts {
  uint64_t decode_tc = 0, decode_fma = 0, mma = 0, general = 0, decode_stream = 0, early_kv = 0;
  uint64_t prefill_f32 = 0;
};
AttentionLaunchCounts attention_launch_counts();

// attention_append.cpp: AttentionArgs::first_new's rows into k_dst / v_dst (the old ones too when
// copy_old), one launch of copies; launch_attention's way for kernels that do not append.
void launch_append_copies(const AttentionArgs& a, void* stream);

// attention.cu: any float dtype, any strides, d and dv up to kAttentionMaxHeadDim; f32 FMA.
void launch_attention_general(const AttentionArgs& a, void* stream);

}  // namespace livefuse::cuda
