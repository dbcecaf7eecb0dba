#pragma once
// EventSynth: builds TraceEvents the way the executor would report them, without running ops.
// For the detector's tests and the monitor benchmark (which must measure detection alone).
#include <algorithm>
#include <initializer_list>
#include <unordered_map>
#include <utility>
#include <vector>

#include "monitor/trace_event.hpp"

namespace livefuse::monitor {

class EventSynth {
 public:
  explicit EventSynth(uint32_t stream = 0) : stream_(stream) {}

  void set_stream(uint32_t s) { stream_ = s; }
  std::vector<TraceEvent>& events() { return events_; }

  // A value from outside the traced code (a weight, an input).
  ValueId value(const Shape& s, DType dt = DType::f32) {
    const ValueId id = next_++;
    shapes_[id] = {s, dt};
    return id;
  }

  // One op call with inputs `ins` and one output of shape `out`; returns the output's id.
  ValueId call(OpId op, std::initializer_list<ValueId> ins, const Shape& out, Attrs a = {},
               DType out_dtype = DType::f32) {
    TraceEvent ev{};
    ev.kind = EventKind::call;
    ev.timestamp_ns = ++clock_;
    ev.stream = stream_;
    ev.op = op;
    ev.attrs = a;
    int nd = 0;
    for (ValueId id : ins) {
      const auto& [s, dt] = shapes_.at(id);
      const int m = ev.n_in++;
      ev.in_ids[m] = id;
      ev.in_dtype[m] = static_cast<uint8_t>(dt);
      ev.in_rank[m] = static_cast<uint8_t>(s.rank);
      for (int k = 0; k < s.rank; ++k) ev.dims[nd++] = static_cast<int32_t>(s[k]);
    }
    const ValueId out_id = value(out, out_dtype);
    ev.n_out = 1;
    ev.out_ids[0] = out_id;
    ev.out_dtype[0] = static_cast<uint8_t>(out_dtype);
    ev.out_rank[0] = static_cast<uint8_t>(out.rank);
    for (int k = 0; k < out.rank; ++k) ev.dims[nd++] = static_cast<int32_t>(out[k]);
    events_.push_back(ev);
    return out_id;
  }

  void release(ValueId id) {
    TraceEvent ev{};
    ev.kind = EventKind::release;
    ev.value = id;
    events_.push_back(ev);
    shapes_.erase(id);
  }

  void sync() {
    TraceEvent ev{};
    ev.kind = EventKind::sync;
    ev.stream = stream_;
    ev.timestamp_ns = ++clock_;
    events_.push_back(ev);
  }

  // The matcher opened a window of deferred calls; a plan served one (runtime/trace_sink.hpp).
  void window_open() {
    TraceEvent ev{};
    fill_window_open_event(ev, stream_);
    events_.push_back(ev);
  }
  // Without ids: the detector cannot replay it (a barrier that counts for the structure).
  void served(uint64_t signature, uint32_t plan_stream, uint32_t n_ops) {
    TraceEvent ev{};
    fill_served_event(ev, signature, plan_stream, n_ops, stream_);
    ev.timestamp_ns = ++clock_;
    events_.push_back(ev);
  }
  // With what the runtime sends (trace_event.hpp): the window's outputs are `outs` (ids in
  // order, made by value()), `released` the bits of those that went with the window.
  void served(uint64_t signature, uint32_t plan_stream, uint32_t n_ops,
              const std::vector<ValueId>& externals, const std::vector<ValueId>& outs,
              uint64_t released, uint64_t tuple_key) {
    for (size_t e = kServedIdsPerEvent; e < externals.size(); e += kServedIdsPerEvent) {
      TraceEvent ids{};
      ids.kind = EventKind::served_ids;
      ids.stream = stream_;
      ids.n_in = static_cast<uint8_t>(std::min<size_t>(kServedIdsPerEvent, externals.size() - e));
      for (int k = 0; k < ids.n_in; ++k) ids.served_ids[k] = externals[e + k];
      events_.push_back(ids);
    }
    TraceEvent ev{};
    fill_served_event(ev, signature, plan_stream, n_ops, stream_);
    ev.timestamp_ns = ++clock_;
    ev.in_ids[2] = outs.front();
    ev.in_ids[3] = tuple_key;
    ev.in_ids[4] = released;
    ev.in_ids[5] = externals.size();
    ev.out_ids[0] = outs.size();
    for (size_t e = 0; e < externals.size() && e < kServedIdsPerEvent; ++e)
      ev.served_ids[e] = externals[e];
    events_.push_back(ev);
    for (size_t f = 0; f < outs.size(); ++f)
      if (released >> f & 1) shapes_.erase(outs[f]);
  }

 private:
  uint32_t stream_;
  ValueId next_ = 1;
  uint64_t clock_ = 0;
  std::vector<TraceEvent> events_;
  std::unordered_map<ValueId, std::pair<Shape, DType>> shapes_;
};

// Streams shaped like models.
namespace synth {

inline Attrs ints(std::initializer_list<int64_t> v) {
  Attrs a;
  for (int64_t x : v) a.push_int(x);
  return a;
}
inline Attrs ln_attrs() {
  Attrs a = ints({1, 1});
  a.push_float(1e-5);
  return a;
}

struct SynthLayer {
  std::vector<ValueId> w;  // 16 weights
};

inline SynthLayer layer_weights(EventSynth& s, int d) {
  SynthLayer l;
  const Shape shapes[] = {{d},    {d}, {d, d}, {d}, {d, d},     {d},     {d, d},     {d},
                          {d, d}, {d}, {d},    {d}, {4 * d, d}, {4 * d}, {d, 4 * d}, {d}};
  for (const Shape& sh : shapes) l.w.push_back(s.value(sh));
  return l;
}

// A layer's intermediates: t(v) notes v and returns it; release_all() releases them after the
// layer's last op, like locals at a function's return.
struct LayerTemps {
  EventSynth& s;
  std::vector<ValueId> ids;
  ValueId operator()(ValueId v) {
    ids.push_back(v);
    return v;
  }
  void release_all() {
    for (ValueId id : ids) s.release(id);
  }
};

// A pre-LN encoder layer: 22 ops, q/k/v projections with identical op sequences. Intermediates
// are released after the layer's last op, like locals at a function's return.
inline constexpr int kEncoderLayerOps = 22;
inline ValueId encoder_layer(EventSynth& s, ValueId x, const SynthLayer& L, int S, int D,
                             int H = 2) {
  const auto& w = L.w;
  const int Dh = D / H;
  LayerTemps t{s, {}};
  const Attrs lin = ints({1, 0});
  ValueId h = t(s.call(OpId::layer_norm, {x, w[0], w[1]}, {S, D}, ln_attrs()));
  ValueId q = t(s.call(OpId::linear, {h, w[2], w[3]}, {S, D}, lin));
  ValueId k = t(s.call(OpId::linear, {h, w[4], w[5]}, {S, D}, lin));
  ValueId v = t(s.call(OpId::linear, {h, w[6], w[7]}, {S, D}, lin));
  q = t(s.call(OpId::reshape, {q}, {S, H, Dh}, ints({S, H, Dh})));
  q = t(s.call(OpId::permute, {q}, {H, S, Dh}, ints({1, 0, 2})));
  k = t(s.call(OpId::reshape, {k}, {S, H, Dh}, ints({S, H, Dh})));
  k = t(s.call(OpId::permute, {k}, {H, Dh, S}, ints({1, 2, 0})));
  v = t(s.call(OpId::reshape, {v}, {S, H, Dh}, ints({S, H, Dh})));
  v = t(s.call(OpId::permute, {v}, {H, S, Dh}, ints({1, 0, 2})));
  ValueId a = t(s.call(OpId::matmul, {q, k}, {H, S, S}));
  Attrs sm;
  sm.push_float(0.125);
  sm.push_int(0);
  a = t(s.call(OpId::softmax, {a}, {H, S, S}, sm));
  ValueId o = t(s.call(OpId::matmul, {a, v}, {H, S, Dh}));
  o = t(s.call(OpId::permute, {o}, {S, H, Dh}, ints({1, 0, 2})));
  o = t(s.call(OpId::reshape, {o}, {S, D}, ints({S, D})));
  o = t(s.call(OpId::linear, {o, w[8], w[9]}, {S, D}, lin));
  ValueId x1 = t(s.call(OpId::add, {x, o}, {S, D}));
  ValueId m = t(s.call(OpId::layer_norm, {x1, w[10], w[11]}, {S, D}, ln_attrs()));
  m = t(s.call(OpId::linear, {m, w[12], w[13]}, {S, 4 * D}, lin));
  m = t(s.call(OpId::gelu, {m}, {S, 4 * D}));
  m = t(s.call(OpId::linear, {m, w[14], w[15]}, {S, D}, lin));
  const ValueId out = s.call(OpId::add, {x1, m}, {S, D});
  t.release_all();
  return out;
}

// A post-LN BERT encoder layer as examples/bert/bert.cpp records it (Hugging Face BertLayer,
// eager attention): 24 ops, and the q/k/v projections each followed by their own reshape and
// permute, so the three read the layer input 3 and 6 ops apart. `x` is [B, S, D]; `mask`, when
// not 0, is the additive attention mask every layer's softmax reads.
inline constexpr int kBertLayerOps = 24;
inline ValueId bert_layer(EventSynth& s, ValueId x, const SynthLayer& L, int B, int S, int D,
                          int H = 4, ValueId mask = 0) {
  const auto& w = L.w;
  const int Dh = D / H;
  LayerTemps t{s, {}};
  const Attrs lin = ints({1, 0});
  auto split_heads = [&](ValueId p) {
    p = t(s.call(OpId::reshape, {p}, {B, S, H, Dh}, ints({B, S, H, Dh})));
    return t(s.call(OpId::permute, {p}, {B, H, S, Dh}, ints({0, 2, 1, 3})));
  };
  const ValueId q = split_heads(t(s.call(OpId::linear, {x, w[2], w[3]}, {B, S, D}, lin)));
  const ValueId k = split_heads(t(s.call(OpId::linear, {x, w[4], w[5]}, {B, S, D}, lin)));
  const ValueId v = split_heads(t(s.call(OpId::linear, {x, w[6], w[7]}, {B, S, D}, lin)));
  const ValueId kt = t(s.call(OpId::permute, {k}, {B, H, Dh, S}, ints({0, 1, 3, 2})));
  ValueId a = t(s.call(OpId::matmul, {q, kt}, {B, H, S, S}, ints({0, 0})));
  Attrs sm;
  sm.push_float(0.125);
  sm.push_int(mask != 0 ? 1 : 0);
  a = t(mask != 0 ? s.call(OpId::softmax, {a, mask}, {B, H, S, S}, sm)
                  : s.call(OpId::softmax, {a}, {B, H, S, S}, sm));
  ValueId o = t(s.call(OpId::matmul, {a, v}, {B, H, S, Dh}, ints({0, 0})));
  o = t(s.call(OpId::permute, {o}, {B, S, H, Dh}, ints({0, 2, 1, 3})));
  o = t(s.call(OpId::contiguous, {o}, {B, S, H, Dh}));
  o = t(s.call(OpId::reshape, {o}, {B, S, D}, ints({B, S, D})));
  o = t(s.call(OpId::linear, {o, w[8], w[9]}, {B, S, D}, lin));
  ValueId h1 = t(s.call(OpId::add, {o, x}, {B, S, D}));
  h1 = t(s.call(OpId::layer_norm, {h1, w[0], w[1]}, {B, S, D}, ln_attrs()));
  ValueId m = t(s.call(OpId::linear, {h1, w[12], w[13]}, {B, S, 4 * D}, lin));
  m = t(s.call(OpId::gelu, {m}, {B, S, 4 * D}));
  m = t(s.call(OpId::linear, {m, w[14], w[15]}, {B, S, D}, lin));
  m = t(s.call(OpId::add, {m, h1}, {B, S, D}));
  const ValueId out = s.call(OpId::layer_norm, {m, w[10], w[11]}, {B, S, D}, ln_attrs());
  t.release_all();
  return out;
}

// A Llama decoder layer as examples/decoder/decoder.cpp records it (f32): the same short
// stretches twice -- [rms_norm, mul, linear] for each norm, the 7-op rotary for q and for k,
// [linear, add, rms_norm] after attention and after the MLP -- which a first look takes for
// repeats (monitor/stream_window.hpp, note 2). `x` is [S, D]; cos / sin [S, Dh] are shared by
// every layer; w: norm1, q, k, v, o, norm2, gate, up, down. 40 ops.
inline constexpr int kLlamaLayerOps = 40;
inline ValueId llama_layer(EventSynth& s, ValueId x, const std::vector<ValueId>& w, ValueId cos,
                           ValueId sin, int S, int D, int H = 2) {
  const int Dh = D / H;
  LayerTemps t{s, {}};
  const Attrs lin = ints({1, 0});
  auto norm = [&](ValueId v, ValueId g) {
    const ValueId r = t(s.call(OpId::rms_norm, {v}, {S, D}, ln_attrs()));
    return t(s.call(OpId::mul, {r, g}, {S, D}));
  };
  auto rotary = [&](ValueId v) {  // x * cos + rotate_half(x) * sin
    const ValueId hi = t(s.call(OpId::slice, {v}, {S, H, Dh / 2}, ints({2, Dh / 2, Dh, 1})));
    const ValueId ng = t(s.call(OpId::neg, {hi}, {S, H, Dh / 2}));
    const ValueId lo = t(s.call(OpId::slice, {v}, {S, H, Dh / 2}, ints({2, 0, Dh / 2, 1})));
    const ValueId half = t(s.call(OpId::concat, {ng, lo}, {S, H, Dh}, ints({2})));
    const ValueId a = t(s.call(OpId::mul, {v, cos}, {S, H, Dh}));
    const ValueId b = t(s.call(OpId::mul, {half, sin}, {S, H, Dh}));
    return t(s.call(OpId::add, {a, b}, {S, H, Dh}));
  };
  const ValueId a = norm(x, w[0]);
  const ValueId q = t(s.call(OpId::reshape, {t(s.call(OpId::linear, {a, w[1]}, {S, D}, lin))},
                             {S, H, Dh}, ints({S, H, Dh})));
  const ValueId k = t(s.call(OpId::reshape, {t(s.call(OpId::linear, {a, w[2]}, {S, D}, lin))},
                             {S, H, Dh}, ints({S, H, Dh})));
  const ValueId v = t(s.call(OpId::reshape, {t(s.call(OpId::linear, {a, w[3]}, {S, D}, lin))},
                             {S, H, Dh}, ints({S, H, Dh})));
  const ValueId kr = rotary(k);
  const ValueId qr = rotary(q);
  const ValueId qp = t(s.call(OpId::permute, {qr}, {H, S, Dh}, ints({1, 0, 2})));
  const ValueId kp = t(s.call(OpId::permute, {kr}, {H, Dh, S}, ints({1, 2, 0})));
  const ValueId vp = t(s.call(OpId::permute, {v}, {H, S, Dh}, ints({1, 0, 2})));
  ValueId sc = t(s.call(OpId::matmul, {qp, kp}, {H, S, S}));
  Attrs sm;
  sm.push_float(0.125);
  sm.push_int(0);
  sc = t(s.call(OpId::softmax, {sc}, {H, S, S}, sm));
  ValueId o = t(s.call(OpId::matmul, {sc, vp}, {H, S, Dh}));
  o = t(s.call(OpId::permute, {o}, {S, H, Dh}, ints({1, 0, 2})));
  o = t(s.call(OpId::reshape, {o}, {S, D}, ints({S, D})));
  o = t(s.call(OpId::linear, {o, w[4]}, {S, D}, lin));
  const ValueId x1 = t(s.call(OpId::add, {x, o}, {S, D}));
  const ValueId m = norm(x1, w[5]);
  const ValueId g = t(s.call(OpId::silu, {t(s.call(OpId::linear, {m, w[6]}, {S, 4 * D}, lin))},
                             {S, 4 * D}));
  const ValueId u = t(s.call(OpId::linear, {m, w[7]}, {S, 4 * D}, lin));
  const ValueId gu = t(s.call(OpId::mul, {g, u}, {S, 4 * D}));
  const ValueId d = t(s.call(OpId::linear, {gu, w[8]}, {S, D}, lin));
  const ValueId out = s.call(OpId::add, {x1, d}, {S, D});
  t.release_all();
  return out;
}

}  // namespace synth

}  // namespace livefuse::monitor
