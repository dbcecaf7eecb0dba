#pragma once
// How the decode attention (attention_decode.cu) splits a head's keys over blocks: in one
// thread-block cluster, or over more blocks that meet in the stream's workspace
// (split_space.hpp). Host code, apart from the kernels.
#include <cstddef>
#include <cstdint>

#include "kernels/attention_args.hpp"

namespace livefuse::cuda {

inline constexpr int kMaxSplits = 8;           // in a cluster: the portable cluster size
inline constexpr int kMaxMeetSplits = 64;      // meeting in the workspace
inline constexpr int64_t kMinSplitKeys = 128;  // a split shorter than this costs more than it hides

// Splits per head in a cluster: enough blocks for two per SM, no split shorter than
// kMinSplitKeys, at most `most`.
int choose_splits(const AttentionArgs& a, int64_t row_blocks, int64_t sms, int most);

// Splits per head through the workspace (0: none): at most one wave of blocks -- `resident` of
// them fit the device at once --, no split shorter than the minimum (kMinSplitKeys, or the
// benchmark's set_attention_decode_split_keys), as many partials of `part` bytes as the space
// holds; 0 when the workspace is switched off (set_attention_decode_workspace).
int workspace_splits(const AttentionArgs& a, int64_t row_blocks, int64_t resident, size_t part);

}  // namespace livefuse::cuda
