#include "monitor/stream_window.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "livefuse/error.hpp"
#include "monitor/hashing.hpp"

namespace livefuse::monitor {

namespace {
constexpr uint64_t kBucketMask = (1u << 12) - 1;
// A branch counts once both of its sides were taken at least twice, recently: a one-off (the
// first occurrence of a block, whose input came from elsewhere) must not cut every later one.
constexpr float kSignificant = 1.5f;
// The graph forgets four times slower than the counts of sequences: a loop exit is taken once
// per forward pass, and must stay a branch for forward passes of many thousands of ops.
constexpr uint32_t kGraphHalfLifeShift = 2;
// A second successor (predecessor) taken less than this share of the first's is a rare path, not
// a branch: a decode loop's layers meet the prefill's at the same points once per sequence and
// the decode's at every token, and a cut there for the prefill's sake would split every decode
// layer into pieces (GPT-2's into three, the cache's concat alone in one). Where the prefill
// path is taken again (a new prompt) after the decode's, the counts decide: from about 16
// occurrences of the common path on, the unit is whole.
constexpr float kMinorShare = 1.0f / 16;
// A point whose successor (predecessor) changed only once is a phase change, not a branch: the
// prefill's layers took one path through it and the decode's layers take the other ever since
// (one switch), where a loop exit switches twice a pass. Cutting the decode layer there for its
// first 16 steps (kMinorShare) handed its pieces to the planner before the whole layer.
constexpr uint8_t kBranchSwitches = 2;
// A point whose successor (predecessor) keeps switching is a branch however rare its second
// path: a loop exit is taken once a pass (1 in 16 for Llama-1B's layers) and switches twice a
// pass, where the prefill / decode divergence switches twice a prompt. At the 1/16 share alone,
// a 16-layer loop's exit sat on the edge, and counts skewed by replayed served windows (1 in
// 16) tipped it: the last layer and the head became one unit, whose plan superseded the layer's.
constexpr float kSwitchShare = 1.0f / 32;
}  // namespace

StreamWindow::StreamWindow(uint32_t stream, const WindowParams& p)
    : stream_(stream),
      window_(std::bit_ceil(std::max<uint64_t>(p.window, 256))),
      window_mask_(window_ - 1),
      ring_mask_(std::bit_ceil(static_cast<uint64_t>(2 * p.max_segment + 8)) - 1),
      lookahead_(static_cast<uint64_t>(p.max_segment)),
      max_segment_(p.max_segment),
      half_life_log2_(p.half_life_log2),
      seam_(p.seam),
      slots_(window_),
      buckets1_(kBucketMask + 1, 0),
      buckets3_(kBucketMask + 1, 0),
      ring_(ring_mask_ + 1),
      // More program points than positions in the window: a point whose last position left
      // the window is unreachable, so one is always free to reuse (see new_pp).
      pps_(window_ + lookahead_ + 64) {
  LF_ASSERT(p.max_segment >= 2, "max_segment below 2");
  free_pps_.reserve(pps_.size());
  for (size_t k = pps_.size(); k-- > 0;) free_pps_.push_back(static_cast<uint32_t>(k));
}

RingEvent& StreamWindow::append(uint64_t token, uint64_t local, SlotKind kind) {
  Slot& s = slot(head_);
  s = Slot{};
  s.token = token;
  s.local = local;
  s.kind = kind;
  s.in_replay = replay_ == 2;
  if (replay_) replay_ = 2;
  if (kind == SlotKind::barrier) barrier_end_ = head_ + 1;
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
  while (k < lim && slots_[(i + k) & window_mask_].token == slots_[(j + k) & window_mask_].token)
    ++k;
  return k;
}

// Which earlier position does `i` continue? Candidates come most recent first, the current
// alignment (the previous phrase's offset) first of all, so a loop keeps its period.
//  1. Forward: among earlier positions where the same three ops start (trigram chain), the
//     longest run of equal tokens from `i` on, at least kMinMatch, and at least kLongRun
//     unless it continues the current alignment (note 2, inner repeats). The run is trimmed by
//     kMinMatch - 1: its last positions have little forward support (blocks
//     A = [linear, gelu, ..] and B = [linear, relu, ..]: the linear belongs to the block it
//     starts, which only a search at the linear itself, with its own lookahead, can see).
//  2. Backward: else, the position at the current alignment, if its kMinMatch preceding ops
//     are the same ops with the same wiring (tokens: q/k/v, three [linear, reshape, permute]
//     blocks, are told apart only by it), counting back no further than the start of a
//     sequence (reaching the same start is enough: a block's third op is identified by the
//     two before it); the candidate itself must not start a sequence. This keeps the tail of a
//     loop in the loop when the lookahead diverges (the last layer is followed by the head,
//     not by another layer); but an op after a loop that merely looks like the loop's first op
//     (a final layer_norm) is not that op: it would give the loop head a second successor.
//     Unless a barrier follows it: then it has no successor (BERT's last closing layer_norm,
//     then the sync, is the point where every layer was entered, not a 25th op of the last).
//     Only at the alignment: elsewhere, preceding ops that agree are an inner repeat's too.
void StreamWindow::search(uint64_t i) {
  const Slot& si = slot(i);
  const uint64_t lim = std::min(lookahead_, head_ - i);
  const uint64_t need = std::min<uint64_t>(kMinMatch, lim);  // short near the end of input
  const uint64_t cont = phrase_off_ != 0 && phrase_off_ <= i && in_window(i - phrase_off_) &&
                                slot(i - phrase_off_).local == si.local
                            ? i - phrase_off_ + 1
                            : 0;  // plus one; 0: none
  uint64_t best_len = 0, best_j = 0;
  auto try_forward = [&](uint64_t j) {
    const uint64_t len = match_len(i, j, lim);
    if (len > best_len) best_len = len, best_j = j;
  };
  if (cont) try_forward(cont - 1);
  const bool have_tri = i + 2 < head_;
  const uint64_t tri = have_tri ? trigram(i) : 0;
  uint64_t c = have_tri ? buckets3_[tri & kBucketMask] : buckets1_[si.local & kBucketMask];
  for (int n = 0; c != 0 && n < kMaxCandidates && best_len < lim;) {
    const uint64_t j = c - 1;
    if (!in_window(j)) break;
    const Slot& sj = slot(j);
    if (have_tri ? sj.tri == tri : sj.local == si.local) {
      ++n;
      if (j + 1 != cont) try_forward(j);
    }
    c = have_tri ? sj.chain3 : sj.chain1;
  }
  // A short match (fewer than kLongRun tokens, the lookahead not reached) counts only where it
  // continues the stream's alignment (note 2, inner repeats).
  const bool long_run = best_len >= kLongRun || best_len >= lim;
  if (best_len >= need && best_len > 0 && (long_run || best_j + 1 == cont)) {
    phrase_off_ = i - best_j;
    phrase_left_ = best_len >= kMinMatch ? best_len - (kMinMatch - 1) : 1;
    return;
  }
  // An op followed by a barrier has no successor: it cannot make a loop head a branch.
  const bool last_before_barrier = i + 1 < head_ && slot(i + 1).kind == SlotKind::barrier;
  auto try_backward = [&](uint64_t j) {
    if (!live(slot(j).pp) || (pps_[slot(j).pp.idx].entry && !last_before_barrier)) return false;
    bool same_start = false;
    const uint64_t back = back_len(i, j, &same_start);
    if (back < static_cast<uint64_t>(kMinMatch) && !(same_start && back > 0)) return false;
    phrase_off_ = i - j;
    phrase_left_ = 1;
    return true;
  };
  if (cont && try_backward(cont - 1)) return;
  phrase_left_ = 0;
}

uint64_t StreamWindow::trigram(uint64_t i) {
  return hash_combine(hash_combine(slot(i).local, slot(i + 1).local), slot(i + 2).local);
}

// Ops (local tokens) before i and before j that agree, up to kMinMatch, counting a sequence
// start and stopping there (`same_start`: both walks reached the same sequence start).
uint64_t StreamWindow::back_len(uint64_t i, uint64_t j, bool* same_start) {
  uint64_t k = 0;
  while (k < static_cast<uint64_t>(kMinMatch) && j > k && in_window(j - k - 1)) {
    const Slot& a = slot(i - k - 1);
    const Slot& b = slot(j - k - 1);
    if (a.kind != SlotKind::op || a.token != b.token || !live(b.pp)) break;
    ++k;
    if (pps_[b.pp.idx].entry) {
      *same_start = a.pp == b.pp;
      break;
    }
  }
  return k;
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
  p.epoch = static_cast<uint32_t>(head_ >> (half_life_log2_ + kGraphHalfLifeShift));
  return PpRef{idx, gen};
}

void StreamWindow::decay(ProgramPoint& p) {
  const uint32_t e = static_cast<uint32_t>(head_ >> (half_life_log2_ + kGraphHalfLifeShift));
  if (p.epoch == e) return;
  const float f = std::ldexp(1.0f, -static_cast<int>(std::min<uint32_t>(e - p.epoch, 100)));
  p.succ_n[0] *= f, p.succ_n[1] *= f, p.succ_rest *= f, p.succ_switch_n *= f;
  p.pred_n[0] *= f, p.pred_n[1] *= f, p.pred_rest *= f, p.pred_switch_n *= f;
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

// One more neighbour `x` after `*last`: a switch when they differ (kBranchSwitches, kSwitchShare).
void count_switch(PpRef* last, uint8_t* switches, float* switch_n, PpRef x) {
  if (last->valid() && *last != x) {
    if (*switches < 255) ++*switches;
    *switch_n += 1;
  }
  *last = x;
}
}  // namespace

void StreamWindow::observe_edge(PpRef a, PpRef b) {
  ProgramPoint& pa = pps_[a.idx];
  ProgramPoint& pb = pps_[b.idx];
  decay(pa);
  decay(pb);
  count_neighbour(pa.succ, pa.succ_n, &pa.succ_rest, b);
  count_neighbour(pb.pred, pb.pred_n, &pb.pred_rest, a);
  count_switch(&pa.last_succ, &pa.succ_switches, &pa.succ_switch_n, b);
  count_switch(&pb.last_pred, &pb.pred_switches, &pb.pred_switch_n, a);
}

// Two significant successors of `a` are a branch unless they are a bubble: the same op
// (local token) going on to the same point, i.e. one op whose wiring differs in some
// occurrences.
bool StreamWindow::succ_branches(ProgramPoint& a) {
  if (a.succ_switches < kBranchSwitches) return false;
  if (a.succ_switch_n >= kSignificant && a.succ_switch_n >= kSwitchShare * a.succ_n[0]) return true;
  const float minor = std::max(kSignificant, kMinorShare * a.succ_n[0]);
  if (a.succ_rest >= minor) return true;
  if (a.succ_n[1] < minor || a.succ_n[0] < kSignificant) return false;
  if (!live(a.succ[0]) || !live(a.succ[1])) return true;
  const ProgramPoint& x = pps_[a.succ[0].idx];
  const ProgramPoint& y = pps_[a.succ[1].idx];
  // A point seen for the first time has no successor yet: give it the benefit of the doubt
  // (it is judged again at its next occurrence).
  const bool same_next = !x.succ[0].valid() || !y.succ[0].valid() || x.succ[0] == y.succ[0];
  return !(x.local_token == y.local_token && same_next);
}

bool StreamWindow::pred_branches(ProgramPoint& b) {
  if (b.pred_switches < kBranchSwitches) return false;
  if (b.pred_switch_n >= kSignificant && b.pred_switch_n >= kSwitchShare * b.pred_n[0]) return true;
  const float minor = std::max(kSignificant, kMinorShare * b.pred_n[0]);
  if (b.pred_rest >= minor) return true;
  if (b.pred_n[1] < minor || b.pred_n[0] < kSignificant) return false;
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
    if (!matched) pp = new_pp(s.local, i);
    pps_[pp.idx].last_pos = i;
  }
  s.pp = pp;
  s.matched = matched;
  uint64_t& b1 = buckets1_[s.local & kBucketMask];
  s.chain1 = b1;
  b1 = i + 1;
  if (i + 2 < head_) {
    s.tri = trigram(i);
    uint64_t& b3 = buckets3_[s.tri & kBucketMask];
    s.chain3 = b3;
    b3 = i + 1;
  }
  cut_step(i, sink);
}

void StreamWindow::cut_step(uint64_t i, SegmentSink& sink) {
  const Slot& s = slot(i);
  if (s.kind == SlotKind::barrier) {
    close(i, sink);
    prev_ = PpRef{};
    cut_next_ = false;
    return;
  }
  ProgramPoint& p = pps_[s.pp.idx];
  const int64_t rows = seam_ ? norm_rows(i) : 0;  // 0: not a norm (or the seam is off)
  if (rows > 0 && rows <= kSeamMinRows) p.few_rows = true;
  if (open_) {
    const bool full = i - seg_begin_ >= static_cast<uint64_t>(max_segment_);
    const bool cut = full || p.seg_serial == serial_ || cut_next_;
    bool branch = false;
    if (live(prev_)) {
      observe_edge(prev_, s.pp);
      // Inside a replayed window the plan's unit stands: a branch the prefill's path makes
      // there (counted against the decode's replays only, 1 in 16 served windows) must not
      // cut it into pieces that would be planned from the replays.
      branch = !s.in_replay && (succ_branches(pps_[prev_.idx]) || pred_branches(p));
    }
    cut_next_ = false;
    if (!cut && branch && seam_at(i, rows)) cut_next_ = true;  // the norm ends this sequence instead
    else if (cut || branch) close(i, sink);
  } else if (live(prev_)) {
    observe_edge(prev_, s.pp);
  }
  if (!open_) {
    p.entry = true;
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

int64_t StreamWindow::norm_rows(uint64_t i) {
  const RingEvent* b = event_at(i);
  if (!b || b->ev.kind != EventKind::call || (b->ev.flags & kEventTruncated) ||
      (b->ev.op != OpId::layer_norm && b->ev.op != OpId::rms_norm) || b->ev.n_in < 1 ||
      b->ev.in_rank[0] < 1 || b->ev.in_rank[0] > kMaxEventDims)
    return 0;
  int64_t rows = 1;
  for (int d = 0; d + 1 < b->ev.in_rank[0]; ++d) rows *= b->ev.dims[d];
  return std::max<int64_t>(rows, 1);
}

bool StreamWindow::seam_at(uint64_t i, int64_t rows) {
  if (i == 0 || rows <= kSeamMinRows || pps_[slot(i).pp.idx].few_rows) return false;
  const RingEvent* a = event_at(i - 1);
  const RingEvent* b = event_at(i);
  if (!a || a->ev.kind != EventKind::call || (a->ev.flags & kEventTruncated)) return false;
  return op_info(a->ev.op).category == OpCategory::Elementwise && a->ev.n_out >= 1 &&
         b->ev.in_ids[0] == a->ev.out_ids[0];
}

void StreamWindow::close(uint64_t end, SegmentSink& sink) {
  if (!open_) return;
  open_ = false;
  if (end - seg_begin_ < 2) return;
  ++segments_;
  if (seg_unmatched_ == 0) sink.on_segment(*this, seg_begin_, end, seg_path_);
}

}  // namespace livefuse::monitor
