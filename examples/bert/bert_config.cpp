// BertConfig: presets, Hugging Face config.json in and out, and the parameter list.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "examples/bert/bert.hpp"

namespace livefuse::bert {
namespace {

using nlohmann::json;

int64_t get_int(const json& j, const char* key, int64_t dflt, const std::string& what) {
  if (!j.contains(key)) return dflt;
  const json& v = j[key];
  LF_CHECK(v.is_number_integer(), "bert", what, ": \"", key, "\" must be an integer, got ",
           v.dump());
  return v.get<int64_t>();
}

}  // namespace

void BertConfig::validate() const {
  const auto positive = [](int64_t v, const char* name) {
    LF_CHECK(v > 0, "bert", "config: ", name, " must be positive, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(intermediate_size, "intermediate_size");
  positive(max_position_embeddings, "max_position_embeddings");
  positive(type_vocab_size, "type_vocab_size");
  LF_CHECK(hidden_size % num_attention_heads == 0, "bert", "config: hidden_size ", hidden_size,
           " is not a multiple of num_attention_heads ", num_attention_heads);
  LF_CHECK(layer_norm_eps > 0, "bert", "config: layer_norm_eps must be positive, got ",
           layer_norm_eps);
  LF_CHECK(hidden_act == "gelu" || hidden_act == "gelu_new" || hidden_act == "gelu_pytorch_tanh" ||
               hidden_act == "relu",
           "bert", "config: hidden_act \"", hidden_act,
           "\" is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu)");
}

BertConfig BertConfig::preset(std::string_view name) {
  BertConfig c;
  if (name == "tiny") {
    c.vocab_size = 1000;
    c.hidden_size = 64;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.intermediate_size = 256;
    c.max_position_embeddings = 128;
  } else if (name == "base") {
    // bert-base-uncased: the defaults.
  } else if (name == "large") {
    c.hidden_size = 1024;
    c.num_hidden_layers = 24;
    c.num_attention_heads = 16;
    c.intermediate_size = 4096;
  } else {
    LF_CHECK(false, "bert", "unknown preset '", name, "' (tiny, base, large)");
  }
  return c;
}

BertConfig BertConfig::from_json_text(const std::string& text, const std::string& what) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    LF_CHECK(false, "bert", what, ": not valid JSON: ", e.what());
  }
  LF_CHECK(j.is_object(), "bert", what, ": expected a JSON object");
  if (j.contains("model_type")) {
    // Other encoders share most key names but not the math (RoBERTa offsets positions).
    LF_CHECK(j["model_type"] == "bert", "bert", what, ": model_type ", j["model_type"].dump(),
             " is not \"bert\"");
  }
  if (j.contains("position_embedding_type")) {
    LF_CHECK(j["position_embedding_type"] == "absolute", "bert", what, ": position_embedding_type ",
             j["position_embedding_type"].dump(), " is not supported (absolute only)");
  }
  if (j.contains("is_decoder")) {
    LF_CHECK(j["is_decoder"] == false, "bert", what, ": is_decoder must be false (encoder only)");
  }
  BertConfig c;
  c.vocab_size = get_int(j, "vocab_size", c.vocab_size, what);
  c.hidden_size = get_int(j, "hidden_size", c.hidden_size, what);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", c.num_hidden_layers, what);
  c.num_attention_heads = get_int(j, "num_attention_heads", c.num_attention_heads, what);
  c.intermediate_size = get_int(j, "intermediate_size", c.intermediate_size, what);
  c.max_position_embeddings =
      get_int(j, "max_position_embeddings", c.max_position_embeddings, what);
  c.type_vocab_size = get_int(j, "type_vocab_size", c.type_vocab_size, what);
  if (j.contains("layer_norm_eps")) {
    LF_CHECK(j["layer_norm_eps"].is_number(), "bert", what,
             ": \"layer_norm_eps\" must be a number");
    c.layer_norm_eps = j["layer_norm_eps"].get<double>();
  }
  if (j.contains("hidden_act")) {
    LF_CHECK(j["hidden_act"].is_string(), "bert", what, ": \"hidden_act\" must be a string");
    c.hidden_act = j["hidden_act"].get<std::string>();
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (in " + what + ")");
  }
  return c;
}

BertConfig BertConfig::from_json_file(const std::string& path) {
  std::ifstream f(path);
  LF_CHECK(f.good(), "bert", "cannot open config file ", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json_text(ss.str(), path);
}

std::string BertConfig::to_json() const {
  json j = {{"architectures", {"BertModel"}},
            {"model_type", "bert"},
            {"vocab_size", vocab_size},
            {"hidden_size", hidden_size},
            {"num_hidden_layers", num_hidden_layers},
            {"num_attention_heads", num_attention_heads},
            {"intermediate_size", intermediate_size},
            {"hidden_act", hidden_act},
            {"max_position_embeddings", max_position_embeddings},
            {"type_vocab_size", type_vocab_size},
            {"layer_norm_eps", layer_norm_eps},
            {"position_embedding_type", "absolute"},
            {"hidden_dropout_prob", 0.1},
            {"attention_probs_dropout_prob", 0.1},
            {"initializer_range", 0.02},
            {"pad_token_id", 0}};
  return j.dump(2);
}

std::vector<ParamSpec> param_specs(const BertConfig& c) {
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  std::vector<ParamSpec> s = {
      {"embeddings.word_embeddings.weight", {c.vocab_size, h}},
      {"embeddings.position_embeddings.weight", {c.max_position_embeddings, h}},
      {"embeddings.token_type_embeddings.weight", {c.type_vocab_size, h}},
      {"embeddings.LayerNorm.weight", {h}},
      {"embeddings.LayerNorm.bias", {h}},
  };
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "encoder.layer." + std::to_string(i) + ".";
    for (const char* qkv : {"query", "key", "value"}) {
      s.push_back({p + "attention.self." + qkv + ".weight", {h, h}});
      s.push_back({p + "attention.self." + qkv + ".bias", {h}});
    }
    s.push_back({p + "attention.output.dense.weight", {h, h}});
    s.push_back({p + "attention.output.dense.bias", {h}});
    s.push_back({p + "attention.output.LayerNorm.weight", {h}});
    s.push_back({p + "attention.output.LayerNorm.bias", {h}});
    s.push_back({p + "intermediate.dense.weight", {inter, h}});
    s.push_back({p + "intermediate.dense.bias", {inter}});
    s.push_back({p + "output.dense.weight", {h, inter}});
    s.push_back({p + "output.dense.bias", {h}});
    s.push_back({p + "output.LayerNorm.weight", {h}});
    s.push_back({p + "output.LayerNorm.bias", {h}});
  }
  return s;
}

}  // namespace livefuse::bert
