// DecoderModel's parameters: the slots behind param_specs, random weights, safetensors.
#include <limits>

#include "examples/bert/safetensors.hpp"
#include "examples/decoder/decoder.hpp"

namespace livefuse::decoder {

DecoderModel::DecoderModel(const DecoderConfig& cfg, DType dtype, Device device)
    : cfg_(cfg), dtype_(dtype), device_(device) {
  cfg_.validate();
  LF_CHECK(is_floating(dtype), "decoder", "the model dtype must be f32, f16 or bf16, got ",
           dtype_name(dtype));
  layers_.resize(static_cast<size_t>(cfg_.num_hidden_layers));
}

std::vector<DecoderModel::Slot> DecoderModel::slots() {
  // The same order as param_specs (checked by the callers against its length).
  std::vector<Slot> s;
  const bool gpt2 = cfg_.arch == Arch::gpt2;
  s.push_back({&embed_, false});
  if (gpt2) s.push_back({&pos_embed_, false});
  for (DecoderLayer& l : layers_) {
    if (gpt2) {
      for (Slot x : {Slot{&l.ln1_w, false}, Slot{&l.ln1_b, false}, Slot{&l.qkv_w, true},
                     Slot{&l.qkv_b, false}, Slot{&l.o_w, true}, Slot{&l.o_b, false},
                     Slot{&l.ln2_w, false}, Slot{&l.ln2_b, false}, Slot{&l.up_w, true},
                     Slot{&l.up_b, false}, Slot{&l.down_w, true}, Slot{&l.down_b, false}})
        s.push_back(x);
      continue;
    }
    const bool ab = cfg_.attention_bias, mb = cfg_.mlp_bias;
    s.push_back({&l.ln1_w, false});
    for (auto [w, b] : {std::pair{&l.q_w, &l.q_b}, std::pair{&l.k_w, &l.k_b},
                        std::pair{&l.v_w, &l.v_b}, std::pair{&l.o_w, &l.o_b}}) {
      s.push_back({w, false});
      if (ab) s.push_back({b, false});
    }
    s.push_back({&l.ln2_w, false});
    for (auto [w, b] : {std::pair{&l.gate_w, &l.gate_b}, std::pair{&l.up_w, &l.up_b},
                        std::pair{&l.down_w, &l.down_b}}) {
      s.push_back({w, false});
      if (mb) s.push_back({b, false});
    }
  }
  s.push_back({&final_w_, false});
  if (gpt2) s.push_back({&final_b_, false});
  if (!cfg_.tie_word_embeddings) s.push_back({&head_, false});
  return s;
}

void DecoderModel::finish_load() {
  if (cfg_.tie_word_embeddings) head_ = embed_;
  if (cfg_.arch == Arch::llama) {
    const std::vector<float> f = rope_inv_freq(cfg_);
    inv_freq_ = from_floats(f, {1, static_cast<int64_t>(f.size())}, DType::f32, device_);
    inv_freq_.mark_immutable();
  }
  // What the attention scores get added: 0 where kept, -inf where masked (softmax gives 0).
  mask_zero_ = full({}, 0.0, dtype_, device_);
  mask_off_ = full({}, -std::numeric_limits<double>::infinity(), dtype_, device_);
}

DecoderModel DecoderModel::random(const DecoderConfig& cfg, uint64_t seed, DType dtype,
                                  Device device, double init_std) {
  DecoderModel m(cfg, dtype, device);
  const std::vector<ParamSpec> specs = param_specs(m.cfg_);
  std::vector<Slot> slots = m.slots();
  LF_ASSERT(specs.size() == slots.size(), "decoder: ", specs.size(), " specs, ", slots.size(),
            " slots");
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& p = specs[i];
    const uint64_t s = seed * 1000003ull + i;
    const bool is_norm = p.name.find("ln_") != std::string::npos ||
                         p.name.find("layernorm") != std::string::npos ||
                         p.name.find("norm.weight") != std::string::npos;
    const bool is_bias = p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
    Tensor t = is_norm && !is_bias ? rand_uniform(p.shape, s, 0.8, 1.2, dtype, device)
               : is_bias           ? rand_uniform(p.shape, s, -0.05, 0.05, dtype, device)
                                   : rand_normal(p.shape, s, 0.0, init_std, dtype, device);
    if (slots[i].transposed) t = contiguous(t.transpose(0, 1));
    t.mark_immutable();
    *slots[i].t = t;
  }
  m.finish_load();
  return m;
}

DecoderModel DecoderModel::from_safetensors(const DecoderConfig& cfg, const std::string& path,
                                            DType dtype, Device device) {
  DecoderModel m(cfg, dtype, device);
  const safetensors::File f = safetensors::File::open(path);
  const std::vector<ParamSpec> specs = param_specs(m.cfg_);
  std::vector<Slot> slots = m.slots();
  LF_ASSERT(specs.size() == slots.size(), "decoder: spec/slot count");
  const std::string prefix = cfg.arch == Arch::gpt2 ? "transformer." : "model.";
  for (size_t i = 0; i < specs.size(); ++i) {
    std::string key = specs[i].name;
    // Bare GPT2Model / LlamaModel checkpoints have no prefix.
    if (!f.contains(key) && key.rfind(prefix, 0) == 0 && f.contains(key.substr(prefix.size())))
      key = key.substr(prefix.size());
    Tensor t = f.load(key, specs[i].shape, dtype, device);
    if (slots[i].transposed) t = contiguous(t.transpose(0, 1));
    t.mark_immutable();
    *slots[i].t = t;
  }
  m.finish_load();
  return m;
}

std::vector<std::pair<std::string, Tensor>> DecoderModel::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  const std::vector<ParamSpec> specs = param_specs(cfg_);
  std::vector<Slot> s = const_cast<DecoderModel*>(this)->slots();
  for (size_t i = 0; i < specs.size(); ++i)
    out.emplace_back(specs[i].name, s[i].transposed ? s[i].t->transpose(0, 1) : *s[i].t);
  return out;
}

int64_t DecoderModel::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

size_t DecoderModel::weight_bytes() const {
  return static_cast<size_t>(num_parameters()) * dtype_size(dtype_);
}

}  // namespace livefuse::decoder
