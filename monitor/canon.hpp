#pragma once
// Canonical form of one occurrence of a sequence (positions [begin, end) of a stream): its
// structural signature (see the note in candidate.hpp), wiring, external slots, concrete shape
// tuple and what happened to each output. Computed from the ring events, into reused buffers.
#include <cstdint>
#include <vector>

#include "monitor/candidate.hpp"
#include "monitor/stream_window.hpp"

namespace livefuse::monitor {

struct Canon {
  uint64_t signature = 0;
  uint64_t tuple_hash = 0;
  uint32_t n_ops = 0;
  std::vector<WireRef> wires;        // every input, ops in order
  std::vector<uint32_t> wire_begin;  // per op (n_ops + 1 entries)
  std::vector<uint32_t> out_begin;   // per op (n_ops + 1 entries), into the flat outputs
  std::vector<uint8_t> out_rank;     // per flat output
  std::vector<ExternalSlot> externals;
  std::vector<uint16_t> internal_uses;  // per flat output
  std::vector<int64_t> tuple;           // external dims (slot order), then output dims
  // This occurrence, per flat output.
  std::vector<uint8_t> used_after, alive_at_end, released_inside;
  uint64_t first_ns = 0, last_ns = 0;
};

class Canonicalizer {
 public:
  explicit Canonicalizer(int max_segment);
  // False when the range cannot become a candidate (an event left the ring or was truncated).
  bool run(StreamWindow& w, uint64_t begin, uint64_t end, Canon& c);
  // What each entry of `c.tuple` is.
  static std::vector<DimRef> layout(const Canon& c);

 private:
  uint32_t* lookup(ValueId id);
  void put(ValueId id, uint32_t v);

  std::vector<ValueId> keys_;
  std::vector<uint32_t> vals_;
  std::vector<uint32_t> stamps_;
  uint32_t stamp_ = 0;
  uint64_t mask_ = 0;
};

}  // namespace livefuse::monitor
