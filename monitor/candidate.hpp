#pragma once
// Candidate: a hot op sequence as the monitor hands it to the planner (DESIGN.md "The walk").
//
// [ Note -- what identifies a candidate ]
// `signature` hashes, for each op in order: the op, its structural attrs hash, input/output
// dtypes and ranks, and the wiring of every input -- "output k of op j of this sequence" or
// "external slot e", where slots are numbered by first use and the same value used twice is
// the same slot. Never a ValueId, an address or a concrete dim: twelve layers with different
// weights, or one layer at several sequence lengths, share a signature. Concrete shapes live in
// `shapes`. The structural attrs hash is Attrs::hash(), except for reshape, whose target (it
// always equals the output shape) is left to the shape pattern so that a varying dim does not
// split the structure. Candidates are tracked per stream: (stream, signature) is the key.
#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/op_call.hpp"
#include "runtime/plan.hpp"

namespace livefuse::monitor {

struct WireRef {
  enum class Kind : uint8_t { external, internal };
  Kind kind = Kind::external;
  uint16_t index = 0;  // external slot, or the producing op's position in the sequence
  uint8_t output = 0;  // internal: which output of that op
  bool operator==(const WireRef&) const = default;
};

struct CandidateOp {
  OpId op = OpId::kCount;
  Attrs attrs;              // values of the representative occurrence
  uint64_t attrs_hash = 0;  // structural (see the note above)
  boost::container::small_vector<WireRef, 4> inputs;
  boost::container::small_vector<DType, 4> in_dtypes;
  boost::container::small_vector<uint8_t, 4> in_ranks;
  boost::container::small_vector<DType, 2> out_dtypes;
  boost::container::small_vector<uint8_t, 2> out_ranks;
};

struct ExternalSlot {
  DType dtype = DType::f32;
  uint8_t rank = 0;
  uint16_t first_op = 0;  // first use: op position and input index
  uint8_t first_input = 0;
};

// One entry of a shape tuple: a dim of an external slot or of an op's output.
struct DimRef {
  enum class Kind : uint8_t { external, output };
  Kind kind = Kind::external;
  uint16_t index = 0;  // external slot or op position
  uint8_t output = 0;  // Kind::output: which output
  uint8_t axis = 0;
  bool operator==(const DimRef&) const = default;
};

struct ShapeTuple {
  std::vector<int64_t> dims;  // in `ShapePattern::layout` order
  uint64_t count = 0;
};

struct ShapePattern {
  std::vector<DimRef> layout;
  std::vector<ShapeTuple> tuples;  // distinct tuples seen (at most max_shape_tuples), not in `family`
  std::vector<bool> varying;       // per layout entry: differed between tuples ever seen
  uint64_t evicted = 0;            // tuples dropped for the cap (least counted first)
  // Tuples of every length of one loop (runtime/plan.hpp, "shape families"): once
  // kFamilyTuples distinct tuples fit one, its members are counted here, not in `tuples`.
  ShapeFamily family;
  uint64_t family_count = 0;  // occurrences of its members
  static constexpr size_t kFamilyTuples = 3;

  std::vector<DimRef> varying_dims() const;
};

// Per output of each op: what the sequence's occurrences did with it. A value that was read
// after the sequence, or was still held when the stream's next op (or sync) came, must be
// written out by a plan; one that died by then can stay in registers. ("Next op" because a
// plan completes when the call after its last op arrives, so argument temporaries of the last
// call are already gone.)
//
// "Must" is by share, not by any one occurrence: a value that escaped in at most one in
// kRareEscape occurrences stays in registers. A window where it does escape is still right --
// the matcher sees the program hold a value its plan does not write and runs that window
// eagerly (runtime/src/matcher_end.cpp, complete()) -- while one stray reference otherwise
// costs the plan for good: a GPT-2 decode layer whose attention probabilities were once seen
// held was planned writing them out, without its fused attention, sampled at 99 against 99 us
// eager, was rejected, and its process ran 3x slower (H200, 1 process in 9).
struct ValueLiveness {
  static constexpr uint64_t kRareEscape = 16;
  uint16_t op = 0;
  uint8_t output = 0;
  uint16_t internal_uses = 0;    // consumers inside the sequence (structural)
  uint64_t observed = 0;         // occurrences counted
  uint64_t used_after = 0;       // read by a later op (this or another stream)
  uint64_t alive_at_end = 0;     // still held when the stream's next op or sync was recorded
  uint64_t released_inside = 0;  // released before the sequence's last op was recorded
  bool must_materialize() const {
    const uint64_t escaped = used_after + alive_at_end;  // an occurrence may count in both
    return escaped > 0 && escaped * kRareEscape > observed;
  }
};

struct Candidate {
  uint64_t signature = 0;
  uint32_t stream = 0;
  std::vector<CandidateOp> ops;  // one representative occurrence, with wiring
  std::vector<ExternalSlot> externals;
  ShapePattern shapes;
  std::vector<ValueLiveness> liveness;  // ops in order, outputs in order
  double count = 0;                     // decayed occurrence count
  uint64_t occurrences = 0;             // counted occurrences since the sequence was first tracked
  bool hot = false;
  uint32_t version = 0;  // bumped whenever it is handed to the planner again
  uint64_t first_seen_ns = 0;
  uint64_t last_seen_ns = 0;

  size_t size() const { return ops.size(); }
};

// "linear(e0, e1, e2) -> gelu(#0.0) -> ..." for logs and test messages.
std::string describe(const Candidate& c);

// The planner's side. Called on the monitor thread, outside the monitor's locks; must return
// quickly (queue the work). A candidate comes again (higher `version`) when it is hot again
// or gains a new shape tuple.
class CandidateConsumer {
 public:
  virtual ~CandidateConsumer() = default;
  virtual void on_candidate(const Candidate& c) = 0;
  // The sequence is no longer hot on `stream` (its count decayed, or its window was evicted).
  virtual void on_candidate_cold(uint64_t signature, uint32_t stream) {
    (void)signature;
    (void)stream;
  }
};

}  // namespace livefuse::monitor
