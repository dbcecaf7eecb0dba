#include "kernels/cuda/attention_decode_splits.hpp"

#include <algorithm>
#include <atomic>

#include "kernels/cuda/attention_decode.hpp"
#include "kernels/cuda/split_space.hpp"

namespace livefuse::cuda {
namespace {
std::atomic<bool> g_meet_in_workspace{true};
std::atomic<int64_t> g_split_keys{0};
}  // namespace

void set_attention_decode_workspace(bool on) { g_meet_in_workspace.store(on, std::memory_order_relaxed); }
void set_attention_decode_split_keys(int64_t keys) { g_split_keys.store(keys, std::memory_order_relaxed); }

int choose_splits(const AttentionArgs& a, int64_t row_blocks, int64_t sms, int most) {
  const int64_t blocks = a.batch * a.heads * row_blocks;
  const int64_t by_sms = (2 * sms + blocks - 1) / blocks;
  const int64_t by_keys = std::max<int64_t>(1, a.sk / kMinSplitKeys);
  return static_cast<int>(std::clamp<int64_t>(std::min(by_sms, by_keys), 1, most));
}

// One wave at most: rounding up left a second wave of a few blocks (H200, Llama GQA 4096 keys:
// 17 splits, 272 blocks for 264 places, 26.7 us against 8 splits in clusters 23.4).
int workspace_splits(const AttentionArgs& a, int64_t row_blocks, int64_t resident, size_t part) {
  const int64_t tiles = a.batch * a.heads * row_blocks;
  if (!g_meet_in_workspace.load(std::memory_order_relaxed) || tiles > kSplitSpaceCounters) return 0;
  const int64_t min_keys = g_split_keys.load(std::memory_order_relaxed);
  const int64_t by_sms = resident / tiles;
  const int64_t by_keys = a.sk / (min_keys > 0 ? min_keys : kMinSplitKeys);
  const int64_t by_space = static_cast<int64_t>(kSplitSpaceBytes / part) / tiles;
  return static_cast<int>(std::clamp<int64_t>(std::min({by_sms, by_keys, by_space}), 0, kMaxMeetSplits));
}

}  // namespace livefuse::cuda
