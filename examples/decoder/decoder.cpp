// DecoderModel::forward: GPT-2 and Llama blocks as plain eager code over the public API.
#include "examples/decoder/decoder.hpp"

#include <cmath>
#include <numeric>

namespace livefuse::decoder {

KvCache KvCache::make(const DecoderModel& model, CacheKind kind, int64_t batch, int64_t capacity) {
  const DecoderConfig& c = model.config();
  LF_CHECK(batch > 0 && capacity > 0, "decoder",
           "a KV cache needs batch > 0 and capacity > 0, got ", batch, " and ", capacity);
  LF_CHECK(c.arch != Arch::gpt2 || capacity <= c.max_position_embeddings, "decoder", "capacity ",
           capacity, " exceeds GPT-2's n_positions ", c.max_position_embeddings);
  KvCache kv;
  kv.kind_ = kind;
  kv.batch_ = batch;
  kv.capacity_ = capacity;
  const size_t n = static_cast<size_t>(c.num_hidden_layers);
  kv.k_.resize(n);
  kv.v_.resize(n);
  if (kind == CacheKind::fixed) {
    const Shape s{batch, c.num_key_value_heads, capacity, c.head_size()};
    for (size_t l = 0; l < n; ++l) {
      kv.k_[l] = zeros(s, model.dtype(), model.device());
      kv.v_[l] = zeros(s, model.dtype(), model.device());
    }
    kv.key_positions_ = reshape(arange(capacity, DType::i64, model.device()), {1, capacity});
  }
  return kv;
}

Tensor DecoderModel::norm(const Tensor& x, const Tensor& w, const Tensor& b) const {
  if (cfg_.arch == Arch::gpt2) return layer_norm(x, w, b, cfg_.norm_eps);
  // LlamaRMSNorm: normalised in f32, cast back, then scaled in the model's dtype.
  if (dtype_ == DType::f32) return mul(rms_norm(x, {}, cfg_.norm_eps), w);
  return mul(cast(rms_norm(cast(x, DType::f32), {}, cfg_.norm_eps), dtype_), w);
}

// q [B, T, H, D], k / v [B, T, Hkv, D] (views allowed) -> [B, T, H * D]. The cache holds
// [B, Hkv, S, D]; each group of H / Hkv query heads shares one K/V head through a broadcast
// batched matmul (the group's rows stacked), so K/V are never repeated in memory.
Tensor DecoderModel::attention(int layer, const Tensor& q, const Tensor& k, const Tensor& v,
                               KvCache& cache, const Tensor& mask) const {
  const int64_t B = q.dim(0), T = q.dim(1), H = q.dim(2), D = q.dim(3), Hkv = k.dim(2);
  const int64_t G = H / Hkv;
  const Tensor kt = permute(k, {0, 2, 1, 3}), vt = permute(v, {0, 2, 1, 3});
  Tensor K, V;
  Tensor& ck = cache.k_[static_cast<size_t>(layer)];
  Tensor& cv = cache.v_[static_cast<size_t>(layer)];
  if (cache.kind_ == CacheKind::concat) {
    ck = ck.defined() ? concat({ck, kt}, 2) : kt;
    cv = cv.defined() ? concat({cv, vt}, 2) : vt;
  } else {
    index_copy(ck, 2, cache.length_, kt);
    index_copy(cv, 2, cache.length_, vt);
  }
  K = ck;
  V = cv;
  const int64_t S = K.dim(2);
  const Tensor qg = reshape(permute(q, {0, 2, 1, 3}), {B, Hkv, G * T, D});
  Tensor s = reshape(matmul(qg, transpose(K, 2, 3)), {B, Hkv, G, T, S});
  s = softmax(s, 1.0 / std::sqrt(static_cast<double>(D)), mask);
  Tensor o = matmul(reshape(s, {B, Hkv, G * T, S}), V);  // [B, Hkv, G * T, D]
  return reshape(permute(reshape(o, {B, H, T, D}), {0, 2, 1, 3}), {B, T, H * D});
}

Tensor DecoderModel::gpt2_block(int layer, const Tensor& h, KvCache& cache,
                                const Tensor& mask) const {
  const DecoderLayer& l = layers_[static_cast<size_t>(layer)];
  const int64_t B = h.dim(0), T = h.dim(1), C = cfg_.hidden_size, H = cfg_.num_attention_heads;
  const Tensor qkv = linear(norm(h, l.ln1_w, l.ln1_b), l.qkv_w, l.qkv_b);  // [B, T, 3C]
  const auto head = [&](int64_t i) {
    return reshape(slice(qkv, 2, i * C, (i + 1) * C), {B, T, H, C / H});
  };
  const Tensor a = attention(layer, head(0), head(1), head(2), cache, mask);
  const Tensor x = add(h, linear(a, l.o_w, l.o_b));
  Tensor m = linear(norm(x, l.ln2_w, l.ln2_b), l.up_w, l.up_b);
  const std::string& act = cfg_.hidden_act;
  m = act == "gelu" ? gelu(m) : act == "relu" ? relu(m) : gelu_tanh(m);
  return add(x, linear(m, l.down_w, l.down_b));
}

namespace {
// HF's apply_rotary_pos_emb for x [B, T, heads, D]: x * cos + rotate_half(x) * sin, with cos /
// sin [T, D] broadcast over batch and heads.
Tensor rotate(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const int64_t D = x.dim(3);
  const Tensor half = concat({neg(slice(x, 3, D / 2, D)), slice(x, 3, 0, D / 2)}, 3);
  return add(mul(x, cos), mul(half, sin));
}
}  // namespace

Tensor DecoderModel::llama_block(int layer, const Tensor& h, KvCache& cache, const Tensor& mask,
                                 const Tensor& cos, const Tensor& sin) const {
  const DecoderLayer& l = layers_[static_cast<size_t>(layer)];
  const int64_t B = h.dim(0), T = h.dim(1), D = cfg_.head_size();
  const Tensor a = norm(h, l.ln1_w, {});
  const Tensor q = reshape(linear(a, l.q_w, l.q_b), {B, T, cfg_.num_attention_heads, D});
  const Tensor k = reshape(linear(a, l.k_w, l.k_b), {B, T, cfg_.num_key_value_heads, D});
  const Tensor v = reshape(linear(a, l.v_w, l.v_b), {B, T, cfg_.num_key_value_heads, D});
  const Tensor o = attention(layer, rotate(q, cos, sin), rotate(k, cos, sin), v, cache, mask);
  const Tensor x = add(h, linear(o, l.o_w, l.o_b));
  const Tensor m = norm(x, l.ln2_w, {});
  const Tensor g = mul(silu(linear(m, l.gate_w, l.gate_b)), linear(m, l.up_w, l.up_b));
  return add(x, linear(g, l.down_w, l.down_b));
}

// Additive mask [T, S] over the keys the step's queries attend to (0 kept, -inf masked), or
// undefined when every key is visible (a concat-cache decode step).
Tensor DecoderModel::causal_mask(const KvCache& cache, const Tensor& positions, int64_t T) const {
  Tensor keys;
  if (cache.kind_ == CacheKind::fixed) {
    keys = cache.key_positions_;  // the whole cache: positions not written yet are masked too
  } else {
    if (T == 1) return {};
    keys = reshape(arange(cache.length_ + T, DType::i64, device_), {1, cache.length_ + T});
  }
  return where(le(keys, reshape(positions, {T, 1})), mask_zero_, mask_off_);
}

Tensor DecoderModel::forward(const Tensor& ids, KvCache& cache) const {
  LF_CHECK(ids.defined() && ids.rank() == 2 && is_integral(ids.dtype()), "decoder",
           "ids must be [batch, T] of i32/i64, got ", ids.defined() ? ids.str() : "undefined");
  const int64_t B = ids.dim(0), T = ids.dim(1), past = cache.length_;
  LF_CHECK(T > 0, "decoder", "ids must hold at least one position, got ", ids.str());
  LF_CHECK(B == cache.batch_, "decoder", "ids have batch ", B, " but the cache was made for ",
           cache.batch_);
  LF_CHECK(past + T <= cache.capacity_, "decoder", "positions ", past, " + ", T,
           " exceed the cache's capacity ", cache.capacity_);
  LF_CHECK(static_cast<int64_t>(cache.k_.size()) == cfg_.num_hidden_layers, "decoder",
           "the cache was made for another model");
  std::vector<int64_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), past);
  const Tensor positions = from_int64s(pos, {T}, DType::i64, device_);
  const Tensor mask = causal_mask(cache, positions, T);
  Tensor h = embedding(embed_, ids);  // [B, T, C]
  if (cfg_.arch == Arch::gpt2) {
    h = add(h, embedding(pos_embed_, positions));
    for (int l = 0; l < cfg_.num_hidden_layers; ++l) h = gpt2_block(l, h, cache, mask);
  } else {
    // LlamaRotaryEmbedding: angles in f32, cos / sin cast to the model's dtype; [1, T, 1, D].
    const Tensor ang = mul(reshape(cast(positions, DType::f32), {T, 1}), inv_freq_);
    const Tensor emb = reshape(concat({ang, ang}, 1), {1, T, 1, cfg_.head_size()});
    Tensor c = cos(emb), s = sin(emb);
    if (dtype_ != DType::f32) c = cast(c, dtype_), s = cast(s, dtype_);
    for (int l = 0; l < cfg_.num_hidden_layers; ++l) h = llama_block(l, h, cache, mask, c, s);
  }
  cache.length_ += T;
  const Tensor last = slice(h, 1, T - 1, T);  // only the last position's logits are used
  const Tensor logits = linear(norm(last, final_w_, final_b_), head_);
  return reshape(logits, {B, cfg_.vocab_size});
}

}  // namespace livefuse::decoder
