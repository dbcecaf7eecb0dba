#pragma once
// ValueIndex: ValueId -> where the monitor last saw the value (its producer and its last use).
// Set-associative and lossy on purpose: a fixed table, no allocation after construction, the
// least recently touched way of a set is overwritten. What it must answer is local: "was this
// value used by one of the last few ops?" (matching) and "which recent event produced it?"
// (liveness); forgetting old entries only turns an answer into "far away", which is right.
#include <cstdint>
#include <vector>

#include "livefuse/tensor.hpp"
#include "monitor/hashing.hpp"

namespace livefuse::monitor {

inline constexpr uint32_t kNoStream = 0xffffffffu;

struct ValueEntry {
  ValueId id = 0;  // 0: free
  uint64_t touch = 0;
  uint64_t use_pos = 0;  // stream position of the last use
  uint64_t prod_pos = 0;
  uint32_t use_stream = kNoStream;
  uint32_t prod_stream = kNoStream;
  uint8_t use_input = 0;
  uint8_t use_rank = 0;  // earlier reads in the last use's run of near reads (stream_window.hpp)
  uint8_t prod_output = 0;
};

class ValueIndex {
 public:
  explicit ValueIndex(uint32_t sets_log2 = 13)
      : mask_((1u << sets_log2) - 1), table_((mask_ + 1) * kWays) {}

  ValueEntry* find(ValueId id) {
    ValueEntry* set = set_of(id);
    for (int w = 0; w < kWays; ++w)
      if (set[w].id == id) return &set[w];
    return nullptr;
  }

  // The entry for `id`, claiming the least recently touched way when absent (fields reset).
  ValueEntry& find_or_insert(ValueId id, uint64_t stamp) {
    ValueEntry* set = set_of(id);
    ValueEntry* victim = &set[0];
    for (int w = 0; w < kWays; ++w) {
      if (set[w].id == id) {
        set[w].touch = stamp;
        return set[w];
      }
      if (set[w].touch < victim->touch) victim = &set[w];
    }
    if (victim->id != 0) ++evictions_;
    *victim = ValueEntry{};
    victim->id = id;
    victim->touch = stamp;
    return *victim;
  }

  void erase(ValueEntry* e) {
    e->id = 0;
    e->touch = 0;
  }
  uint64_t evictions() const { return evictions_; }

 private:
  static constexpr int kWays = 4;
  ValueEntry* set_of(ValueId id) { return &table_[(mix64(id) & mask_) * kWays]; }

  uint32_t mask_;
  std::vector<ValueEntry> table_;
  uint64_t evictions_ = 0;
};

}  // namespace livefuse::monitor
