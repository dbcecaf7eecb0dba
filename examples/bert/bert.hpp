#pragma once
// A BERT encoder (Hugging Face BertModel's last_hidden_state) written with livefuse ops the
// way eager user code is written: no fusion hints, no hand-fused kernels. Whatever gets
// fused is found by livefuse at run time from the repeating op sequence.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "livefuse/livefuse.hpp"

namespace livefuse::bert {

// The fields of a Hugging Face BertConfig that the encoder uses (names as in config.json).
struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  std::string hidden_act = "gelu";  // gelu (erf), gelu_new / gelu_pytorch_tanh, relu

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // Throws livefuse::Error naming the bad field (non-positive sizes, heads not dividing
  // hidden, unknown activation).
  void validate() const;

  // "tiny" (2 layers, hidden 64, 4 heads), "base" (bert-base-uncased), "large".
  static BertConfig preset(std::string_view name);
  // A Hugging Face config.json; unknown keys are ignored, missing ones keep the defaults
  // above (BertConfig's own defaults), wrong types and unsupported settings throw.
  static BertConfig from_json_file(const std::string& path);
  static BertConfig from_json_text(const std::string& text, const std::string& what);
  std::string to_json() const;  // loadable by transformers.BertConfig
};

// One parameter as Hugging Face names it (without the optional "bert." prefix).
struct ParamSpec {
  std::string name;
  Shape shape;
};
std::vector<ParamSpec> param_specs(const BertConfig& cfg);

struct BertEmbeddings {
  Tensor word, position, token_type, ln_w, ln_b;
};

struct BertLayer {
  Tensor q_w, q_b, k_w, k_b, v_w, v_b;      // attention.self.{query,key,value}
  Tensor attn_out_w, attn_out_b;            // attention.output.dense
  Tensor attn_ln_w, attn_ln_b;              // attention.output.LayerNorm
  Tensor inter_w, inter_b;                  // intermediate.dense
  Tensor out_w, out_b, out_ln_w, out_ln_b;  // output.dense, output.LayerNorm
};

class BertModel {
 public:
  // Random weights from `seed` (linear/embedding weights ~ N(0, init_std), biases small,
  // LayerNorm weights near 1): the same seed gives the same model on every device.
  static BertModel random(const BertConfig& cfg, uint64_t seed, DType dtype, Device device,
                          double init_std = 0.02);
  // Hugging Face BertModel weights from a .safetensors file (keys with or without "bert."),
  // converted to `dtype`. Extra keys (pooler, position_ids) are ignored; a missing key or a
  // wrong shape throws naming the file and the key.
  static BertModel from_safetensors(const BertConfig& cfg, const std::string& path, DType dtype,
                                    Device device);

  // input_ids [batch, seq] (i32/i64, values < vocab_size); attention_mask [batch, seq]
  // (1 keep, 0 masked; any dtype; optional); token_type_ids [batch, seq] (optional, zeros).
  // Returns last_hidden_state [batch, seq, hidden] in the model's dtype.
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask = {},
                 const Tensor& token_type_ids = {}) const;

  const BertConfig& config() const { return cfg_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  // Moves every parameter into memory the program holds the address of (Tensor::wrap over a
  // pointer from data_ptr()), as a program does that gets its weights from elsewhere (DLPack,
  // its own loader); `immutable`: declared so (Tensor::mark_immutable), else every deferred
  // call reads a snapshot of them. For measuring what reachable weights cost.
  void wrap_parameters(bool immutable);
  // Every parameter under its Hugging Face name, in param_specs order.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  int64_t num_parameters() const;

 private:
  BertModel(const BertConfig& cfg, DType dtype, Device device);
  std::vector<std::pair<std::string, Tensor*>> slots();
  void make_buffers();

  Tensor embed(const Tensor& ids, const Tensor& token_type_ids) const;
  Tensor extended_mask(const Tensor& attention_mask) const;
  Tensor self_attention(const BertLayer& l, const Tensor& h, const Tensor& mask) const;
  Tensor encoder_layer(const BertLayer& l, const Tensor& h, const Tensor& mask) const;
  Tensor activation(const Tensor& x) const;

  BertConfig cfg_;
  DType dtype_;
  Device device_;
  BertEmbeddings emb_;
  std::vector<BertLayer> layers_;
  Tensor position_ids_;    // arange(max_position_embeddings), like HF's buffer
  Tensor token_type_ids_;  // zeros(max_position_embeddings), like HF's buffer
};

// The smallest finite value of a floating dtype (torch.finfo(dtype).min): what a masked
// position adds to its attention scores.
double dtype_min(DType dtype);

}  // namespace livefuse::bert
