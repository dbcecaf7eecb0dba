#include "kernels/cpu/gemm_pack_cache.hpp"

#include <functional>

#include "livefuse/config.hpp"
#include "runtime/inspect_registry.hpp"

namespace livefuse::cpu {

namespace {
bool same_owner(const std::weak_ptr<Storage>& w, const std::shared_ptr<Storage>& s) {
  return !w.owner_before(s) && !s.owner_before(w);
}
inline size_t mix(size_t h, uint64_t v) {
  return (h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)));
}
}  // namespace

size_t PackCache::Hash::operator()(const MapKey& m) const {
  size_t h = std::hash<const void*>()(m.storage);
  h = mix(h, m.key.byte_offset);
  h = mix(h, static_cast<uint64_t>(m.key.K));
  h = mix(h, static_cast<uint64_t>(m.key.N));
  h = mix(h, static_cast<uint64_t>(m.key.rs));
  h = mix(h, static_cast<uint64_t>(m.key.cs));
  return mix(h, static_cast<uint64_t>(m.key.dtype));
}

void PackCache::drop(Lru::iterator it, bool evicted) {
  c_.bytes -= bytes_of(*it);
  if (evicted) {
    ++c_.evictions;
    if (it->panels && !it->used) ++wasted_;
  }
  index_.erase(it->key);
  lru_.erase(it);
}

// Over the byte cap the least recently used pack goes (sightings hold no bytes and stay); over
// the entry cap, the least recently used entry of either kind.
void PackCache::evict_to(size_t cap_bytes, size_t cap_entries) {
  while (lru_.size() > cap_entries) drop(std::prev(lru_.end()), true);
  auto it = lru_.end();
  while (c_.bytes > cap_bytes && it != lru_.begin()) {
    --it;
    if (!it->panels) continue;
    auto victim = it++;
    drop(victim, true);
  }
}

PackedPanels PackCache::find(const std::shared_ptr<Storage>& s, const PackKey& k, bool* admit) {
  *admit = false;
  std::lock_guard<std::mutex> lock(mu_);
  const MapKey mk{s.get(), k};
  auto it = index_.find(mk);
  if (s->may_change()) {
    ++c_.uncacheable;
    if (it != index_.end()) {
      ++c_.stale;
      drop(it->second, false);
    }
    return nullptr;
  }
  const uint64_t version = s->version.load(std::memory_order_acquire);
  if (it != index_.end()) {
    Entry& e = *it->second;
    if (!same_owner(e.owner, s) || e.version != version) {
      // The address belongs to a new storage now, or livefuse wrote this one in place.
      if (e.panels) ++c_.stale;
      drop(it->second, false);
      it = index_.end();
    }
  }
  if (it != index_.end() && it->second->panels) {
    lru_.splice(lru_.begin(), lru_, it->second);
    it->second->used = true;
    ++c_.hits;
    ++recent_hits_;
    return it->second->panels;
  }
  ++c_.misses;
  if (it != index_.end()) {  // the second sighting
    // Churn: most packs leave unused (a working set above the cap, cycled): stop packing whole.
    if (wasted_ > recent_hits_ + 16) {
      ++c_.declined;
      lru_.splice(lru_.begin(), lru_, it->second);
      return nullptr;
    }
    *admit = true;
    return nullptr;
  }
  lru_.push_front(Entry{mk, s, version, nullptr, false});
  index_[mk] = lru_.begin();
  evict_to(cap_bytes_, kMaxEntries);
  return nullptr;
}

void PackCache::insert(const std::shared_ptr<Storage>& s, const PackKey& k, PackedPanels panels) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t bytes = panels->size() * sizeof(float);
  if (bytes > cap_bytes_) return;
  const MapKey mk{s.get(), k};
  if (auto it = index_.find(mk); it != index_.end()) drop(it->second, false);
  // Packs of freed storage cannot be hit again: give their bytes back before evicting live ones.
  for (auto it = lru_.begin(); it != lru_.end();) {
    auto next = std::next(it);
    if (it->owner.expired()) {
      if (it->panels) ++c_.stale;
      drop(it, false);
    }
    it = next;
  }
  lru_.push_front(Entry{mk, s, s->version.load(std::memory_order_acquire), std::move(panels), false});
  index_[mk] = lru_.begin();
  c_.bytes += bytes;
  ++c_.admitted;
  evict_to(cap_bytes_, kMaxEntries);
}

PackCache::Counters PackCache::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counters c = c_;
  c.entries = 0;
  for (const Entry& e : lru_) c.entries += e.panels != nullptr;
  return c;
}

void PackCache::set_capacity(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  cap_bytes_ = bytes;
  wasted_ = recent_hits_ = 0;
  evict_to(cap_bytes_, kMaxEntries);
}

void PackCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  lru_.clear();
  index_.clear();
  c_.bytes = 0;
  wasted_ = recent_hits_ = 0;
}

PackCache& pack_cache() {
  // Leaked: GEMMs on other threads may still run while statics are destroyed at exit.
  static PackCache* c = [] {
    auto* cache = new PackCache();
    register_counter_source("cpu.gemm_pack", [cache](CounterSink& sink) {
      const PackCache::Counters n = cache->counters();
      sink.add("hits", n.hits);
      sink.add("misses", n.misses);
      sink.add("admitted", n.admitted);
      sink.add("evictions", n.evictions);
      sink.add("stale", n.stale);
      sink.add("uncacheable", n.uncacheable);
      sink.add("declined", n.declined);
      sink.add("bytes", n.bytes);
      sink.add("entries", n.entries);
    });
    return cache;
  }();
  return *c;
}

}  // namespace livefuse::cpu

namespace livefuse::cpu {
bool pack_cache_enabled() { return config().pack_cache; }
}  // namespace livefuse::cpu
