#pragma once
// StructureTable: every distinct sequence seen on each stream, keyed by (stream, signature),
// with its decaying count, shape pattern and liveness; decides hot and cold.
//
// Counting: only sequences whose every op continued an earlier occurrence arrive here (so the
// very first occurrence never does: it defines the program points). An occurrence counts when
// its program-point path (stream_window.hpp) is one the structure already knows; the first to
// arrive creates the structure and its path; one with a new path registers it (up to kPaths,
// oldest replaced) without counting. So the count is the number of repeats of one path.
// Twelve layers share one path, so they count; two unrelated stretches of code that happen to
// hash alike (random streams) do not, because their paths differ.
#include <array>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "monitor/canon.hpp"
#include "monitor/options.hpp"

namespace livefuse::monitor {

class StructureTable {
 public:
  explicit StructureTable(const MonitorOptions& o) : opts_(o) {}

  // One occurrence of the sequence beginning at `begin` of `w`, canonicalised in `c`.
  void observe(StreamWindow& w, uint64_t begin, uint64_t path_hash, const Canon& c,
               uint32_t now_epoch);
  // One occurrence that a plan served, known only by its signature (no shapes, no liveness:
  // those came with the occurrences the plan was made from). False when it is not tracked.
  bool observe_served(uint64_t signature, uint32_t stream, uint32_t now_epoch, uint64_t now_ns);
  // The structure (signature, stream), and in `tuple` the dims of its shape tuple whose
  // ShapeTupleKey (runtime/plan.hpp) is `tuple_key`; nullptr when either is not tracked.
  // Counted occurrences of (signature, stream); 0 when it is not tracked.
  uint64_t occurrences(uint64_t signature, uint32_t stream) const {
    auto it = map_.find(Key{signature, stream});
    return it == map_.end() ? 0 : it->second.cand.occurrences;
  }
  // A served window of a family's length `family_n` (>= 0) is found by the family when its
  // tuple is not kept as such: `tuple` then points to a scratch copy, valid until the next call.
  const Candidate* find(uint64_t signature, uint32_t stream, uint64_t tuple_key,
                        const std::vector<int64_t>** tuple, int64_t family_n = -1) const;
  // Decays every count to `epoch_of(stream)`; hot ones below hot/2 go cold, dead ones go.
  template <class EpochOf>
  void sweep(EpochOf epoch_of);
  // Drops every structure of `stream` (its window was evicted).
  void drop_stream(uint32_t stream);
  template <class EpochOf>
  std::vector<Candidate> snapshot(bool hot_only, EpochOf epoch_of);

  std::vector<Candidate> take_emitted() { return std::exchange(emitted_, {}); }
  std::vector<std::pair<uint64_t, uint32_t>> take_cooled() { return std::exchange(cooled_, {}); }

  size_t size() const { return map_.size(); }
  uint64_t hot_count() const;
  uint64_t evictions() const { return evictions_; }
  uint64_t shape_evictions() const { return shape_evictions_; }
  uint64_t families() const { return n_families_; }
  uint64_t emitted() const { return n_emitted_; }
  uint64_t cooled() const { return n_cooled_; }

 private:
  static constexpr int kPaths = 4;
  struct Key {
    uint64_t signature;
    uint32_t stream;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return k.signature ^ (uint64_t{k.stream} * 0x9e3779b97f4a7c15ull);
    }
  };
  struct Structure {
    Candidate cand;
    std::vector<uint64_t> tuple_hashes;  // parallel to cand.shapes.tuples
    std::vector<uint64_t> tuple_keys;    // ShapeTupleKey of each, parallel too
    std::array<uint64_t, kPaths> paths{};
    uint8_t n_paths = 0;
    uint8_t next_path = 0;
    float count = 0;
    uint32_t epoch = 0;
    // Settling (the Note in structure_table.cpp): where the last counted occurrence began and
    // how far that was from the one before, the occurrences counted since the shape mix last
    // changed, whether one of them broke the run's rhythm, and whether a hand-over is owed.
    uint64_t last_begin = 0;
    uint64_t period = 0;
    uint32_t stable = 0;
    uint32_t waited = 0;  // occurrences since a hand-over became owed
    bool broke = false;
    bool owed = false;
  };

  void create(Structure& s, StreamWindow& w, uint64_t begin, const Canon& c);
  bool add_shape(Structure& s, const Canon& c);  // true when the tuple is new
  // Fits a family through the new tuple and the kept ones; true when one was made.
  bool try_family(Structure& s);
  void drop_tuple(Structure& s, size_t t);
  void add_liveness(Structure& s, const Canon& c);
  void decay(Structure& s, uint32_t epoch);
  void evict_coldest(const Key& keep);
  void go_cold(Structure& s);
  void count(Structure& s, bool new_shape, bool paused);

  MonitorOptions opts_;
  std::unordered_map<Key, Structure, KeyHash> map_;
  mutable std::vector<int64_t> family_tuple_;  // find()'s scratch
  std::vector<Candidate> emitted_;
  std::vector<std::pair<uint64_t, uint32_t>> cooled_;
  uint64_t evictions_ = 0, shape_evictions_ = 0, n_emitted_ = 0, n_cooled_ = 0, n_families_ = 0;
};

template <class EpochOf>
void StructureTable::sweep(EpochOf epoch_of) {
  for (auto it = map_.begin(); it != map_.end();) {
    Structure& s = it->second;
    decay(s, epoch_of(s.cand.stream));
    if (s.cand.hot && s.count < 0.5f * static_cast<float>(opts_.hot)) go_cold(s);
    if (!s.cand.hot && s.count < 1.0f / 64) {
      it = map_.erase(it);
      continue;
    }
    ++it;
  }
}

template <class EpochOf>
std::vector<Candidate> StructureTable::snapshot(bool hot_only, EpochOf epoch_of) {
  sweep(epoch_of);
  std::vector<Candidate> out;
  for (auto& [k, s] : map_) {
    if (hot_only && !s.cand.hot) continue;
    out.push_back(s.cand);
    out.back().count = s.count;
  }
  return out;
}

}  // namespace livefuse::monitor
