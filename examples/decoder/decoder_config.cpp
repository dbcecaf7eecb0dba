// DecoderConfig: presets, Hugging Face config.json in and out, the parameter list and the
// rotary frequencies.
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "examples/decoder/decoder.hpp"

namespace livefuse::decoder {
namespace {

using nlohmann::json;

int64_t get_int(const json& j, const char* key, int64_t dflt, const std::string& what) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  const json& v = j[key];
  LF_CHECK(v.is_number_integer(), "decoder", what, ": \"", key, "\" must be an integer, got ",
           v.dump());
  return v.get<int64_t>();
}
double get_num(const json& j, const char* key, double dflt, const std::string& what) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  LF_CHECK(j[key].is_number(), "decoder", what, ": \"", key, "\" must be a number, got ",
           j[key].dump());
  return j[key].get<double>();
}
bool get_bool(const json& j, const char* key, bool dflt, const std::string& what) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  LF_CHECK(j[key].is_boolean(), "decoder", what, ": \"", key, "\" must be true or false");
  return j[key].get<bool>();
}
std::string get_str(const json& j, const char* key, const std::string& dflt,
                    const std::string& what) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  LF_CHECK(j[key].is_string(), "decoder", what, ": \"", key, "\" must be a string");
  return j[key].get<std::string>();
}

}  // namespace

void DecoderConfig::validate() const {
  const auto positive = [](int64_t v, const char* name) {
    LF_CHECK(v > 0, "decoder", "config: ", name, " must be positive, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  positive(intermediate_size, "intermediate_size");
  positive(max_position_embeddings, "max_position_embeddings");
  LF_CHECK(head_dim > 0 || hidden_size % num_attention_heads == 0, "decoder",
           "config: hidden_size ", hidden_size, " is not a multiple of num_attention_heads ",
           num_attention_heads);
  LF_CHECK(num_attention_heads % num_key_value_heads == 0, "decoder",
           "config: num_attention_heads ", num_attention_heads,
           " is not a multiple of num_key_value_heads ", num_key_value_heads);
  LF_CHECK(head_size() % 2 == 0 || arch == Arch::gpt2, "decoder", "config: head_dim ", head_size(),
           " must be even for rotary embeddings");
  LF_CHECK(norm_eps > 0, "decoder", "config: the norm epsilon must be positive, got ", norm_eps);
  LF_CHECK(rope_theta > 0, "decoder", "config: rope_theta must be positive, got ", rope_theta);
  if (arch == Arch::gpt2) {
    LF_CHECK(num_key_value_heads == num_attention_heads, "decoder",
             "config: GPT-2 has no grouped-query attention");
    LF_CHECK(hidden_size == num_attention_heads * head_size(), "decoder",
             "config: GPT-2's head_dim is hidden_size / n_head");
    LF_CHECK(hidden_act == "gelu_new" || hidden_act == "gelu_pytorch_tanh" ||
                 hidden_act == "gelu" || hidden_act == "relu",
             "decoder", "config: activation_function \"", hidden_act,
             "\" is not supported (gelu_new, gelu_pytorch_tanh, gelu, relu)");
  } else {
    LF_CHECK(hidden_act == "silu", "decoder", "config: hidden_act \"", hidden_act,
             "\" is not supported for Llama (silu)");
    const std::string& t = rope_scaling.type;
    LF_CHECK(t.empty() || t == "default" || t == "linear" || t == "llama3", "decoder",
             "config: rope_scaling type \"", t, "\" is not supported (linear, llama3)");
    LF_CHECK(rope_scaling.factor > 0, "decoder", "config: rope_scaling factor must be positive");
  }
}

DecoderConfig DecoderConfig::preset(std::string_view name) {
  DecoderConfig c;
  if (name == "gpt2-tiny" || name == "gpt2") {
    c.arch = Arch::gpt2;
    c.hidden_act = "gelu_new";
    c.norm_eps = 1e-5;
    c.tie_word_embeddings = true;
    if (name == "gpt2") {  // GPT-2 small
      c.vocab_size = 50257, c.hidden_size = 768, c.num_hidden_layers = 12;
      c.num_attention_heads = c.num_key_value_heads = 12;
      c.intermediate_size = 3072, c.max_position_embeddings = 1024;
    } else {
      c.vocab_size = 512, c.hidden_size = 64, c.num_hidden_layers = 2;
      c.num_attention_heads = c.num_key_value_heads = 4;
      c.intermediate_size = 256, c.max_position_embeddings = 256;
    }
  } else if (name == "llama-tiny") {
    c.vocab_size = 512, c.hidden_size = 64, c.num_hidden_layers = 2;
    c.num_attention_heads = 4, c.num_key_value_heads = 2;
    c.intermediate_size = 160, c.max_position_embeddings = 512;
    c.norm_eps = 1e-5, c.rope_theta = 10000.0;
  } else if (name == "llama-1b") {
    c.vocab_size = 128256, c.hidden_size = 2048, c.num_hidden_layers = 16;
    c.num_attention_heads = 32, c.num_key_value_heads = 8;
    c.intermediate_size = 8192, c.max_position_embeddings = 131072;
    c.norm_eps = 1e-5, c.rope_theta = 500000.0, c.tie_word_embeddings = true;
  } else {
    LF_CHECK(false, "decoder", "unknown preset '", name,
             "' (gpt2-tiny, llama-tiny, gpt2, llama-1b)");
  }
  c.validate();
  return c;
}

DecoderConfig DecoderConfig::from_json_text(const std::string& text, const std::string& what) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    LF_CHECK(false, "decoder", what, ": not valid JSON: ", e.what());
  }
  LF_CHECK(j.is_object(), "decoder", what, ": expected a JSON object");
  const std::string type = get_str(j, "model_type", "", what);
  LF_CHECK(type == "gpt2" || type == "llama", "decoder", what, ": model_type \"", type,
           "\" is not supported (gpt2, llama)");
  DecoderConfig c;
  if (type == "gpt2") {
    c.arch = Arch::gpt2;
    c.vocab_size = get_int(j, "vocab_size", 50257, what);
    c.hidden_size = get_int(j, "n_embd", 768, what);
    c.num_hidden_layers = get_int(j, "n_layer", 12, what);
    c.num_attention_heads = c.num_key_value_heads = get_int(j, "n_head", 12, what);
    c.intermediate_size = get_int(j, "n_inner", 4 * c.hidden_size, what);
    c.max_position_embeddings = get_int(j, "n_positions", 1024, what);
    c.norm_eps = get_num(j, "layer_norm_epsilon", 1e-5, what);
    c.hidden_act = get_str(j, "activation_function", "gelu_new", what);
    c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", true, what);
    LF_CHECK(get_bool(j, "scale_attn_weights", true, what), "decoder", what,
             ": scale_attn_weights false is not supported");
    LF_CHECK(!get_bool(j, "scale_attn_by_inverse_layer_idx", false, what) &&
                 !get_bool(j, "reorder_and_upcast_attn", false, what),
             "decoder", what,
             ": scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn are not supported");
  } else {
    c.arch = Arch::llama;
    c.vocab_size = get_int(j, "vocab_size", 32000, what);
    c.hidden_size = get_int(j, "hidden_size", 4096, what);
    c.num_hidden_layers = get_int(j, "num_hidden_layers", 32, what);
    c.num_attention_heads = get_int(j, "num_attention_heads", 32, what);
    c.num_key_value_heads = get_int(j, "num_key_value_heads", c.num_attention_heads, what);
    c.head_dim = get_int(j, "head_dim", 0, what);
    c.intermediate_size = get_int(j, "intermediate_size", 11008, what);
    c.max_position_embeddings = get_int(j, "max_position_embeddings", 2048, what);
    c.norm_eps = get_num(j, "rms_norm_eps", 1e-6, what);
    c.hidden_act = get_str(j, "hidden_act", "silu", what);
    c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", false, what);
    c.attention_bias = get_bool(j, "attention_bias", false, what);
    c.mlp_bias = get_bool(j, "mlp_bias", false, what);
    // transformers 5 moves rope settings into rope_parameters; 4.x keeps rope_theta at the top.
    const json rp = j.contains("rope_parameters") && j["rope_parameters"].is_object()
                        ? j["rope_parameters"]
                        : json::object();
    c.rope_theta = get_num(rp, "rope_theta", get_num(j, "rope_theta", 10000.0, what), what);
    json rs = j.contains("rope_scaling") && j["rope_scaling"].is_object() ? j["rope_scaling"] : rp;
    std::string rtype = get_str(rs, "rope_type", get_str(rs, "type", "", what), what);
    if (rtype == "default") rtype.clear();
    c.rope_scaling.type = rtype;
    c.rope_scaling.factor = get_num(rs, "factor", 1.0, what);
    c.rope_scaling.low_freq_factor = get_num(rs, "low_freq_factor", 1.0, what);
    c.rope_scaling.high_freq_factor = get_num(rs, "high_freq_factor", 4.0, what);
    c.rope_scaling.original_max_position_embeddings =
        get_int(rs, "original_max_position_embeddings", 8192, what);
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (in " + what + ")");
  }
  return c;
}

DecoderConfig DecoderConfig::from_json_file(const std::string& path) {
  std::ifstream f(path);
  LF_CHECK(f.good(), "decoder", "cannot open config file ", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json_text(ss.str(), path);
}

std::string DecoderConfig::to_json() const {
  json j;
  if (arch == Arch::gpt2) {
    j = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"vocab_size", vocab_size},
         {"n_embd", hidden_size},
         {"n_layer", num_hidden_layers},
         {"n_head", num_attention_heads},
         {"n_inner", intermediate_size},
         {"n_positions", max_position_embeddings},
         {"n_ctx", max_position_embeddings},
         {"layer_norm_epsilon", norm_eps},
         {"activation_function", hidden_act},
         {"tie_word_embeddings", tie_word_embeddings},
         {"resid_pdrop", 0.0},
         {"embd_pdrop", 0.0},
         {"attn_pdrop", 0.0}};
  } else {
    j = {{"architectures", {"LlamaForCausalLM"}},
         {"model_type", "llama"},
         {"vocab_size", vocab_size},
         {"hidden_size", hidden_size},
         {"num_hidden_layers", num_hidden_layers},
         {"num_attention_heads", num_attention_heads},
         {"num_key_value_heads", num_key_value_heads},
         {"head_dim", head_size()},
         {"intermediate_size", intermediate_size},
         {"max_position_embeddings", max_position_embeddings},
         {"rms_norm_eps", norm_eps},
         {"rope_theta", rope_theta},
         {"hidden_act", hidden_act},
         {"tie_word_embeddings", tie_word_embeddings},
         {"attention_bias", attention_bias},
         {"mlp_bias", mlp_bias},
         {"attention_dropout", 0.0}};
    if (!rope_scaling.type.empty())
      j["rope_scaling"] = {
          {"rope_type", rope_scaling.type},
          {"factor", rope_scaling.factor},
          {"low_freq_factor", rope_scaling.low_freq_factor},
          {"high_freq_factor", rope_scaling.high_freq_factor},
          {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
  }
  return j.dump(2);
}

std::vector<ParamSpec> param_specs(const DecoderConfig& c) {
  const int64_t h = c.hidden_size, inter = c.intermediate_size, d = c.head_size();
  std::vector<ParamSpec> s;
  if (c.arch == Arch::gpt2) {
    s = {{"transformer.wte.weight", {c.vocab_size, h}},
         {"transformer.wpe.weight", {c.max_position_embeddings, h}}};
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      const std::string p = "transformer.h." + std::to_string(i) + ".";
      s.push_back({p + "ln_1.weight", {h}});
      s.push_back({p + "ln_1.bias", {h}});
      s.push_back({p + "attn.c_attn.weight", {h, 3 * h}});  // Conv1D: [in, out]
      s.push_back({p + "attn.c_attn.bias", {3 * h}});
      s.push_back({p + "attn.c_proj.weight", {h, h}});
      s.push_back({p + "attn.c_proj.bias", {h}});
      s.push_back({p + "ln_2.weight", {h}});
      s.push_back({p + "ln_2.bias", {h}});
      s.push_back({p + "mlp.c_fc.weight", {h, inter}});
      s.push_back({p + "mlp.c_fc.bias", {inter}});
      s.push_back({p + "mlp.c_proj.weight", {inter, h}});
      s.push_back({p + "mlp.c_proj.bias", {h}});
    }
    s.push_back({"transformer.ln_f.weight", {h}});
    s.push_back({"transformer.ln_f.bias", {h}});
  } else {
    const int64_t q = c.num_attention_heads * d, kv = c.num_key_value_heads * d;
    s = {{"model.embed_tokens.weight", {c.vocab_size, h}}};
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      s.push_back({p + "input_layernorm.weight", {h}});
      s.push_back({p + "self_attn.q_proj.weight", {q, h}});
      if (c.attention_bias) s.push_back({p + "self_attn.q_proj.bias", {q}});
      s.push_back({p + "self_attn.k_proj.weight", {kv, h}});
      if (c.attention_bias) s.push_back({p + "self_attn.k_proj.bias", {kv}});
      s.push_back({p + "self_attn.v_proj.weight", {kv, h}});
      if (c.attention_bias) s.push_back({p + "self_attn.v_proj.bias", {kv}});
      s.push_back({p + "self_attn.o_proj.weight", {h, q}});
      if (c.attention_bias) s.push_back({p + "self_attn.o_proj.bias", {h}});
      s.push_back({p + "post_attention_layernorm.weight", {h}});
      s.push_back({p + "mlp.gate_proj.weight", {inter, h}});
      if (c.mlp_bias) s.push_back({p + "mlp.gate_proj.bias", {inter}});
      s.push_back({p + "mlp.up_proj.weight", {inter, h}});
      if (c.mlp_bias) s.push_back({p + "mlp.up_proj.bias", {inter}});
      s.push_back({p + "mlp.down_proj.weight", {h, inter}});
      if (c.mlp_bias) s.push_back({p + "mlp.down_proj.bias", {h}});
    }
    s.push_back({"model.norm.weight", {h}});
  }
  if (!c.tie_word_embeddings) s.push_back({"lm_head.weight", {c.vocab_size, h}});
  return s;
}

std::vector<float> rope_inv_freq(const DecoderConfig& c) {
  // As transformers computes them, in f32: 1 / theta^(arange(0, d, 2) / d).
  const int64_t d = c.head_size();
  std::vector<float> f;
  for (int64_t i = 0; i < d; i += 2) {
    const float e = static_cast<float>(i) / static_cast<float>(d);
    f.push_back(1.0f / std::pow(static_cast<float>(c.rope_theta), e));
  }
  const RopeScaling& r = c.rope_scaling;
  if (r.type == "linear") {
    for (float& x : f) x = static_cast<float>(x / r.factor);
  } else if (r.type == "llama3") {
    const double old_len = static_cast<double>(r.original_max_position_embeddings);
    const double low_wavelen = old_len / r.low_freq_factor,
                 high_wavelen = old_len / r.high_freq_factor;
    for (float& x : f) {
      const double wavelen = 2 * M_PI / x;
      if (wavelen < high_wavelen) continue;  // high frequencies stay
      if (wavelen > low_wavelen) {
        x = static_cast<float>(x / r.factor);
        continue;
      }
      const double smooth =
          (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      x = static_cast<float>((1 - smooth) * x / r.factor + smooth * x);
    }
  }
  return f;
}

CacheKind parse_cache_kind(std::string_view s) {
  if (s == "concat") return CacheKind::concat;
  if (s == "static") return CacheKind::fixed;
  LF_CHECK(false, "decoder", "unknown cache kind '", s, "' (concat, static)");
}

std::string_view cache_kind_name(CacheKind k) {
  return k == CacheKind::concat ? "concat" : "static";
}

}  // namespace livefuse::decoder
