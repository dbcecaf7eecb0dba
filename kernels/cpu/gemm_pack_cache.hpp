#pragma once
// Packed GEMM B operands kept across calls. A linear's weight is the same matrix call after
// call, yet the blocked GEMM packs it into panels on every call (and once per row tile of the
// output): ~20% of the CPU demo's time. The cache keeps the packed form of a B operand whose
// memory cannot change behind livefuse's back (Storage::may_change() false).
//
// [ Note -- what identifies a cached pack ]
// The storage itself, held as a weak_ptr and compared by owner (control block), never by
// address: a freed block that the pool hands out again is a new Storage, so it misses. Within
// the storage: the byte offset of the view, K, N, the row and column strides and the dtype.
// With it the storage's `version` at packing time: an in-place livefuse write bumps it, and a
// pack made before is dropped. A storage that became exposed and mutable (data_ptr() without
// mark_immutable) is never served and its pack is dropped.
//
// Admission: an operand is packed whole and kept on its second sighting, so activations (a
// fresh storage every call: attention's K and V) never displace weights. Bounded by bytes and
// by entries, least recently used first out; a cache that only churns (packs evicted unused)
// stops admitting, and the GEMM packs tile by tile as without it.
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "livefuse/dtype.hpp"
#include "livefuse/tensor.hpp"

namespace livefuse::cpu {

struct PackKey {
  size_t byte_offset = 0;  // of the operand's first element in its storage
  int64_t K = 0, N = 0, rs = 0, cs = 0;
  DType dtype = DType::f32;
  bool operator==(const PackKey&) const = default;
};

using PackedPanels = std::shared_ptr<const std::vector<float>>;

class PackCache {
 public:
  struct Counters {
    uint64_t hits = 0, misses = 0, admitted = 0, evictions = 0;
    uint64_t stale = 0;        // entries dropped: storage freed, version bumped or now mutable
    uint64_t uncacheable = 0;  // lookups of storage the program may change
    uint64_t declined = 0;     // second sightings not admitted (churn)
    size_t bytes = 0, entries = 0;
  };
  static constexpr size_t kDefaultCapBytes = size_t{256} << 20;
  static constexpr size_t kMaxEntries = 1024;

  explicit PackCache(size_t cap_bytes = kDefaultCapBytes) : cap_bytes_(cap_bytes) {}

  // The panels packed for (storage, key), or null. On a null return *admit says whether the
  // caller should pack the operand whole and insert() it.
  PackedPanels find(const std::shared_ptr<Storage>& s, const PackKey& k, bool* admit);
  void insert(const std::shared_ptr<Storage>& s, const PackKey& k, PackedPanels panels);

  Counters counters() const;
  void set_capacity(size_t bytes);  // evicts down to it; also re-opens admission
  void clear();

 private:
  struct MapKey {
    const Storage* storage;
    PackKey key;
    bool operator==(const MapKey&) const = default;
  };
  struct Hash {
    size_t operator()(const MapKey& m) const;
  };
  struct Entry {
    MapKey key;
    std::weak_ptr<Storage> owner;
    uint64_t version = 0;
    PackedPanels panels;  // null: seen once, not packed
    bool used = false;    // served at least once since packed
  };
  using Lru = std::list<Entry>;  // most recent first

  void drop(Lru::iterator it, bool evicted);
  void evict_to(size_t cap_bytes, size_t cap_entries);
  static size_t bytes_of(const Entry& e) { return e.panels ? e.panels->size() * sizeof(float) : 0; }

  mutable std::mutex mu_;
  Lru lru_;
  std::unordered_map<MapKey, Lru::iterator, Hash> index_;
  size_t cap_bytes_;
  // Since the last clear() / set_capacity(): packs evicted without a single hit, and hits.
  uint64_t wasted_ = 0, recent_hits_ = 0;
  Counters c_;
};

// The process's cache, used by the CPU GEMM.
PackCache& pack_cache();
// LIVEFUSE_PACK_CACHE=0 packs every B operand per call, as before the cache (for comparison).
bool pack_cache_enabled();

}  // namespace livefuse::cpu
