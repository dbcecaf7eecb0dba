// InferMemo (runtime/infer_memo.hpp; the Note there says why a remembered result is the result).
// A hit must cost well under infer_outputs's ~400 instructions, so the compares are whole words,
// unrolled, without branches per field (through memcmp and Dims::operator==, and with a deque,
// a hit cost ~300).
#include "runtime/infer_memo.hpp"

#include "monitor/detector.hpp"

#include <algorithm>
#include <bit>

namespace livefuse {

namespace {
// Attrs compared whole, the unused slots of i and f too, bit for bit (a -0.0 or a NaN is a miss,
// never a wrong hit); the words or'ed together, one branch at the end.
bool same_attrs(const Attrs& a, const Attrs& b) {
  uint64_t diff = static_cast<uint64_t>(a.ni ^ b.ni) | static_cast<uint64_t>(a.nf ^ b.nf) |
                  static_cast<uint64_t>(a.dtype != b.dtype) |
                  static_cast<uint64_t>(a.scalar_operand != b.scalar_operand) |
                  static_cast<uint64_t>(a.custom_id ^ b.custom_id);
#pragma GCC unroll 16
  for (size_t k = 0; k < a.i.size(); ++k) diff |= static_cast<uint64_t>(a.i[k] ^ b.i[k]);
#pragma GCC unroll 4
  for (size_t k = 0; k < a.f.size(); ++k)
    diff |= std::bit_cast<uint64_t>(a.f[k]) ^ std::bit_cast<uint64_t>(b.f[k]);
  return diff == 0;
}

// A Dims's slots past its rank are compared too (they are zero wherever a shape is built):
// slots that differ there only cost a miss.
bool same_shape(const Shape& a, const Shape& b) {
  uint64_t diff = static_cast<uint64_t>(a.rank ^ b.rank);
#pragma GCC unroll 8
  for (int k = 0; k < kMaxDims; ++k) diff |= static_cast<uint64_t>(a.v[k] ^ b.v[k]);
  return diff == 0;
}
}  // namespace

bool InferMemo::same(const Entry& e, const OpCall& call) {
  if (e.op != call.op || e.n != call.inputs.size() || !same_attrs(e.given, call.attrs))
    return false;
  for (size_t k = 0; k < e.n; ++k) {
    const TensorImpl* t = call.inputs[k].impl();
    if (!t || t->dtype != e.in[k].dtype || !(t->device == e.in[k].device) ||
        !same_shape(t->shape, e.in[k].shape) || !has_data(*t))
      return false;
  }
  return true;
}

size_t InferMemo::take_slot(const OpCall& call) {
  const size_t pos = pos_;
  pos_ = 0;  // until the window says where the next call falls (set_position)
  if (pos == 0 || pos > kMaxPositions || call.inputs.size() > kMaxInputs ||
      call.op == OpId::opaque)
    return kNone;
  if (pos <= entries_.size())
    if (Entry& e = *entries_[pos - 1]; e.skip) return --e.skip, kNone;
  return pos - 1;
}

const OutputInfos* InferMemo::recall(size_t slot, OpCall& call) {
  while (entries_.size() <= slot) entries_.push_back(std::make_unique<Entry>());
  Entry& e = *entries_[slot];
  if (same(e, call)) {
    ++hits_;
    e.backoff = 0;
    call.attrs = e.normalised;
    return &e.infos;
  }
  ++misses_;
  e.backoff = e.backoff ? std::min<uint8_t>(2 * e.backoff, 64) : 1;
  // Emptied before infer_outputs runs: if it throws, the entry holds nothing half-made.
  e.op = OpId::kCount;
  e.given = call.attrs;
  return nullptr;
}

uint64_t InferMemo::remember(size_t slot, const OpCall& call, const OutputInfos& infos) {
  Entry& e = *entries_[slot];
  e.skip = e.backoff > 1 ? e.backoff : 0;  // a second miss in a row: skip the next visits
  e.n = static_cast<uint8_t>(call.inputs.size());
  e.normalised = call.attrs;
  for (size_t k = 0; k < e.n; ++k) {
    const TensorImpl& t = *call.inputs[k].impl();
    e.in[k] = Input{t.shape, t.dtype, t.device};
  }
  e.infos = infos;
  e.attrs_hash = monitor::structural_attrs_hash(call.op, call.attrs);
  e.op = call.op;  // last: the entry holds the call only now
  return e.attrs_hash;
}

InferMemo::Shaping::Shaping(InferMemo* memo, OpCall& call)
    : slot_(memo ? memo->take_slot(call) : kNone),
      recalled_(slot_ != kNone ? memo->recall(slot_, call) : nullptr),
      inferred_(recalled_ ? OutputInfos() : infer_outputs(call)) {
  if (recalled_)
    attrs_hash_ = memo->entries_[slot_]->attrs_hash;
  else if (slot_ != kNone)
    attrs_hash_ = memo->remember(slot_, call, inferred_);
}

}  // namespace livefuse
