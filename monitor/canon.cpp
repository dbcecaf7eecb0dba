#include "monitor/canon.hpp"

#include <bit>

#include "monitor/hashing.hpp"

namespace livefuse::monitor {

namespace {
constexpr uint32_t kInternalBit = 0x80000000u;
uint64_t wire_code(const WireRef& w) {
  return (static_cast<uint64_t>(w.kind) << 40) | (uint64_t{w.index} << 8) | w.output;
}
}  // namespace

Canonicalizer::Canonicalizer(int max_segment) {
  const uint64_t cap =
      std::bit_ceil(static_cast<uint64_t>(max_segment) * (kMaxEventInputs + kMaxEventOutputs) * 2);
  keys_.resize(cap);
  vals_.resize(cap);
  stamps_.resize(cap, 0);
  mask_ = cap - 1;
}

uint32_t* Canonicalizer::lookup(ValueId id) {
  for (uint64_t h = mix64(id) & mask_;; h = (h + 1) & mask_) {
    if (stamps_[h] != stamp_) return nullptr;
    if (keys_[h] == id) return &vals_[h];
  }
}

void Canonicalizer::put(ValueId id, uint32_t v) {
  uint64_t h = mix64(id) & mask_;
  while (stamps_[h] == stamp_ && keys_[h] != id) h = (h + 1) & mask_;
  stamps_[h] = stamp_;
  keys_[h] = id;
  vals_[h] = v;
}

bool Canonicalizer::run(StreamWindow& w, uint64_t begin, uint64_t end, Canon& c) {
  if (++stamp_ == 0) {  // wrapped: really clear once every 2^32 runs
    std::fill(stamps_.begin(), stamps_.end(), 0);
    stamp_ = 1;
  }
  const uint32_t n = static_cast<uint32_t>(end - begin);
  c.n_ops = n;
  c.wires.clear();
  c.wire_begin.clear();
  c.out_begin.clear();
  c.out_rank.clear();
  c.externals.clear();
  c.internal_uses.clear();
  c.tuple.clear();
  c.used_after.clear();
  c.alive_at_end.clear();
  c.released_inside.clear();
  uint64_t sig = hash_combine(0x5167, n);
  for (uint32_t k = 0; k < n; ++k) {
    RingEvent* r = w.event_at(begin + k);
    if (r == nullptr || r->ev.kind != EventKind::call || (r->ev.flags & kEventTruncated))
      return false;
    const TraceEvent& ev = r->ev;
    if (k == 0) c.first_ns = ev.timestamp_ns;
    c.last_ns = ev.timestamp_ns;
    sig = hash_combine(sig, r->local_token);
    c.wire_begin.push_back(static_cast<uint32_t>(c.wires.size()));
    for (int m = 0; m < ev.n_in; ++m) {
      WireRef wr;
      if (const uint32_t* v = lookup(ev.in_ids[m])) {
        if (*v & kInternalBit) {
          wr.kind = WireRef::Kind::internal;
          wr.index = static_cast<uint16_t>((*v & ~kInternalBit) >> 8);
          wr.output = static_cast<uint8_t>(*v & 0xff);
          ++c.internal_uses[c.out_begin[wr.index] + wr.output];
        } else {
          wr.index = static_cast<uint16_t>(*v);
        }
      } else {
        wr.index = static_cast<uint16_t>(c.externals.size());
        put(ev.in_ids[m], wr.index);
        c.externals.push_back(ExternalSlot{static_cast<DType>(ev.in_dtype[m]), ev.in_rank[m],
                                           static_cast<uint16_t>(k), static_cast<uint8_t>(m)});
      }
      c.wires.push_back(wr);
      sig = hash_combine(sig, wire_code(wr));
    }
    c.out_begin.push_back(static_cast<uint32_t>(c.out_rank.size()));
    for (int o = 0; o < ev.n_out; ++o) {
      put(ev.out_ids[o], kInternalBit | (k << 8) | static_cast<uint32_t>(o));
      c.out_rank.push_back(ev.out_rank[o]);
      c.internal_uses.push_back(0);
      const OutMeta& meta = r->meta[o];
      c.used_after.push_back(meta.last_use_plus1 > end);  // a read at position >= end
      // released_at is the stream's head when the release arrived: `end` means after the last
      // op and before the next one.
      c.alive_at_end.push_back(meta.released_at > end);
      c.released_inside.push_back(meta.released_at < end);
    }
  }
  c.wire_begin.push_back(static_cast<uint32_t>(c.wires.size()));
  c.out_begin.push_back(static_cast<uint32_t>(c.out_rank.size()));

  // The shape tuple: each external at its first use, then every output.
  uint64_t th = 0x7e11;
  for (const ExternalSlot& e : c.externals) {
    const TraceEvent& ev = w.event_at(begin + e.first_op)->ev;
    const int off = ev.in_dims_offset(e.first_input);
    for (int a = 0; a < e.rank; ++a) c.tuple.push_back(ev.dims[off + a]);
  }
  for (uint32_t k = 0; k < n; ++k) {
    const TraceEvent& ev = w.event_at(begin + k)->ev;
    int off = ev.out_dims_offset(0);
    for (int o = 0; o < ev.n_out; ++o)
      for (int a = 0; a < ev.out_rank[o]; ++a) c.tuple.push_back(ev.dims[off++]);
  }
  for (int64_t d : c.tuple) th = hash_combine(th, static_cast<uint64_t>(d));
  c.tuple_hash = th;
  c.signature = sig;
  return true;
}

std::vector<DimRef> Canonicalizer::layout(const Canon& c) {
  std::vector<DimRef> out;
  for (size_t e = 0; e < c.externals.size(); ++e)
    for (uint8_t a = 0; a < c.externals[e].rank; ++a)
      out.push_back({DimRef::Kind::external, static_cast<uint16_t>(e), 0, a});
  for (uint32_t k = 0; k < c.n_ops; ++k)
    for (uint32_t f = c.out_begin[k]; f < c.out_begin[k + 1]; ++f)
      for (uint8_t a = 0; a < c.out_rank[f]; ++a)
        out.push_back({DimRef::Kind::output, static_cast<uint16_t>(k),
                       static_cast<uint8_t>(f - c.out_begin[k]), a});
  return out;
}

}  // namespace livefuse::monitor
