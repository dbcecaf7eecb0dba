#pragma once
// Decode attention on CUDA (kernels/cuda/attention_decode.cu): a few query rows per (batch,
// K/V head) against a long KV cache, the keys split over the blocks of a thread-block cluster, or
// over more blocks that meet in a per-stream workspace (split_space.hpp).
// launch_attention (attention.cu) tries it first and runs its general kernel when it declines.
#include <cstdint>

#include "kernels/attention_args.hpp"

namespace livefuse::cuda {

// kAttentionDecodeMaxRows (attention_args.hpp): the most rows the decode kernel takes.

// Enqueues the decode kernel on `stream` and returns true when `a` is a decode shape: at most
// kAttentionDecodeMaxRows rows, a float dtype, 0 < d, dv <= kAttentionMaxHeadDim and sk > 0.
// Returns false, enqueuing nothing, otherwise (or when disabled). Never synchronises.
bool launch_attention_decode(const AttentionArgs& a, void* stream);

// On by default. Off: launch_attention_decode declines every shape, so launch_attention runs
// its general kernel (the benchmark times both through the one entry point).
void set_attention_decode_enabled(bool on);

// Caps the splits a head's keys take (0, the default: the device's most, 8 with clusters); for
// the benchmark's comparison.
void set_attention_decode_max_splits(int most);
// Query rows a block takes at most: 1, 2, 4, or 0 (default) for the launch's own choice
// (two-row blocks for a GQA group of 2-4 rows while those blocks fit the SMs at once); for the
// benchmark.
void set_attention_decode_max_rows(int most);
// The lean build for blocks of one or two rows (on by default, and while LIVEFUSE_DECODE_LEAN is
// not 0): half the keys in flight per group and step, registers capped for two blocks an SM.
// Off: the wide build, one block an SM; for the benchmark's comparison.
void set_attention_decode_lean(bool on);
// More splits than a cluster holds, meeting in the stream's workspace, where they beat the
// cluster's (on by default). Off: clusters only, as before the workspace; for the benchmark.
void set_attention_decode_workspace(bool on);
// The fewest keys a split meeting in the workspace takes (0, the default: the cluster's 128);
// for the benchmark's sweep.
void set_attention_decode_split_keys(int64_t keys);

}  // namespace livefuse::cuda
