#include "monitor/structure_table.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

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

namespace {

// The family through tuples a and b, when b - a is a whole multiple of the change in their
// first differing entry everywhere (that entry is n: slope 1, base 0).
std::optional<ShapeFamily> family_through(const std::vector<int64_t>& a,
                                          const std::vector<int64_t>& b) {
  if (a.size() != b.size()) return std::nullopt;
  size_t p = 0;
  while (p < a.size() && a[p] == b[p]) ++p;
  if (p == a.size()) return std::nullopt;
  const int64_t dn = b[p] - a[p];
  ShapeFamily f;
  f.param = static_cast<int>(p);
  f.base.resize(a.size());
  f.slope.resize(a.size());
  for (size_t e = 0; e < a.size(); ++e) {
    const int64_t d = b[e] - a[e];
    if (d % dn != 0) return std::nullopt;
    f.slope[e] = d / dn;
    f.base[e] = a[e] - f.slope[e] * a[p];
  }
  f.n_min = std::min(a[p], b[p]);
  f.n_max = std::max(a[p], b[p]);
  return f;
}

}  // namespace

void StructureTable::drop_tuple(Structure& s, size_t t) {
  const auto at = static_cast<std::ptrdiff_t>(t);
  s.cand.shapes.tuples.erase(s.cand.shapes.tuples.begin() + at);
  s.tuple_hashes.erase(s.tuple_hashes.begin() + at);
  s.tuple_keys.erase(s.tuple_keys.begin() + at);
}

// The newest tuple (the last kept) with each other kept tuple in turn: the first line that
// kFamilyTuples of them fit becomes the family, and its members leave `tuples`. Lines through
// two one-off shapes fit nothing else, so a few distinct shapes never make a family.
bool StructureTable::try_family(Structure& s) {
  ShapePattern& sp = s.cand.shapes;
  if (sp.family.defined() || sp.tuples.size() < ShapePattern::kFamilyTuples) return false;
  const std::vector<int64_t>& fresh = sp.tuples.back().dims;
  for (size_t u = 0; u + 1 < sp.tuples.size(); ++u) {
    std::optional<ShapeFamily> f = family_through(sp.tuples[u].dims, fresh);
    if (!f) continue;
    std::vector<size_t> members;
    for (size_t t = 0; t < sp.tuples.size(); ++t)
      if (f->member(sp.tuples[t].dims)) members.push_back(t);
    if (members.size() < ShapePattern::kFamilyTuples) continue;
    sp.family_count = 0;
    for (auto it = members.rbegin(); it != members.rend(); ++it) {
      f->saw(sp.tuples[*it].dims[static_cast<size_t>(f->param)]);
      sp.family_count += sp.tuples[*it].count;
      drop_tuple(s, *it);
    }
    sp.family = std::move(*f);
    ++n_families_;
    return true;
  }
  return false;
}

bool StructureTable::add_shape(Structure& s, const Canon& c) {
  ShapePattern& sp = s.cand.shapes;
  if (const std::optional<int64_t> n = sp.family.member(c.tuple)) {
    sp.family.saw(*n);
    ++sp.family_count;
    return false;
  }
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
    drop_tuple(s, v);
    ++sp.evicted;
    ++shape_evictions_;
  }
  sp.tuples.push_back(ShapeTuple{c.tuple, 1});
  s.tuple_hashes.push_back(c.tuple_hash);
  s.tuple_keys.push_back(ShapeTupleKey::of(c.tuple));
  try_family(s);
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

void StructureTable::observe(StreamWindow& w, uint64_t begin, uint64_t path_hash,
                             const Canon& c, uint32_t now_epoch) {
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
  // A longer pause than the run's spacing: the loop around the run came round (the Note).
  const uint64_t period = inserted ? 0 : begin - s.last_begin;
  const bool paused = s.period != 0 && period > s.period;
  s.period = period;
  s.last_begin = begin;
  count(s, new_shape, paused);
}

bool StructureTable::observe_served(uint64_t signature, uint32_t stream, uint32_t now_epoch,
                                    uint64_t now_ns) {
  auto it = map_.find(Key{signature, stream});
  if (it == map_.end()) return false;
  Structure& s = it->second;
  decay(s, now_epoch);
  s.cand.last_seen_ns = now_ns;
  count(s, false, true);
  return true;
}

const Candidate* StructureTable::find(uint64_t signature, uint32_t stream, uint64_t tuple_key,
                                      const std::vector<int64_t>** tuple,
                                      int64_t family_n) const {
  auto it = map_.find(Key{signature, stream});
  if (it == map_.end()) return nullptr;
  const Structure& s = it->second;
  for (size_t t = 0; t < s.tuple_keys.size(); ++t)
    if (s.tuple_keys[t] == tuple_key) {
      *tuple = &s.cand.shapes.tuples[t].dims;
      return &s.cand;
    }
  const ShapeFamily& f = s.cand.shapes.family;
  if (family_n < 0 || !f.defined()) return nullptr;
  // The plan's family may be older than the structure's: the rebuilt tuple must be the one the
  // window had.
  f.tuple(family_n, family_tuple_);
  if (ShapeTupleKey::of(family_tuple_) != tuple_key) return nullptr;
  *tuple = &family_tuple_;
  return &s.cand;
}

// [ Note -- a shape mix settles before the planner sees it ]
// A hot sequence goes to the planner (emitted) when it turns hot and again when it gains a shape
// tuple -- but only once its shape mix has settled: an occurrence with the same mix came after a
// pause (a longer gap since the one before than the run's spacing), or `settled_run` (options.hpp)
// occurrences came in one rhythm. Why: a decode step runs its layers back to back at one cache
// length and the next step at the next, so a layer is hot within the first step with one concrete
// tuple. Handed over then, it was planned three times -- that tuple, two tuples, then the family
// the third step makes (monitor/candidate.hpp) -- each plan compiled, sampled and retired; so were
// the layer's fragments and the prompt's layer (hot within the one prefill): GPT-2 processes made
// 11-31 plans where a layer plan, the embedding's and the head's do the work (bench/RESULTS.md,
// session 21). Held until the loop around the run comes round, a layer whose length moves is handed
// over once, with its family (at the fourth step), and one whose shapes stay is handed over at the
// next forward; a sequence seen in one burst only (a prompt, weights transposed at load) is not
// planned until it recurs. A loop with nothing else in it never pauses: `settled_run` same-shape
// repeats settle it. And a mix that keeps changing without a family goes after `max_wait`
// occurrences anyway (Llama-3.2-1B's static-cache decode, cut in many pieces, served 64% of its
// calls against 80% when nothing waited for good). LIVEFUSE_SETTLE=0 hands over at once.
void StructureTable::count(Structure& s, bool new_shape, bool paused) {
  s.count += 1;
  ++s.cand.occurrences;
  if (new_shape) {
    s.stable = 0;
    s.broke = false;
  } else {
    ++s.stable;
    s.broke = s.broke || paused;
  }
  const bool becomes_hot = !s.cand.hot && s.count >= static_cast<float>(opts_.hot);
  if (becomes_hot) s.cand.hot = true;
  if ((becomes_hot || (s.cand.hot && new_shape)) && !s.owed) {
    s.owed = true;
    s.waited = 0;
  }
  if (s.owed) ++s.waited;
  // A mix that never settles (a new tuple every few occurrences, no family) still goes, after
  // max_wait occurrences: at most one hand-over per max_wait, not one per tuple.
  const bool settled = !opts_.settle || s.broke || s.stable >= opts_.settled_run ||
                       s.waited > opts_.max_wait;
  if (s.owed && s.cand.hot && settled) {
    s.owed = false;
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
