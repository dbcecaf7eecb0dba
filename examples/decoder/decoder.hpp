#pragma once
// Decoder-only language models -- GPT-2 (Hugging Face GPT2LMHeadModel) and Llama
// (LlamaForCausalLM) -- written with livefuse ops the way eager user code is written, with both
// KV-cache styles: the natural eager one (concat each step's keys/values to the cache) and a
// preallocated cache written in place at the step's position (HF's StaticCache). Nothing here
// hints at fusion; livefuse finds the repeating decode step at run time.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "livefuse/livefuse.hpp"

namespace livefuse::decoder {

enum class Arch { gpt2, llama };

// rope_scaling of a Llama config.json: none, "linear" (positions divided by factor) or
// "llama3" (Llama 3.1/3.2: low frequencies slowed by factor, a smooth band between).
struct RopeScaling {
  std::string type;  // "" = none
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// The fields of a Hugging Face config.json the models use. GPT-2 names (n_embd, n_layer, ...)
// are read into the same fields; num_key_value_heads == num_attention_heads for GPT-2.
struct DecoderConfig {
  Arch arch = Arch::llama;
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;
  int64_t head_dim = 0;  // 0: hidden_size / num_attention_heads
  int64_t intermediate_size = 11008;
  int64_t max_position_embeddings = 2048;
  double norm_eps = 1e-6;  // GPT-2 layer_norm_epsilon, Llama rms_norm_eps
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // Llama only (GPT-2 always has biases)
  bool mlp_bias = false;
  std::string hidden_act = "silu";  // GPT-2: gelu_new (tanh form)

  int64_t head_size() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  // Throws livefuse::Error naming the bad field.
  void validate() const;
  // "gpt2-tiny", "llama-tiny" (GQA: 4 heads, 2 KV heads), "gpt2" (GPT-2 small), "llama-1b"
  // (Llama-3.2-1B's shape: hidden 2048, 16 layers, 32 heads, 8 KV heads, ffn 8192, vocab
  // 128256, tied, rope_theta 500000, no rope_scaling).
  static DecoderConfig preset(std::string_view name);
  // A Hugging Face config.json (model_type gpt2 or llama); unknown keys are ignored.
  static DecoderConfig from_json_file(const std::string& path);
  static DecoderConfig from_json_text(const std::string& text, const std::string& what);
  std::string to_json() const;  // loadable by transformers.AutoConfig
};

// One parameter as Hugging Face stores it (name without the "transformer." / "model." prefix
// of the LM head model is not used: names are the full state-dict keys), in HF's layout
// (GPT-2's Conv1D weights [in, out]).
struct ParamSpec {
  std::string name;
  Shape shape;
};
std::vector<ParamSpec> param_specs(const DecoderConfig& cfg);

enum class CacheKind { concat, fixed };  // fixed: preallocated, written in place (StaticCache)
CacheKind parse_cache_kind(std::string_view s);  // "concat" | "static"
std::string_view cache_kind_name(CacheKind k);

struct DecoderLayer {
  Tensor ln1_w, ln1_b, ln2_w, ln2_b;    // GPT-2 ln_1/ln_2; Llama input/post_attention_layernorm
  Tensor qkv_w, qkv_b;                  // GPT-2 attn.c_attn, as [3 * hidden, hidden]
  Tensor q_w, q_b, k_w, k_b, v_w, v_b;  // Llama self_attn.{q,k,v}_proj ([out, in])
  Tensor o_w, o_b;                      // GPT-2 attn.c_proj, Llama self_attn.o_proj
  Tensor up_w, up_b;                    // GPT-2 mlp.c_fc, Llama mlp.up_proj
  Tensor gate_w, gate_b;                // Llama mlp.gate_proj
  Tensor down_w, down_b;                // GPT-2 mlp.c_proj, Llama mlp.down_proj
};

class DecoderModel;

// Keys and values of every layer, [batch, kv_heads, positions, head_dim] each.
class KvCache {
 public:
  // `capacity`: the most positions a generation will hold (prompt + new tokens); a fixed
  // cache allocates it up front (zeros), a concat cache only checks against it.
  static KvCache make(const DecoderModel& model, CacheKind kind, int64_t batch, int64_t capacity);
  CacheKind kind() const { return kind_; }
  int64_t length() const { return length_; }  // positions held
  int64_t capacity() const { return capacity_; }
  int64_t batch() const { return batch_; }

 private:
  friend class DecoderModel;
  CacheKind kind_ = CacheKind::concat;
  int64_t batch_ = 0, capacity_ = 0, length_ = 0;
  std::vector<Tensor> k_, v_;
  Tensor key_positions_;  // fixed: arange(capacity) as [1, capacity], for the mask
};

class DecoderModel {
 public:
  // Random weights from `seed` (matrices ~ N(0, init_std), norm weights near 1, biases
  // small): the same seed gives the same model on every device.
  static DecoderModel random(const DecoderConfig& cfg, uint64_t seed, DType dtype, Device device,
                             double init_std = 0.02);
  // Hugging Face weights (GPT2LMHeadModel / LlamaForCausalLM state-dict keys, with or without
  // the "transformer." / "model." prefix; lm_head.weight optional when tied), converted to
  // `dtype` (f32/f16/bf16 on disk). A missing key or a wrong shape throws naming both.
  static DecoderModel from_safetensors(const DecoderConfig& cfg, const std::string& path,
                                       DType dtype, Device device);

  // ids [batch, T] (i32/i64) at positions cache.length() .. + T; appends their keys/values to
  // `cache`. Returns the logits of the last position, [batch, vocab], in the model's dtype.
  // Prefill is a call with the prompt; a decode step a call with one token per row.
  Tensor forward(const Tensor& ids, KvCache& cache) const;

  const DecoderConfig& config() const { return cfg_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  // Every parameter under its Hugging Face name and in its layout (param_specs order; GPT-2's
  // Conv1D weights as [in, out] views, the tied head omitted).
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  int64_t num_parameters() const;
  size_t weight_bytes() const;

 private:
  DecoderModel(const DecoderConfig& cfg, DType dtype, Device device);
  // Slot of each parameter (param_specs order); `transposed`: stored as [out, in], HF [in, out].
  struct Slot {
    Tensor* t;
    bool transposed;
  };
  std::vector<Slot> slots();
  void finish_load();

  Tensor norm(const Tensor& x, const Tensor& w, const Tensor& b) const;
  Tensor attention(int layer, const Tensor& q, const Tensor& k, const Tensor& v, KvCache& cache,
                   const Tensor& mask) const;
  Tensor gpt2_block(int layer, const Tensor& h, KvCache& cache, const Tensor& mask) const;
  Tensor llama_block(int layer, const Tensor& h, KvCache& cache, const Tensor& mask,
                     const Tensor& cos, const Tensor& sin) const;
  Tensor causal_mask(const KvCache& cache, const Tensor& positions, int64_t T) const;

  DecoderConfig cfg_;
  DType dtype_;
  Device device_;
  Tensor embed_, pos_embed_;  // wte / embed_tokens; wpe (GPT-2)
  Tensor final_w_, final_b_;  // ln_f / norm
  Tensor head_;               // lm_head.weight, or embed_ when tied
  std::vector<DecoderLayer> layers_;
  Tensor inv_freq_;              // Llama: [1, head_dim / 2] f32, as HF's rotary embedding
  Tensor mask_zero_, mask_off_;  // rank 0: what a kept / masked score gets added
};

// The rotary inverse frequencies of a config, as HF computes them (f32), rope_scaling applied.
std::vector<float> rope_inv_freq(const DecoderConfig& cfg);

}  // namespace livefuse::decoder
