#include "monitor/structure_table.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/plan.hpp"

namespace livefuse::monitor {

void StructureTable::decay(Structure& s, uint32_t epoch) {
  if (epoch == s.epoch) return;
  const uint32_t d = epoch > s.epoch ? epoch - s.epoch : 0;
  s.count = std::ldexp(s.count, -static_cast<int>(std::min<uint32_t>(d, 100)));
  s.epoch = epoch;
}

void StructureTable::go_cold(Structure& s) {
  s.cand.hot = false;
  cooled_.emplace_back(s.cand.signature, s.cand.stream);
  ++n_cooled_;
}

void StructureTable::evict_coldest(const Key& keep) {
  auto victim = map_.end();
  for (auto it = map_.begin(); it != map_.end(); ++it) {
    if (it->first == keep) continue;
    // Counts of different streams are on different clocks; good enough to pick a victim.
    if (victim == map_.end() || it->second.count < victim->second.count) victim = it;
  }
  if (victim == map_.end()) return;
  if (victim->second.cand.hot) go_cold(victim->second);
  map_.erase(victim);
  ++evictions_;
}

void StructureTable::create(Structure& s, StreamWindow& w, uint64_t begin, const Canon& c) {
  Candidate& cand = s.cand;
  cand.signature = c.signature;
  cand.stream = w.stream();
  cand.externals = c.externals;
  cand.ops.resize(c.n_ops);
  for (uint32_t k = 0; k < c.n_ops; ++k) {
    const RingEvent& r = *w.event_at(begin + k);
    const TraceEvent& ev = r.ev;
    CandidateOp& op = cand.ops[k];
    op.op = ev.op;
    op.attrs = ev.attrs;
    op.attrs_hash = r.attrs_hash;
    op.inputs.assign(c.wires.begin() + c.wire_begin[k], c.wires.begin() + c.wire_begin[k + 1]);
    for (int m = 0; m < ev.n_in; ++m) {
      op.in_dtypes.push_back(static_cast<DType>(ev.in_dtype[m]));
      op.in_ranks.push_back(ev.in_rank[m]);
    }
    for (int o = 0; o < ev.n_out; ++o) {
      op.out_dtypes.push_back(static_cast<DType>(ev.out_dtype[o]));
      op.out_ranks.push_back(ev.out_rank[o]);
    }
    for (uint32_t f = c.out_begin[k]; f < c.out_begin[k + 1]; ++f) {
      ValueLiveness l;
      l.op = static_cast<uint16_t>(k);
      l.output = static_cast<uint8_t>(f - c.out_begin[k]);
      l.internal_uses = c.internal_uses[f];
      cand.liveness.push_back(l);
    }
  }
  cand.shapes.layout = Canonicalizer::layout(c);
  cand.shapes.varying.assign(cand.shapes.layout.size(), false);
  cand.first_seen_ns = c.first_ns;
}

bool StructureTable::add_shape(Structure& s, const Canon& c) {
  ShapePattern& sp = s.cand.shapes;
  for (size_t t = 0; t < s.tuple_hashes.size(); ++t)
    if (s.tuple_hashes[t] == c.tuple_hash && sp.tuples[t].dims == c.tuple) {
      ++sp.tuples[t].count;
      // Keep the most frequent first (one bubble step is enough to converge).
      if (t > 0 && sp.tuples[t].count > sp.tuples[t - 1].count) {
        std::swap(sp.tuples[t], sp.tuples[t - 1]);
        std::swap(s.tuple_hashes[t], s.tuple_hashes[t - 1]);
        std::swap(s.tuple_keys[t], s.tuple_keys[t - 1]);
      }
      return false;
    }
  if (!sp.tuples.empty()) {
    const std::vector<int64_t>& ref = sp.tuples.front().dims;
    for (size_t d = 0; d < ref.size() && d < c.tuple.size(); ++d)
      if (ref[d] != c.tuple[d]) sp.varying[d] = true;
  }
  if (sp.tuples.size() >= opts_.max_shape_tuples) {
    // The least counted goes (ties: the newest, so a steady set is not churned by one-offs).
    size_t v = 0;
    for (size_t t = 1; t < sp.tuples.size(); ++t)
      if (sp.tuples[t].count <= sp.tuples[v].count) v = t;
    sp.tuples.erase(sp.tuples.begin() + static_cast<std::ptrdiff_t>(v));
    s.tuple_hashes.erase(s.tuple_hashes.begin() + static_cast<std::ptrdiff_t>(v));
    s.tuple_keys.erase(s.tuple_keys.begin() + static_cast<std::ptrdiff_t>(v));
    ++sp.evicted;
    ++shape_evictions_;
  }
  sp.tuples.push_back(ShapeTuple{c.tuple, 1});
  s.tuple_hashes.push_back(c.tuple_hash);
  ShapeTupleKey key;
  for (int64_t d : c.tuple) key.add(d);
  s.tuple_keys.push_back(key.h);
  return true;
}

void StructureTable::add_liveness(Structure& s, const Canon& c) {
  for (size_t f = 0; f < s.cand.liveness.size() && f < c.used_after.size(); ++f) {
    ValueLiveness& l = s.cand.liveness[f];
    ++l.observed;
    l.used_after += c.used_after[f];
    l.alive_at_end += c.alive_at_end[f];
    l.released_inside += c.released_inside[f];
  }
}

void StructureTable::observe(StreamWindow& w, uint64_t begin, uint64_t path_hash, const Canon& c,
                             uint32_t now_epoch) {
  const Key key{c.signature, w.stream()};
  auto [it, inserted] = map_.try_emplace(key);
  Structure& s = it->second;
  if (inserted) {
    create(s, w, begin, c);
    s.paths[0] = path_hash;
    s.n_paths = 1;
    s.next_path = 1 % kPaths;
    s.epoch = now_epoch;
    if (map_.size() > opts_.max_structures) evict_coldest(key);
  } else {
    decay(s, now_epoch);
    const bool known = std::find(s.paths.begin(), s.paths.begin() + s.n_paths, path_hash) !=
                       s.paths.begin() + s.n_paths;
    if (!known) {
      s.paths[s.next_path] = path_hash;
      s.next_path = static_cast<uint8_t>((s.next_path + 1) % kPaths);
      s.n_paths = static_cast<uint8_t>(std::min(s.n_paths + 1, kPaths));
      return;
    }
  }
  s.cand.last_seen_ns = c.last_ns;
  const bool new_shape = add_shape(s, c);
  add_liveness(s, c);
  count(s, new_shape);
}

bool StructureTable::observe_served(uint64_t signature, uint32_t stream, uint32_t now_epoch,
                                    uint64_t now_ns) {
  auto it = map_.find(Key{signature, stream});
  if (it == map_.end()) return false;
  Structure& s = it->second;
  decay(s, now_epoch);
  s.cand.last_seen_ns = now_ns;
  count(s, false);
  return true;
}

const Candidate* StructureTable::find(uint64_t signature, uint32_t stream, uint64_t tuple_key,
                                      const std::vector<int64_t>** tuple) const {
  auto it = map_.find(Key{signature, stream});
  if (it == map_.end()) return nullptr;
  const Structure& s = it->second;
  for (size_t t = 0; t < s.tuple_keys.size(); ++t)
    if (s.tuple_keys[t] == tuple_key) {
      *tuple = &s.cand.shapes.tuples[t].dims;
      return &s.cand;
    }
  return nullptr;
}

void StructureTable::count(Structure& s, bool new_shape) {
  s.count += 1;
  ++s.cand.occurrences;
  const bool becomes_hot = !s.cand.hot && s.count >= static_cast<float>(opts_.hot);
  if (becomes_hot) s.cand.hot = true;
  if (becomes_hot || (s.cand.hot && new_shape)) {
    ++s.cand.version;
    emitted_.push_back(s.cand);
    emitted_.back().count = s.count;
    ++n_emitted_;
  }
}

void StructureTable::drop_stream(uint32_t stream) {
  for (auto it = map_.begin(); it != map_.end();) {
    if (it->first.stream == stream) {
      if (it->second.cand.hot) go_cold(it->second);
      it = map_.erase(it);
      ++evictions_;
    } else {
      ++it;
    }
  }
}

uint64_t StructureTable::hot_count() const {
  uint64_t n = 0;
  for (const auto& [k, s] : map_) n += s.cand.hot;
  return n;
}

}  // namespace livefuse::monitor
