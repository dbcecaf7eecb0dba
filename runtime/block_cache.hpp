#pragma once
// Freed blocks kept for reuse, by key (a size class on the CPU; exact size and stream on CUDA),
// with a hard cap on the bytes kept: past it the oldest blocks go back to their allocator
// (DESIGN, "Bounded everything"). A take() gets the newest block of its key (warm in cache);
// eviction takes the oldest of all, so blocks of sizes no longer asked for leave first.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace livefuse {

struct BlockCacheCounters {
  uint64_t evictions = 0;       // blocks handed back to the allocator for the cap
  uint64_t bytes_returned = 0;  // ... and their bytes
};

template <class Key, class Hash>
class BlockCache {
 public:
  struct Block {
    void* ptr;
    size_t bytes;
    Key key;
  };

  // The newest block kept under `k`, or null.
  void* take(const Key& k) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = by_key_.find(k);
    if (it == by_key_.end() || it->second.empty()) return nullptr;
    const auto node = it->second.back();
    it->second.pop_back();
    void* p = node->ptr;
    cached_.fetch_sub(node->bytes, std::memory_order_relaxed);
    spare_.splice(spare_.end(), order_, node);
    return p;
  }

  // Keeps `b`, then hands the oldest blocks to `release` (under the lock) until at most `cap`
  // bytes are kept. `may_evict` false (a graph capture is open on this thread, and a free now
  // would enter the graph): the cap is enforced at the next put instead.
  template <class Release>
  void put(const Block& b, size_t cap, bool may_evict, Release&& release) {
    std::lock_guard<std::mutex> g(mu_);
    if (spare_.empty()) spare_.emplace_back();
    const auto node = spare_.begin();
    *node = b;
    order_.splice(order_.end(), spare_, node);
    auto& blocks = by_key_[b.key];
    blocks.push_back(node);
    cached_.fetch_add(b.bytes, std::memory_order_relaxed);
    if (may_evict) evict_locked(cap, release);
    while (spare_.size() > 256 + order_.size()) spare_.pop_back();
    // Keys whose blocks were all taken stay as empty entries (a steady loop takes and puts the
    // same keys, without a map node per free); a churn of sizes would pile them up forever.
    // Swept when the map has doubled since the last sweep: amortised O(1) per put.
    if (by_key_.size() > sweep_at_) {
      std::erase_if(by_key_, [](const auto& kv) { return kv.second.empty(); });
      sweep_at_ = 64 + 2 * by_key_.size();
    }
  }

  // Hands every block to `release`.
  template <class Release>
  void release_all(Release&& release) {
    std::lock_guard<std::mutex> g(mu_);
    for (const Block& b : order_) release(b);
    spare_.splice(spare_.end(), order_);
    by_key_.clear();
    sweep_at_ = 64;
    cached_.store(0, std::memory_order_relaxed);
  }

  size_t cached() const { return cached_.load(std::memory_order_relaxed); }
  BlockCacheCounters counters() const {
    std::lock_guard<std::mutex> g(mu_);
    return ctr_;
  }

 private:
  using Node = typename std::list<Block>::iterator;

  template <class Release>
  void evict_locked(size_t cap, Release& release) {
    while (cached_.load(std::memory_order_relaxed) > cap && !order_.empty()) {
      const auto node = order_.begin();
      // The oldest block of the whole cache is the oldest of its key: first in that key's list.
      auto& blocks = by_key_[node->key];
      blocks.erase(blocks.begin());
      cached_.fetch_sub(node->bytes, std::memory_order_relaxed);
      ++ctr_.evictions;
      ctr_.bytes_returned += node->bytes;
      release(*node);
      spare_.splice(spare_.end(), order_, node);
    }
  }

  mutable std::mutex mu_;
  std::list<Block> order_;  // kept blocks, oldest first
  // Nodes of blocks taken back, reused by later puts: no heap allocation per free once warm.
  std::list<Block> spare_;
  std::unordered_map<Key, std::vector<Node>, Hash> by_key_;  // per key, oldest first
  size_t sweep_at_ = 64;
  std::atomic<size_t> cached_{0};
  BlockCacheCounters ctr_;
};

}  // namespace livefuse
