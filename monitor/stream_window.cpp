#include "monitor/stream_window.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "livefuse/error.hpp"
#include "monitor/hashing.hpp"

namespace livefuse::monitor {

namespace {
constexpr uint32_t kBucketsLog2 = 12;
// A branch counts once both of its sides were taken about once per half-life.
constexpr float kSignificant = 0.5f;
}  // namespace

StreamWindow::StreamWindow(uint32_t stream, const WindowParams& p)
    : stream_(stream),
      window_(std::bit_ceil(std::max<uint64_t>(p.window, 256))),
      window_mask_(window_ - 1),
      ring_mask_(std::bit_ceil(static_cast<uint64_t>(2 * p.max_segment + 8)) - 1),
      lookahead_(static_cast<uint64_t>(p.max_segment)),
      max_segment_(p.max_segment),
      half_life_log2_(p.half_life_log2),
      slots_(window_),
      buckets_(size_t{1} << kBucketsLog2, 0),
      ring_(ring_mask_ + 1),
      // More program points than positions in the window: a point whose last position left
      // the window is unreachable, so one is always free to reuse (see new_pp).
      pps_(window_ + lookahead_ + 64) {
  LF_ASSERT(p.max_segment >= 2, "max_segment below 2");
  free_pps_.reserve(pps_.size());
  for (size_t k = pps_.size(); k-- > 0;) free_pps_.push_back(static_cast<uint32_t>(k));
}

RingEvent& StreamWindow::append(uint64_t token, SlotKind kind) {
  Slot& s = slot(head_);
  s = Slot{};
  s.token = token;
  s.kind = kind;
  RingEvent& r = ring_[head_ & ring_mask_];
  r.pos = head_;
  r.local_token = 0;
  r.attrs_hash = 0;
  for (OutMeta& m : r.meta) m = OutMeta{};
  ++head_;
  return r;
}

void StreamWindow::advance(SegmentSink& sink) {
  while (next_ + lookahead_ < head_) assign(next_++, sink);
}

void StreamWindow::flush(SegmentSink& sink) {
  while (next_ < head_) assign(next_++, sink);
}

uint64_t StreamWindow::match_len(uint64_t i, uint64_t j, uint64_t lim) {
  uint64_t k = 0;
  while (k < lim && slots_[(i + k) & window_mask_].token == slots_[(j + k) & window_mask_].token) ++k;
  return k;
}

// Longest earlier stretch that the stream from `i` on repeats. Continuing the current alignment
// is tried first and wins ties: a loop keeps its period.
void StreamWindow::search(uint64_t i) {
  const uint64_t token = slot(i).token;
  const uint64_t lim = std::min(lookahead_, head_ - i);
  uint64_t best_len = 0, best_off = 0;
  if (phrase_off_ != 0 && phrase_off_ <= i) {
    const uint64_t j = i - phrase_off_;
    if (in_window(j) && slot(j).token == token) {
      best_len = match_len(i, j, lim);
      best_off = phrase_off_;
    }
  }
  uint64_t c = buckets_[token & ((1u << kBucketsLog2) - 1)];
  for (int n = 0; c != 0 && n < kMaxCandidates && best_len < lim;) {
    const uint64_t j = c - 1;
    if (!in_window(j)) break;
    const Slot& sj = slot(j);
    if (sj.token == token) {
      ++n;
      const uint64_t len = match_len(i, j, lim);
      if (len > best_len) best_len = len, best_off = i - j;
    }
    c = sj.chain;
  }
  // Near the end of the input (flush) the lookahead itself is short.
  if (best_len >= std::min<uint64_t>(kMinMatch, lim) && best_len > 0) {
    phrase_off_ = best_off;
    phrase_left_ = best_len;
  } else {
    phrase_left_ = 0;
  }
}

PpRef StreamWindow::new_pp(uint64_t local_token, uint64_t pos) {
  uint32_t idx;
  if (!free_pps_.empty()) {
    idx = free_pps_.back();
    free_pps_.pop_back();
  } else {
    // Clock sweep for a point none of whose positions is still in the window: no slot refers
    // to it any more (stale successor/predecessor refs fail their generation check).
    for (;;) {
      idx = clock_hand_;
      clock_hand_ = static_cast<uint32_t>((clock_hand_ + 1) % pps_.size());
      if (pps_[idx].last_pos + window_ < head_) break;
    }
    ++pp_evictions_;
  }
  ProgramPoint& p = pps_[idx];
  const uint32_t gen = p.gen + 1;
  p = ProgramPoint{};
  p.gen = gen;
  p.local_token = local_token;
  p.last_pos = pos;
  p.epoch = epoch();
  return PpRef{idx, gen};
}

void StreamWindow::decay(ProgramPoint& p) {
  const uint32_t e = epoch();
  if (p.epoch == e) return;
  const float f = std::ldexp(1.0f, -static_cast<int>(std::min<uint32_t>(e - p.epoch, 100)));
  p.succ_n[0] *= f, p.succ_n[1] *= f, p.succ_rest *= f;
  p.pred_n[0] *= f, p.pred_n[1] *= f, p.pred_rest *= f;
  p.epoch = e;
}

namespace {
// Counts one more transition to `x` in a two-way slot table (most frequent first) with an
// overflow count for everything else.
void count_neighbour(PpRef* ref, float* n, float* rest, PpRef x) {
  if (ref[0] == x) {
    n[0] += 1;
  } else if (ref[1] == x) {
    n[1] += 1;
    if (n[1] > n[0]) std::swap(ref[0], ref[1]), std::swap(n[0], n[1]);
  } else if (!ref[1].valid() || n[1] < 0.25f) {
    *rest += n[1];
    ref[1] = x;
    n[1] = 1;
    if (!ref[0].valid()) std::swap(ref[0], ref[1]), std::swap(n[0], n[1]);
  } else {
    *rest += 1;
  }
}
}  // namespace

void StreamWindow::observe_edge(PpRef a, PpRef b) {
  ProgramPoint& pa = pps_[a.idx];
  ProgramPoint& pb = pps_[b.idx];
  decay(pa);
  decay(pb);
  count_neighbour(pa.succ, pa.succ_n, &pa.succ_rest, b);
  count_neighbour(pb.pred, pb.pred_n, &pb.pred_rest, a);
}

// Two significant successors of `a` are a branch unless they are a bubble: the same op
// (local token) going on to the same point, i.e. one op whose wiring differs in some
// occurrences.
bool StreamWindow::succ_branches(ProgramPoint& a) {
  if (a.succ_rest >= kSignificant) return true;
  if (a.succ_n[1] < kSignificant || a.succ_n[0] < kSignificant) return false;
  if (!live(a.succ[0]) || !live(a.succ[1])) return true;
  const ProgramPoint& x = pps_[a.succ[0].idx];
  const ProgramPoint& y = pps_[a.succ[1].idx];
  return !(x.local_token == y.local_token && x.succ[0].valid() && x.succ[0] == y.succ[0]);
}

bool StreamWindow::pred_branches(ProgramPoint& b) {
  if (b.pred_rest >= kSignificant) return true;
  if (b.pred_n[1] < kSignificant || b.pred_n[0] < kSignificant) return false;
  if (!live(b.pred[0]) || !live(b.pred[1])) return true;
  const ProgramPoint& x = pps_[b.pred[0].idx];
  const ProgramPoint& y = pps_[b.pred[1].idx];
  return !(x.local_token == y.local_token && x.pred[0].valid() && x.pred[0] == y.pred[0]);
}

void StreamWindow::assign(uint64_t i, SegmentSink& sink) {
  Slot& s = slot(i);
  if (phrase_left_ == 0) search(i);
  PpRef pp;
  bool matched = false;
  if (phrase_left_ > 0) {
    --phrase_left_;
    const Slot& src = slot(i - phrase_off_);
    if (s.kind == SlotKind::op && in_window(i - phrase_off_) && live(src.pp)) {
      pp = src.pp;
      matched = true;
    }
  }
  if (s.kind == SlotKind::op) {
    RingEvent* r = event_at(i);
    if (!matched) pp = new_pp(r ? r->local_token : s.token, i);
    pps_[pp.idx].last_pos = i;
  }
  s.pp = pp;
  s.matched = matched;
  uint64_t& bucket = buckets_[s.token & ((1u << kBucketsLog2) - 1)];
  s.chain = bucket;
  bucket = i + 1;
  cut_step(i, sink);
}

void StreamWindow::cut_step(uint64_t i, SegmentSink& sink) {
  const Slot& s = slot(i);
  if (s.kind == SlotKind::barrier) {
    close(i, sink);
    prev_ = PpRef{};
    return;
  }
  ProgramPoint& p = pps_[s.pp.idx];
  if (open_) {
    bool cut = i - seg_begin_ >= static_cast<uint64_t>(max_segment_) || p.seg_serial == serial_;
    if (live(prev_)) {
      observe_edge(prev_, s.pp);
      cut = cut || succ_branches(pps_[prev_.idx]) || pred_branches(p);
    }
    if (cut) close(i, sink);
  } else if (live(prev_)) {
    observe_edge(prev_, s.pp);
  }
  if (!open_) {
    open_ = true;
    seg_begin_ = i;
    ++serial_;
    seg_unmatched_ = 0;
    seg_path_ = 0x5eed;
  }
  p.seg_serial = serial_;
  seg_unmatched_ += s.matched ? 0 : 1;
  seg_path_ = hash_combine(seg_path_, s.pp.bits());
  prev_ = s.pp;
}

void StreamWindow::close(uint64_t end, SegmentSink& sink) {
  if (!open_) return;
  open_ = false;
  if (end - seg_begin_ < 2) return;
  ++segments_;
  if (seg_unmatched_ == 0) sink.on_segment(*this, seg_begin_, end, seg_path_);
}

}  // namespace livefuse::monitor
