#include "monitor/detector.hpp"

#include <algorithm>

#include "monitor/hashing.hpp"
#include "runtime/registry.hpp"

namespace livefuse::monitor {

namespace {
constexpr uint64_t kSyncToken = 0x5a5a0000deadbeefull;
constexpr uint64_t kServedToken = 0x5e7fed00deadbeefull;
constexpr uint64_t kSweepEvery = 4096;  // events between decay sweeps
}  // namespace

uint64_t structural_attrs_hash(OpId op, const Attrs& a) {
  // reshape's target always equals its output shape, which the shape pattern records; hashing
  // it would make every sequence length a different structure.
  if (op == OpId::reshape) return hash_combine(0x7e5a, a.ni);
  return a.hash();
}

Detector::Detector(const MonitorOptions& o)
    : opts_(o),
      wparams_{o.window, o.max_segment, o.half_life_log2, o.seam},
      structures_(o),
      canonicalizer_(o.max_segment) {}

StreamWindow* Detector::find_window(uint32_t stream) {
  if (last_hit_ < windows_.size() && windows_[last_hit_].stream == stream)
    return windows_[last_hit_].w.get();
  for (size_t k = 0; k < windows_.size(); ++k)
    if (windows_[k].stream == stream) {
      last_hit_ = k;
      return windows_[k].w.get();
    }
  return nullptr;
}

StreamWindow& Detector::window(uint32_t stream) {
  StreamWindow* w = find_window(stream);
  if (w == nullptr) {
    if (windows_.size() >= std::max<uint32_t>(opts_.max_streams, 1)) {
      auto victim = std::min_element(
          windows_.begin(), windows_.end(),
          [](const WindowEntry& a, const WindowEntry& b) { return a.last_active < b.last_active; });
      structures_.drop_stream(victim->stream);
      evicted_pp_evictions_ += victim->w->pp_evictions();
      evicted_segments_ += victim->w->segments();
      windows_.erase(victim);
      ++window_evictions_;
    }
    windows_.push_back(WindowEntry{stream, 0, std::make_unique<StreamWindow>(stream, wparams_)});
    last_hit_ = windows_.size() - 1;
    w = windows_.back().w.get();
  }
  windows_[last_hit_].last_active = stamp_;
  return *w;
}

uint32_t Detector::epoch_of(uint32_t stream) {
  StreamWindow* w = find_window(stream);
  return w ? w->epoch() : 0;
}

void Detector::consume(const TraceEvent& ev) {
  ++stamp_;
  // served_ids events come right before their served event, in one thread's queue: anything
  // else on the stream in between means the served event was dropped (queue full).
  if (!served_ids_.empty() && ev.kind != EventKind::served_ids && ev.kind != EventKind::served &&
      ev.kind != EventKind::release)
    std::erase_if(served_ids_, [&](const auto& e) { return e.first == ev.stream; });
  switch (ev.kind) {
    case EventKind::call:
      on_call_event(ev);
      break;
    case EventKind::release:
      on_release_event(ev.value);
      break;
    case EventKind::sync:
      on_sync_event(ev);
      break;
    case EventKind::window_open:
      window(ev.stream).set_window_open(true);
      break;
    case EventKind::served:
      on_served_event(ev);
      break;
    case EventKind::served_ids:
      if (served_ids_.size() > 4096) served_ids_.clear();  // bounded whatever gets dropped
      for (int k = 0; k < ev.n_in && k < kServedIdsPerEvent; ++k)
        served_ids_.emplace_back(ev.stream, ev.served_ids[k]);
      break;
  }
  if (stamp_ % kSweepEvery == 0) sweep();
}

void Detector::mark_use(const ValueEntry& e, ValueId id, const StreamWindow& user, uint64_t pos) {
  StreamWindow* pw = find_window(e.prod_stream);
  if (pw == nullptr) return;
  RingEvent* r = pw->event_at(e.prod_pos);
  if (r == nullptr || r->ev.out_ids[e.prod_output] != id) return;
  OutMeta& m = r->meta[e.prod_output];
  if (m.last_use_plus1 == kUsedElsewhere) return;
  m.last_use_plus1 = pw == &user ? pos + 1 : kUsedElsewhere;
}

void Detector::on_call_event(const TraceEvent& ev) {
  ++events_;
  StreamWindow& w = window(ev.stream);
  w.set_window_open(false);
  const uint64_t pos = w.head();
  const uint64_t ah = structural_attrs_hash(ev.op, ev.attrs);
  uint64_t local = hash_combine(static_cast<uint64_t>(ev.op) + 1, ah);
  local = hash_combine(local, ev.n_in | (ev.n_out << 8) | (uint64_t{ev.flags} << 16));
  for (int m = 0; m < ev.n_in; ++m)
    local = hash_combine(local, ev.in_dtype[m] | (ev.in_rank[m] << 8));
  for (int o = 0; o < ev.n_out; ++o)
    local = hash_combine(local, ev.out_dtype[o] | (ev.out_rank[o] << 8) | (1u << 16));

  // The token adds near reuse: "input m is the value input u of the op d positions back read,
  // and that read was the r-th of a run of near reads" (stream_window.hpp, the Note, 1).
  uint64_t token = local;
  for (int m = 0; m < ev.n_in; ++m) {
    const ValueId id = ev.in_ids[m];
    if (id == 0) continue;
    ValueEntry& e = values_.find_or_insert(id, stamp_);
    uint64_t feature = (uint64_t{static_cast<uint32_t>(m)} << 16) | 0xffff;
    uint8_t rank = 0;
    if (e.use_stream == w.stream() && e.use_pos >= w.barrier_end() &&
        pos - e.use_pos <= static_cast<uint64_t>(kNearUse)) {
      rank = static_cast<uint8_t>(std::min(e.use_rank + 1, kMaxNearRank));
      feature = (uint64_t{rank} << 32) | (uint64_t{static_cast<uint32_t>(m)} << 16) |
                ((pos - e.use_pos) << 8) | e.use_input;
    }
    token = hash_combine(token, feature);
    if (e.prod_stream != kNoStream) mark_use(e, id, w, pos);
    e.use_stream = w.stream();
    e.use_pos = pos;
    e.use_input = static_cast<uint8_t>(m);
    e.use_rank = rank;
  }
  for (int o = 0; o < ev.n_out; ++o) {
    if (ev.out_ids[o] == 0) continue;
    ValueEntry& e = values_.find_or_insert(ev.out_ids[o], stamp_);
    e.prod_stream = w.stream();
    e.prod_pos = pos;
    e.prod_output = static_cast<uint8_t>(o);
  }
  // A wrapped kernel of the program's own is a barrier: it runs at its call, never inside a
  // plan, so that its errors and its launch function's effects stay the call's (matcher.cpp).
  const bool barrier = (ev.flags & kEventTruncated) || ev.op == OpId::opaque;
  RingEvent& r = w.append(token, local, barrier ? SlotKind::barrier : SlotKind::op);
  r.ev = ev;
  r.local_token = local;
  r.attrs_hash = ah;
  w.advance(*this);
}

void Detector::on_release_event(ValueId id) {
  ++releases_;
  ValueEntry* e = values_.find(id);
  if (e == nullptr) return;
  if (e->prod_stream != kNoStream)
    if (StreamWindow* pw = find_window(e->prod_stream))
      if (RingEvent* r = pw->event_at(e->prod_pos); r && r->ev.out_ids[e->prod_output] == id)
        // While a window is open its first call was made, though not reported yet: the value
        // outlived the op after the head.
        r->meta[e->prod_output].released_at = pw->head() + (pw->window_open() ? 1 : 0);
  values_.erase(e);  // ids are never reused
}

void Detector::on_sync_event(const TraceEvent& ev) {
  ++syncs_;
  StreamWindow& w = window(ev.stream);
  w.set_window_open(false);
  RingEvent& r = w.append(kSyncToken, kSyncToken, SlotKind::barrier);
  r.ev = ev;
  w.advance(*this);
}

// A served window is replayed: its calls, as the program made them, from the structure the
// plan was made from (ops, attrs, wiring, dtypes), the shape tuple and the event's ids; and
// the releases of the outputs that went with the window, each right after the value's last
// use inside the window (after its producer when nothing inside reads it) -- where a program's
// temporaries die, and where a flushed window now reports them (matcher_end.cpp, flush()). The
// detector sees what it would have seen op by op. When it cannot (the structure or the tuple
// is no longer tracked), the window takes one position, a barrier -- what runs before and
// after it is never one sequence with it, and the ops around it are adjacent only through
// it -- and counts for the structure.
//
// Replaying costs the monitor thread what the calls would have cost it one by one, and on a
// small machine that thread competes with the program's own (on 2 cores the CPU decoder loop
// ran 20% slower with recording on). A structure served that often is learnt: its liveness and
// shapes are known, and a served window counts for it without a replay. So after
// kReplayedServed occurrences only one served window in kReplayEvery is replayed (the others are
// barriers that count), which still shows the detector what runs around the plan now and then.
void Detector::on_served_event(const TraceEvent& ev) {
  ++served_;
  const uint64_t occ =
      structures_.occurrences(ev.value, static_cast<uint32_t>(ev.in_ids[0]));
  const bool replay = occ < kReplayedServed || occ % kReplayEvery == 0;
  if (replay && replay_served(ev)) return;
  if (!replay) {
    ++served_unreplayed_;
    std::erase_if(served_ids_, [&](const auto& e) { return e.first == ev.stream; });
  }
  StreamWindow& w = window(ev.stream);
  w.set_window_open(false);
  RingEvent& r = w.append(kServedToken, kServedToken, SlotKind::barrier);
  r.ev = ev;
  const uint64_t n_ops = ev.in_ids[1];
  if (n_ops > 1) w.skip(n_ops - 1);
  w.advance(*this);
  const auto plan_stream = static_cast<uint32_t>(ev.in_ids[0]);
  structures_.observe_served(ev.value, plan_stream, epoch_of(plan_stream), ev.timestamp_ns);
}

bool Detector::replay_served(const TraceEvent& ev) {
  // The external slots' ids: the event's own, then those of the served_ids events before it.
  const uint64_t n_ext = ev.in_ids[5];
  std::vector<ValueId> ext;
  for (uint64_t e = 0; e < n_ext && e < static_cast<uint64_t>(kServedIdsPerEvent); ++e)
    ext.push_back(ev.served_ids[e]);
  for (auto it = served_ids_.begin(); it != served_ids_.end();) {
    if (it->first != ev.stream) {
      ++it;
      continue;
    }
    ext.push_back(it->second);
    it = served_ids_.erase(it);
  }
  const ValueId first_out = ev.in_ids[2];
  if (first_out == 0 || ext.size() != n_ext) return false;
  const std::vector<int64_t>* tuple = nullptr;
  const Candidate* c =
      structures_.find(ev.value, static_cast<uint32_t>(ev.in_ids[0]), ev.in_ids[3], &tuple,
                       static_cast<int64_t>(ev.out_ids[1]) - 1);
  if (c == nullptr || c->ops.size() != ev.in_ids[1] || c->externals.size() != n_ext) return false;
  // Where each value's dims start in the tuple: external slots, then the outputs in order.
  std::vector<int>& at = value_dims_;
  at.assign(n_ext + 1, 0);
  std::vector<uint32_t> out_base(c->ops.size() + 1, 0);
  for (size_t k = 0; k < c->ops.size(); ++k)
    out_base[k + 1] = out_base[k] + static_cast<uint32_t>(c->ops[k].out_dtypes.size());
  if (out_base.back() != ev.out_ids[0]) return false;
  {
    int off = 0;
    for (size_t e = 0; e < n_ext; ++e) {
      at[e] = off;
      off += c->externals[e].rank;
    }
    at[n_ext] = off;
    for (size_t k = 0; k < c->ops.size(); ++k)
      for (size_t o = 0; o < c->ops[k].out_dtypes.size(); ++o) {
        at.push_back(off);
        off += c->ops[k].out_ranks[o];
      }
    if (static_cast<size_t>(off) != tuple->size()) return false;
  }
  auto out_at = [&](size_t flat) { return at[n_ext + 1 + flat]; };
  // After which call each released output goes (-1: not released with the window).
  const uint64_t released = ev.in_ids[4];
  std::vector<int>& release_after = release_after_;
  release_after.assign(out_base.back(), -1);
  for (size_t k = 0; k < c->ops.size(); ++k) {
    for (size_t o = 0; o < c->ops[k].out_dtypes.size(); ++o) {
      const size_t flat = out_base[k] + o;
      if (flat < 64 && (released >> flat & 1)) release_after[flat] = static_cast<int>(k);
    }
    for (const WireRef& wr : c->ops[k].inputs) {
      if (wr.kind != WireRef::Kind::internal) continue;
      const size_t flat = out_base[wr.index] + wr.output;
      if (release_after[flat] >= 0) release_after[flat] = static_cast<int>(k);
    }
  }
  replay_.assign(c->ops.size(), TraceEvent{});
  for (size_t k = 0; k < c->ops.size(); ++k) {
    const CandidateOp& co = c->ops[k];
    TraceEvent& r = replay_[k];
    r.kind = EventKind::call;
    r.timestamp_ns = ev.timestamp_ns;
    r.stream = ev.stream;
    r.op = co.op;
    r.attrs = co.attrs;
    r.n_in = static_cast<uint8_t>(co.inputs.size());
    r.n_out = static_cast<uint8_t>(co.out_dtypes.size());
    int nd = 0;
    bool truncated = false;
    auto put_dims = [&](int from, int rank) {
      if (nd + rank > kMaxEventDims) {
        truncated = true;
        return;
      }
      for (int a = 0; a < rank; ++a) r.dims[nd++] = static_cast<int32_t>((*tuple)[from + a]);
    };
    for (int m = 0; m < r.n_in; ++m) {
      const WireRef& wr = co.inputs[m];
      r.in_dtype[m] = static_cast<uint8_t>(co.in_dtypes[m]);
      r.in_rank[m] = co.in_ranks[m];
      if (wr.kind == WireRef::Kind::internal) {
        const size_t flat = out_base[wr.index] + wr.output;
        r.in_ids[m] = first_out + flat;
        put_dims(out_at(flat), r.in_rank[m]);
      } else {
        r.in_ids[m] = ext[wr.index];
        put_dims(at[wr.index], r.in_rank[m]);
      }
    }
    for (int o = 0; o < r.n_out; ++o) {
      const size_t flat = out_base[k] + o;
      r.out_dtype[o] = static_cast<uint8_t>(co.out_dtypes[o]);
      r.out_rank[o] = co.out_ranks[o];
      r.out_ids[o] = first_out + flat;
      put_dims(out_at(flat), r.out_rank[o]);
    }
    // A reshape's target is its output's shape (infer.cpp normalises it), which the structure
    // keeps in the tuple, not in the representative attrs.
    if (co.op == OpId::reshape && r.n_out == 1) {
      r.attrs.ni = r.out_rank[0];
      for (int a = 0; a < r.out_rank[0]; ++a) r.attrs.i[a] = (*tuple)[out_at(out_base[k]) + a];
    }
    r.flags = truncated ? kEventTruncated : 0;
  }
  // `c` and `tuple` point into the structure table, which consuming an event may change.
  StreamWindow& w = window(ev.stream);
  w.begin_replay();
  for (size_t k = 0; k < replay_.size(); ++k) {
    ++replayed_;
    on_call_event(replay_[k]);
    for (size_t f = 0; f < release_after.size(); ++f)
      if (release_after[f] == static_cast<int>(k)) on_release_event(first_out + f);
  }
  w.end_replay();
  return true;
}

void Detector::on_segment(StreamWindow& w, uint64_t begin, uint64_t end, uint64_t path_hash) {
  if (!canonicalizer_.run(w, begin, end, canon_)) return;
  structures_.observe(w, begin, path_hash, canon_, w.epoch());
}

void Detector::flush() {
  for (WindowEntry& e : windows_) e.w->flush(*this);
}

void Detector::sweep() {
  structures_.sweep([this](uint32_t s) { return epoch_of(s); });
}

std::vector<Candidate> Detector::candidates(bool hot_only) {
  return structures_.snapshot(hot_only, [this](uint32_t s) { return epoch_of(s); });
}

void Detector::fill(MonitorCounters& c) const {
  c.events = events_;
  c.releases = releases_;
  c.syncs = syncs_;
  c.served = served_;
  c.replayed = replayed_;
  c.served_unreplayed = served_unreplayed_;
  c.windows = windows_.size();
  c.window_evictions = window_evictions_;
  c.program_point_evictions = evicted_pp_evictions_;
  c.segments = evicted_segments_;
  for (const WindowEntry& e : windows_) {
    c.program_point_evictions += e.w->pp_evictions();
    c.segments += e.w->segments();
  }
  c.value_evictions = values_.evictions();
  c.structures = structures_.size();
  c.structure_evictions = structures_.evictions();
  c.shape_evictions = structures_.shape_evictions();
  c.shape_families = structures_.families();
  c.hot = structures_.hot_count();
  c.candidates_emitted = structures_.emitted();
  c.candidates_cooled = structures_.cooled();
}

}  // namespace livefuse::monitor
