// The BERT encoder itself: the same sequence of ops as Hugging Face's BertModel (eval mode,
// eager attention), written as plain eager livefuse calls.
#include "examples/bert/bert.hpp"

#include <cmath>
#include <limits>

#include "examples/bert/safetensors.hpp"

namespace livefuse::bert {

double dtype_min(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return -65504.0;
    case DType::bf16:
      return -3.3895313892515355e38;  // -(2 - 2^-7) * 2^127
    default:
      return static_cast<double>(std::numeric_limits<float>::lowest());
  }
}

BertModel::BertModel(const BertConfig& cfg, DType dtype, Device device)
    : cfg_(cfg), dtype_(dtype), device_(device) {
  cfg_.validate();
  LF_CHECK(is_floating(dtype), "bert", "model dtype must be f32, f16 or bf16, got ",
           dtype_name(dtype));
  layers_.resize(static_cast<size_t>(cfg_.num_hidden_layers));
}

void BertModel::wrap_parameters(bool immutable) {
  for (auto& [name, t] : slots()) {
    const Tensor owner = contiguous(*t);
    void* p = owner.data_ptr();
    *t = Tensor::wrap(p, owner.shape(), owner.dtype(), owner.device(), [owner](void*) {});
    if (immutable) t->mark_immutable();
  }
}

std::vector<std::pair<std::string, Tensor*>> BertModel::slots() {
  std::vector<std::pair<std::string, Tensor*>> s;
  const std::vector<ParamSpec> specs = param_specs(cfg_);
  s.reserve(specs.size());
  size_t k = 0;
  for (Tensor* t : {&emb_.word, &emb_.position, &emb_.token_type, &emb_.ln_w, &emb_.ln_b})
    s.emplace_back(specs[k++].name, t);
  for (BertLayer& l : layers_) {
    for (Tensor* t : {&l.q_w, &l.q_b, &l.k_w, &l.k_b, &l.v_w, &l.v_b, &l.attn_out_w, &l.attn_out_b,
                      &l.attn_ln_w, &l.attn_ln_b, &l.inter_w, &l.inter_b, &l.out_w, &l.out_b,
                      &l.out_ln_w, &l.out_ln_b})
      s.emplace_back(specs[k++].name, t);
  }
  LF_ASSERT(k == specs.size(), "bert parameter slots out of step with param_specs");
  return s;
}

void BertModel::make_buffers() {
  position_ids_ = arange(cfg_.max_position_embeddings, DType::i64, device_);
  token_type_ids_ = zeros({cfg_.max_position_embeddings}, DType::i64, device_);
}

BertModel BertModel::random(const BertConfig& cfg, uint64_t seed, DType dtype, Device device,
                            double init_std) {
  BertModel m(cfg, dtype, device);
  const std::vector<ParamSpec> specs = param_specs(m.cfg_);
  auto slots = m.slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    const std::string& name = slots[i].first;
    const Shape& shape = specs[i].shape;
    // A distinct stream per parameter, stable under reordering of devices and threads.
    const uint64_t s = seed * 0x9E3779B97F4A7C15ull + (i + 1) * 0xBF58476D1CE4E5B9ull;
    const bool is_ln = name.find("LayerNorm") != std::string::npos;
    const bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    double mean = 0.0, std = init_std;
    if (is_ln && !is_bias) {
      mean = 1.0;
      std = 0.1;
    } else if (is_ln) {
      std = 0.1;
    }
    *slots[i].second = rand_normal(shape, s, mean, std, dtype, device);
  }
  m.make_buffers();
  return m;
}

BertModel BertModel::from_safetensors(const BertConfig& cfg, const std::string& path, DType dtype,
                                      Device device) {
  BertModel m(cfg, dtype, device);
  const safetensors::File f = safetensors::File::open(path);
  const std::vector<ParamSpec> specs = param_specs(m.cfg_);
  // BertModel checkpoints store bare names; BertFor* task models store them under "bert.".
  const bool prefixed = !f.contains(specs[0].name) && f.contains("bert." + specs[0].name);
  auto slots = m.slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    const std::string key = (prefixed ? "bert." : "") + slots[i].first;
    *slots[i].second = f.load(key, specs[i].shape, dtype, device);
  }
  m.make_buffers();
  return m;
}

std::vector<std::pair<std::string, Tensor>> BertModel::named_parameters() const {
  auto s = const_cast<BertModel*>(this)->slots();
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(s.size());
  for (auto& [name, t] : s) out.emplace_back(name, *t);
  return out;
}

int64_t BertModel::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

// ---- forward ------------------------------------------------------------------------------

Tensor BertModel::embed(const Tensor& ids, const Tensor& token_type_ids) const {
  const int64_t seq = ids.dim(1);
  Tensor words = embedding(emb_.word, ids);  // [b, s, h]
  Tensor types = token_type_ids.defined()
                     ? embedding(emb_.token_type, token_type_ids)                      // [b, s, h]
                     : embedding(emb_.token_type, slice(token_type_ids_, 0, 0, seq));  // [s, h]
  Tensor positions = embedding(emb_.position, slice(position_ids_, 0, 0, seq));        // [s, h]
  Tensor e = add(add(words, types), positions);
  return layer_norm(e, emb_.ln_w, emb_.ln_b, cfg_.layer_norm_eps);
}

Tensor BertModel::extended_mask(const Tensor& attention_mask) const {
  // HF: (1 - mask) * finfo(dtype).min, as [batch, 1, 1, seq], added to every head's scores.
  const int64_t b = attention_mask.dim(0), s = attention_mask.dim(1);
  Tensor m = cast(attention_mask, dtype_);
  Tensor ext = mul(sub(m, 1.0), -dtype_min(dtype_));
  return reshape(ext, {b, 1, 1, s});
}

Tensor BertModel::activation(const Tensor& x) const {
  if (cfg_.hidden_act == "gelu") return gelu(x);
  if (cfg_.hidden_act == "relu") return relu(x);
  return gelu_tanh(x);  // gelu_new, gelu_pytorch_tanh (validate() admits nothing else)
}

Tensor BertModel::self_attention(const BertLayer& l, const Tensor& h, const Tensor& mask) const {
  const int64_t b = h.dim(0), s = h.dim(1);
  const int64_t heads = cfg_.num_attention_heads, d = cfg_.head_dim();
  const auto split_heads = [&](const Tensor& x) {  // [b, s, h] -> [b, heads, s, d]
    return permute(reshape(x, {b, s, heads, d}), {0, 2, 1, 3});
  };
  Tensor q = split_heads(linear(h, l.q_w, l.q_b));
  Tensor k = split_heads(linear(h, l.k_w, l.k_b));
  Tensor v = split_heads(linear(h, l.v_w, l.v_b));
  Tensor scores = matmul(q, transpose(k, 2, 3));  // [b, heads, s, s]
  Tensor probs = softmax(scores, 1.0 / std::sqrt(static_cast<double>(d)), mask);
  Tensor ctx = matmul(probs, v);  // [b, heads, s, d]
  ctx = reshape(contiguous(permute(ctx, {0, 2, 1, 3})), {b, s, cfg_.hidden_size});
  return linear(ctx, l.attn_out_w, l.attn_out_b);
}

Tensor BertModel::encoder_layer(const BertLayer& l, const Tensor& h, const Tensor& mask) const {
  Tensor attn = self_attention(l, h, mask);
  Tensor h1 = layer_norm(add(attn, h), l.attn_ln_w, l.attn_ln_b, cfg_.layer_norm_eps);
  Tensor inter = activation(linear(h1, l.inter_w, l.inter_b));
  Tensor out = linear(inter, l.out_w, l.out_b);
  return layer_norm(add(out, h1), l.out_ln_w, l.out_ln_b, cfg_.layer_norm_eps);
}

Tensor BertModel::forward(const Tensor& input_ids, const Tensor& attention_mask,
                          const Tensor& token_type_ids) const {
  LF_CHECK(input_ids.defined() && input_ids.rank() == 2 && is_integral(input_ids.dtype()), "bert",
           "input_ids must be an i32/i64 tensor [batch, seq], got ",
           input_ids.defined() ? input_ids.str() : "undefined");
  const int64_t b = input_ids.dim(0), s = input_ids.dim(1);
  LF_CHECK(b > 0 && s > 0, "bert", "input_ids ", input_ids.shape().str(), " is empty");
  LF_CHECK(s <= cfg_.max_position_embeddings, "bert", "sequence length ", s,
           " exceeds max_position_embeddings ", cfg_.max_position_embeddings);
  const auto same_shape = [&](const Tensor& t, const char* what) {
    LF_CHECK(t.shape() == input_ids.shape(), "bert", what, " ", t.shape().str(),
             " must have the shape of input_ids ", input_ids.shape().str());
  };
  if (attention_mask.defined()) same_shape(attention_mask, "attention_mask");
  if (token_type_ids.defined()) {
    same_shape(token_type_ids, "token_type_ids");
    LF_CHECK(is_integral(token_type_ids.dtype()), "bert", "token_type_ids must be i32/i64, got ",
             dtype_name(token_type_ids.dtype()));
  }

  Tensor ids = input_ids.to(device_);
  Tensor types = token_type_ids.defined() ? token_type_ids.to(device_) : Tensor{};
  Tensor mask = attention_mask.defined() ? extended_mask(attention_mask.to(device_)) : Tensor{};
  Tensor h = embed(ids, types);
  for (const BertLayer& l : layers_) h = encoder_layer(l, h, mask);
  return h;
}

}  // namespace livefuse::bert
