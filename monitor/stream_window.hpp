#pragma once
// StreamWindow: one stream's recent ops, and the cutting of that stream into sequences.
//
// [ Note -- how sequences are found ]
// 1. Tokens. Each op becomes a local token (op, structural attrs, dtypes, ranks) and a token
//    that adds, per input, whether the same value was read by one of the previous kNearUse ops
//    (which one, which input) and, if so, that read's rank: how many reads of the value came
//    before it in a run of near reads (each within kNearUse of the next), up to kMaxNearRank.
//    A value read by several sibling ops in a row -- q/k/v projections of one normalised input,
//    gate/up of an MLP, k/v of cross-attention -- is a fan-out, not a loop: the rank gives
//    each sibling its own token. The distance alone does not: in BERT each projection is
//    followed by its reshape and permute, so k and v both read h 3 ops after the previous read;
//    [reshape, permute, linear(h, 3 back), reshape, permute] would then occur twice, 3 apart,
//    the k projection would inherit the q projection's program points (2.) and every layer
//    would be cut into pieces at that repeat (3.). With the rank the q/k/v linears read h as
//    "far", "3 back, rank 1" and "3 back, rank 2". A fan-out wider than kMaxNearRank + 1 looks
//    like a loop from there on. Nothing further back than kNearUse * kMaxNearRank positions
//    enters a token (so layer 1 and layer 7 agree); a weight read once per block by
//    consecutive blocks longer than kNearUse is never seen at all, and between shorter blocks
//    the rank saturates after kMaxNearRank of them. Runs, and near reads, never reach across a
//    barrier (a sync, a wrapped kernel): the ops on its two sides are never in one sequence,
//    so what lies before it is context, not wiring.
// 2. Program points. A position that continues an earlier stretch of the stream inherits that
//    position's program point (LZ77-style phrases, lookahead max_segment; see search() for the
//    forward and backward rules). Twelve layers map onto the program points of the first; a
//    position that continues nothing gets a fresh program point.
//    Inner repeats. A short stretch that occurs twice inside the unit -- a Llama layer's two
//    [rms_norm, mul, linear] norms, the 7-op rotary for q and then for k, [linear, add, norm]
//    after attention and after the MLP -- would, copied at first sight, give both occurrences
//    the same program points: every layer then holds them twice (a loop closing, 3.) and
//    meets them from two sides (branches, 3.), and is cut into the pieces between them. At
//    first sight nothing tells [A A] in a layer from two turns of a loop over A; what tells
//    them apart later is that a layer's copy of the previous layer agrees for long. So a copy
//    starts only from a match of kLongRun tokens or more (or one the lookahead cut short), or
//    one that continues the stream's current alignment (the loop it is in): a shorter match
//    elsewhere is a new program point. The price: blocks shorter than kLongRun that recur in
//    varying order are new points at each new neighbour until runs of them repeat.
// 3. Cuts. Program points form a graph (successor/predecessor counts, decaying). The stream is
//    cut before position i when: a sync or a wrapped kernel is in between; the previous
//    program point has two recurring successors or this one two recurring predecessors (loop
//    heads, loop exits, the seams of blocks in varying order); this program point already
//    occurs in the open sequence (a loop closed); or the sequence reached max_segment. A
//    "bubble" -- two points with the same op and the same neighbours, i.e. one op whose wiring
//    differs in some occurrences -- is not a branch. What lies between cuts is a maximal unit:
//    a whole layer, never every sub-run of one. (A run of ops shared by two different loops is
//    a unit of its own: it does repeat in different contexts.) A loop is cut where it is
//    entered, which need not be where the source's loop body starts: in post-LN BERT the
//    embedding ends with a layer_norm that is the same op, followed by the same ops, as the
//    layer_norm closing each layer, so the stream is [embedding] (layer_norm [the other 23
//    ops of a layer])^n layer_norm, and the unit is the layer's 24 ops rotated by one:
//    [layer_norm, q/k/v, ..., add]. Nothing in the stream tells that layer_norm's two call
//    sites apart; the other rotation would show only at the stream's end (the last
//    layer_norm, then a sync), after the first forward pass has made this one hot.
//    The seam: a cut for a branch that would fall between a pointwise op and a norm over
//    many rows reading its output (that add, then that layer_norm) falls after the norm
//    instead, so both are one row kernel of one plan; the unit becomes [q/k/v, ..., add,
//    layer_norm] and the embedding's sequence ends with its layer_norm. A norm whose program
//    point has ever run over few rows (kSeamMinRows) keeps the cut before it, for good: a
//    decode step's norm runs inside the GEMV after it (planner, fold_norm_prologues), which
//    beats the add + norm kernel, and the prefill that shares the decode's program points
//    must not cut them otherwise (its sequences would start where the decode's do not).
// 4. A sequence all of whose positions continued earlier ones goes to the SegmentSink with the
//    hash of its program-point path (the structure table counts only repeats of one path).
#include <cstdint>
#include <vector>

#include "monitor/trace_event.hpp"

namespace livefuse::monitor {

inline constexpr int kMinMatch = 4;           // tokens of agreeing context for one program point
inline constexpr int kMaxCandidates = 16;     // earlier positions tried for a forward match
// How far back "the same value was read" is seen: far enough for q/k/v projections reading one
// normalised input, short enough that a weight shared by consecutive blocks is not seen (that
// would make each block's tokens depend on the block before it).
inline constexpr int kNearUse = 4;
// Reads of one value in a run of near reads that get their own token (note, 1): q/k/v and one
// more sibling. Each further step lets a loop of short blocks sharing a weight take one more
// block before its tokens are steady.
inline constexpr int kMaxNearRank = 3;
// A match of fewer tokens than this starts a copy only where it continues the stream's alignment
// (note 2, inner repeats).
inline constexpr uint64_t kLongRun = 2 * kMinMatch;
// A norm over more rows than this moves a branch cut after itself (note 3, the seam).
inline constexpr int64_t kSeamMinRows = 8;

enum class SlotKind : uint8_t { op, barrier };

struct PpRef {
  uint32_t idx = 0xffffffffu;
  uint32_t gen = 0;
  bool valid() const { return idx != 0xffffffffu; }
  bool operator==(const PpRef&) const = default;
  uint64_t bits() const { return (uint64_t{gen} << 32) | idx; }
};

// Output liveness recorded while later events arrive.
struct OutMeta {
  uint64_t last_use_plus1 = 0;   // 0: never used; kUsedElsewhere: read on another stream
  uint64_t released_at = ~0ull;  // stream head when the release was seen; ~0: alive
};
inline constexpr uint64_t kUsedElsewhere = ~0ull;

struct RingEvent {
  TraceEvent ev;
  uint64_t pos = ~0ull;
  uint64_t local_token = 0;  // token without the near-use wiring (signature input)
  uint64_t attrs_hash = 0;   // structural
  OutMeta meta[kMaxEventOutputs];
};

class StreamWindow;
class SegmentSink {
 public:
  virtual ~SegmentSink() = default;
  // Positions [begin, end) of `w` form a sequence whose every op continued an earlier one.
  virtual void on_segment(StreamWindow& w, uint64_t begin, uint64_t end, uint64_t path_hash) = 0;
};

struct WindowParams {
  uint32_t window = 4096;
  int max_segment = 64;
  uint32_t half_life_log2 = 12;
  bool seam = true;  // note 3
};

class StreamWindow {
 public:
  StreamWindow(uint32_t stream, const WindowParams& p);

  uint32_t stream() const { return stream_; }
  uint64_t head() const { return head_; }
  // The stream's clock: its ops, those of served windows included (see skip).
  uint32_t epoch() const { return static_cast<uint32_t>((head_ + skipped_) >> half_life_log2_); }
  // Ops that ran without a position of their own (a served window takes one): the clock still
  // counts them, so counts decay at the same pace whether or not plans serve the stream.
  void skip(uint64_t ops) { skipped_ += ops; }
  // A window of deferred calls is open on the stream (the matcher reports its calls later).
  bool window_open() const { return window_open_; }
  void set_window_open(bool open) { window_open_ = open; }
  uint64_t pp_evictions() const { return pp_evictions_; }
  uint64_t segments() const { return segments_; }
  // The position after the latest barrier (a sync, a wrapped kernel); 0: none yet.
  uint64_t barrier_end() const { return barrier_end_; }

  // Positions appended between these are a served window's calls, replayed (the detector's
  // on_served_event): the plan's unit, which no branch cuts inside (cut_step).
  void begin_replay() { replay_ = 1; }
  void end_replay() { replay_ = 0; }
  // Appends one position; returns its ring slot (the caller fills ev / hashes for calls).
  RingEvent& append(uint64_t token, uint64_t local_token, SlotKind kind);
  // Assigns every position that has its full lookahead, cutting sequences on the way.
  void advance(SegmentSink& sink);
  // Assigns every pending position (end of input for now: tests, drain).
  void flush(SegmentSink& sink);

  // The event at `pos` if still in the ring.
  RingEvent* event_at(uint64_t pos) {
    RingEvent& r = ring_[pos & ring_mask_];
    return r.pos == pos ? &r : nullptr;
  }

 private:
  struct Slot {
    uint64_t token = 0;   // with near-use wiring
    uint64_t local = 0;   // op, attrs, dtypes, ranks only
    uint64_t tri = 0;     // hash of this and the next two local tokens (0: not known)
    uint64_t chain1 = 0;  // previous assigned position in the same local-token bucket, plus one
    uint64_t chain3 = 0;  // same for the trigram bucket
    PpRef pp;
    SlotKind kind = SlotKind::op;
    bool matched = false;
    bool in_replay = false;  // a replayed window's position after its first
  };
  struct ProgramPoint {
    uint64_t local_token = 0;
    uint64_t last_pos = 0;
    uint64_t seg_serial = 0;
    PpRef succ[2];
    PpRef pred[2];
    float succ_n[2] = {0, 0};
    float pred_n[2] = {0, 0};
    float succ_rest = 0;
    float pred_rest = 0;
    uint32_t epoch = 0;
    uint32_t gen = 0;
    bool entry = false;  // some sequence started here (a loop head, the op after a sync)
    bool few_rows = false;  // a norm here has run over at most kSeamMinRows rows (note 3)
    PpRef last_succ, last_pred;  // the neighbours of its latest occurrence
    uint8_t succ_switches = 0;   // times the successor (predecessor) differed from the last one
    uint8_t pred_switches = 0;
    float succ_switch_n = 0, pred_switch_n = 0;  // the same, decaying as the counts do
  };

  Slot& slot(uint64_t pos) { return slots_[pos & window_mask_]; }
  bool in_window(uint64_t pos) const { return pos < head_ && pos + window_ >= head_; }
  bool live(PpRef r) const { return r.valid() && pps_[r.idx].gen == r.gen; }

  void assign(uint64_t i, SegmentSink& sink);
  void search(uint64_t i);
  uint64_t match_len(uint64_t i, uint64_t j, uint64_t lim);
  uint64_t back_len(uint64_t i, uint64_t j, bool* same_start);
  uint64_t trigram(uint64_t i);
  PpRef new_pp(uint64_t local_token, uint64_t pos);
  void decay(ProgramPoint& p);
  void observe_edge(PpRef a, PpRef b);
  bool succ_branches(ProgramPoint& a);
  bool pred_branches(ProgramPoint& b);
  void cut_step(uint64_t i, SegmentSink& sink);
  // Position i, a norm over `rows` (norm_rows) > kSeamMinRows rows at a program point that never
  // saw fewer, reads the output of the pointwise op at i - 1 (note 3, the seam).
  bool seam_at(uint64_t i, int64_t rows);
  // Rows of the norm at position i (input 0's dims but the last); 0: not a norm (or unknown).
  int64_t norm_rows(uint64_t i);
  void close(uint64_t end, SegmentSink& sink);

  uint32_t stream_;
  uint64_t window_;
  uint64_t window_mask_;
  uint64_t ring_mask_;
  uint64_t lookahead_;
  int max_segment_;
  uint32_t half_life_log2_;
  bool seam_;

  std::vector<Slot> slots_;
  std::vector<uint64_t> buckets1_;  // local-token bucket -> most recent assigned position + 1
  std::vector<uint64_t> buckets3_;  // trigram bucket -> most recent assigned position + 1
  std::vector<RingEvent> ring_;
  std::vector<ProgramPoint> pps_;
  std::vector<uint32_t> free_pps_;
  uint32_t clock_hand_ = 0;
  uint64_t pp_evictions_ = 0;

  uint64_t head_ = 0;  // positions appended
  uint64_t skipped_ = 0;
  bool window_open_ = false;
  uint8_t replay_ = 0;  // 0: not replaying; 1: the next position starts a replay; 2: inside one
  uint64_t barrier_end_ = 0;
  uint64_t next_ = 0;  // positions assigned
  uint64_t phrase_off_ = 0;
  uint64_t phrase_left_ = 0;

  bool open_ = false;
  uint64_t seg_begin_ = 0;
  uint64_t serial_ = 0;
  uint32_t seg_unmatched_ = 0;
  uint64_t seg_path_ = 0;
  PpRef prev_;
  bool cut_next_ = false;  // a branch cut moved past a seam: the next position starts a sequence
  uint64_t segments_ = 0;
};

}  // namespace livefuse::monitor
