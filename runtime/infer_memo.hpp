#pragma once
// InferMemo: what infer_outputs made of the calls a window took, by position, so the same call
// at the same position of the next window is not validated and shaped again. A served decode
// step repeats its calls -- same ops, attrs, input shapes and dtypes -- step after step, and
// infer_outputs was ~400 of an op call's ~1,800 host instructions (bench/RESULTS.md, session 56).
//
// [ Note -- why a remembered result is the result ]
// infer_outputs is a function of the op, its attrs and each input's dtype, shape and device
// (custom ops by id: an id names one registered op for good); nothing else it reads -- strides,
// storage, values -- changes its answer, except the check that every input has storage (or is
// pending, or empty), which is re-run on every call. So a call whose op, attrs (all fields, as
// given, bit for bit) and inputs' dtypes, shapes and devices equal a remembered call's passed
// the same validation and gets the same outputs and the same normalised attrs. Owned by the
// window's thread only (StreamWindow::memo): no lock, no sharing. Bounded: one entry (~0.7 KB) a
// position of the longest window, at most kMaxPositions, a stream a thread; freed at thread exit.
#include <array>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "runtime/op_call.hpp"

namespace livefuse {

class InferMemo {
 public:
  static constexpr size_t kNone = ~size_t{0};
  // Calls with more inputs, windows longer than this: inferred each time, not remembered.
  static constexpr size_t kMaxInputs = 4;
  static constexpr size_t kMaxPositions = 512;

  // Where the thread's next call on this stream falls in its window (0 when it would start
  // one): set once the window has taken a call. Position 0 is not remembered -- most calls that
  // find no window are never taken by one, and would overwrite each other there.
  void set_position(size_t pos) { pos_ = pos; }

  // One call's outputs' shapes and dtypes, its attrs normalised: recalled from the memo, or
  // inferred by infer_outputs (which throws for a bad call: nothing is remembered then) and
  // remembered. Built in place (guaranteed elision): a copy or move of the infos cost a call
  // about what a hit saves. The recalled reference stays valid through the call: entries never
  // move (each its own allocation), and a call made while this one is in flight finds
  // position 0.
  class Shaping {
   public:
    Shaping(InferMemo* memo, OpCall& call);  // null memo: infer_outputs
    const OutputInfos& infos() const { return recalled_ ? *recalled_ : inferred_; }
    // The call's monitor::structural_attrs_hash when the memo holds it (recalled, or just
    // remembered), else 0: the matcher computes it then (~120 instructions a call).
    uint64_t attrs_hash() const { return attrs_hash_; }

   private:
    size_t slot_;
    const OutputInfos* recalled_;
    OutputInfos inferred_;
    uint64_t attrs_hash_ = 0;
  };

  // Calls answered from memory / inferred since the last take (owner thread), zeroed: the
  // matcher adds them to its shared counters once a window, not per call.
  std::pair<uint64_t, uint64_t> take_counts() {
    const std::pair<uint64_t, uint64_t> r{hits_, misses_};
    hits_ = misses_ = 0;
    return r;
  }

 private:
  struct Input {
    Shape shape;
    DType dtype = DType::f32;
    Device device;
  };
  struct Entry {
    OpId op = OpId::kCount;  // kCount: empty (or being remembered)
    uint8_t n = 0;
    // A position whose call changes every window (a decode step's attention over a growing
    // cache) is not compared nor remembered for its next `skip` visits: a miss cost a call more
    // than a hit saves. Doubles with each miss in a row (at most 64 visits), 0 after a hit.
    uint8_t skip = 0, backoff = 0;
    Attrs given;       // as the program passed them
    Attrs normalised;  // as infer_outputs left them
    uint64_t attrs_hash = 0;  // monitor::structural_attrs_hash(op, normalised)
    std::array<Input, kMaxInputs> in;
    OutputInfos infos;
  };
  // The entry `call` would have, or kNone; the position goes back to 0.
  size_t take_slot(const OpCall& call);
  // The entry's infos when it holds `call` (the call's attrs normalised). Else null, and the
  // entry is emptied, holding the call's attrs as given, for remember().
  const OutputInfos* recall(size_t slot, OpCall& call);
  // Returns the entry's attrs hash.
  uint64_t remember(size_t slot, const OpCall& call, const OutputInfos& infos);
  static bool same(const Entry& e, const OpCall& call);

  std::vector<std::unique_ptr<Entry>> entries_;  // by position - 1
  size_t pos_ = 0;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace livefuse
