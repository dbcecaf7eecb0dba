// The tiny BERT (2 layers, hidden 64) against the float64 reference, eager and fused.
#include <cstdio>
#include <string>

#include "examples/bert/bert.hpp"
#include "examples/bert/run.hpp"
#include "examples/bert/safetensors.hpp"
#include "tests/bert/bert_reference.hpp"
#include "tests/test_util.hpp"

namespace lf = livefuse;
using lf::bert::BertConfig;
using lf::bert::BertModel;

namespace {

// Switches the process's LIVEFUSE mode for one scope.
struct ModeGuard {
  lf::Config saved;
  explicit ModeGuard(lf::Mode m) : saved(lf::config()) {
    lf::Config c = saved;
    c.mode = m;
    lf::set_config_for_testing(c);
  }
  ~ModeGuard() { lf::set_config_for_testing(saved); }
};

struct Case {
  BertConfig cfg = BertConfig::preset("tiny");
  int64_t b = 2, s = 12;
  std::vector<int64_t> ids, mask;
  Case() {
    ids = lf::bert::random_input_ids(b, s, cfg.vocab_size, 11, lf::Device::cpu()).to_int64s();
    mask = lf::bert::padding_mask(b, s, lf::Device::cpu()).to_int64s();
  }
  lf::Tensor ids_t(lf::Device d) const { return lf::from_int64s(ids, {b, s}, lf::DType::i64, d); }
  lf::Tensor mask_t(lf::Device d) const { return lf::from_int64s(mask, {b, s}, lf::DType::i64, d); }
};

// A larger init than BERT's 0.02 so attention is far from uniform and the mask matters.
constexpr double kInitStd = 0.3;

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const char* what) {
  size_t bad = 0;
  const bool ok = lftest::allclose(got, want, tol, tol, &bad);
  INFO(std::string(what) << ": first mismatch at " << bad << ": got "
                         << (bad < got.size() ? got[bad] : 0) << ", want "
                         << (bad < want.size() ? want[bad] : 0));
  CHECK(ok);
}

}  // namespace

TEST_CASE("bert config: presets, config.json, validation") {
  const BertConfig base = BertConfig::preset("base");
  CHECK(base.hidden_size == 768);
  CHECK(base.num_hidden_layers == 12);
  CHECK(BertConfig::preset("large").num_attention_heads == 16);
  CHECK_THROWS_WITH_AS(BertConfig::preset("huge"), doctest::Contains("unknown preset"), lf::Error);

  const BertConfig tiny = BertConfig::preset("tiny");
  const BertConfig round = BertConfig::from_json_text(tiny.to_json(), "roundtrip");
  CHECK(round.hidden_size == 64);
  CHECK(round.num_hidden_layers == 2);
  CHECK(round.intermediate_size == tiny.intermediate_size);
  CHECK(round.layer_norm_eps == tiny.layer_norm_eps);

  const auto bad = [](const std::string& text, const char* expect) {
    CHECK_THROWS_WITH_AS(BertConfig::from_json_text(text, "cfg.json"), doctest::Contains(expect),
                         lf::Error);
  };
  bad("{\"hidden_size\": 100, \"num_attention_heads\": 12}", "not a multiple");
  bad("{\"model_type\": \"roberta\"}", "model_type");
  bad("{\"hidden_size\": \"768\"}", "must be an integer");
  bad("{\"hidden_act\": \"swish\"}", "hidden_act");
  bad("{\"num_hidden_layers\": 0}", "must be positive");
  bad("{\"position_embedding_type\": \"relative_key\"}", "absolute only");
  bad("[1, 2]", "JSON object");
  bad("{\"vocab_size\": 10,", "not valid JSON");
}

TEST_CASE("bert tiny f32 matches a float64 reference, LIVEFUSE=off") {
  ModeGuard off(lf::Mode::off);
  const Case c;
  const BertModel m = BertModel::random(c.cfg, 5, lf::DType::f32, lf::Device::cpu(), kInitStd);
  const auto want = bert_ref::forward(c.cfg, bert_ref::params_of(m), c.ids, c.mask, c.b, c.s,
                                      lf::bert::dtype_min(lf::DType::f32));
  const lf::Tensor out = m.forward(c.ids_t(m.device()), c.mask_t(m.device()));
  CHECK(out.shape() == lf::Shape{c.b, c.s, c.cfg.hidden_size});
  CHECK(out.dtype() == lf::DType::f32);
  check_close(out.to_doubles(), want, 2e-4, "masked");

  // Without a mask every position attends everywhere.
  const auto want_nomask =
      bert_ref::forward(c.cfg, bert_ref::params_of(m), c.ids, {}, c.b, c.s, 0.0);
  check_close(m.forward(c.ids_t(m.device())).to_doubles(), want_nomask, 2e-4, "unmasked");

  // Explicit token types select rows of token_type_embeddings.
  std::vector<int64_t> types(c.ids.size());
  for (size_t i = 0; i < types.size(); ++i) types[i] = (i / 5) % 2;
  const auto want_types = bert_ref::forward(c.cfg, bert_ref::params_of(m), c.ids, c.mask, c.b, c.s,
                                            lf::bert::dtype_min(lf::DType::f32), types);
  const lf::Tensor tt = lf::from_int64s(types, {c.b, c.s}, lf::DType::i64, m.device());
  check_close(m.forward(c.ids_t(m.device()), c.mask_t(m.device()), tt).to_doubles(), want_types,
              2e-4, "token types");
}

TEST_CASE("bert tiny f32 matches the reference with fusion on, over repeated calls") {
  ModeGuard on(lf::Mode::on);
  const Case c;
  const BertModel m = BertModel::random(c.cfg, 6, lf::DType::f32, lf::Device::cpu(), kInitStd);
  const auto want = bert_ref::forward(c.cfg, bert_ref::params_of(m), c.ids, c.mask, c.b, c.s,
                                      lf::bert::dtype_min(lf::DType::f32));
  const lf::Tensor ids = c.ids_t(m.device()), mask = c.mask_t(m.device());
  // Repeats make the sequence hot: later calls are the ones served by installed plans.
  for (int it = 0; it < 12; ++it) {
    CAPTURE(it);
    check_close(m.forward(ids, mask).to_doubles(), want, 2e-4, "fused");
  }
}

LF_CUDA_TEST_CASE("bert tiny on CUDA matches the float64 reference, fusion off and on") {
  const Case c;
  const lf::Device gpu = lf::Device::cuda(0);
  for (const lf::Mode mode : {lf::Mode::off, lf::Mode::on}) {
    ModeGuard guard(mode);
    for (const lf::DType dt : {lf::DType::f32, lf::DType::f16}) {
      CAPTURE(lf::mode_name(mode));
      CAPTURE(lf::dtype_name(dt));
      const BertModel m = BertModel::random(c.cfg, 12, dt, gpu, kInitStd);
      const auto want = bert_ref::forward(c.cfg, bert_ref::params_of(m), c.ids, c.mask, c.b, c.s,
                                          lf::bert::dtype_min(dt));
      const lf::Tensor ids = c.ids_t(gpu), mask = c.mask_t(gpu);
      for (int it = 0; it < 8; ++it) {
        const lf::Tensor out = m.forward(ids, mask);
        CHECK(out.device() == gpu);
        check_close(out.to_doubles(), want, dt == lf::DType::f32 ? 2e-4 : 2e-2, "cuda");
      }
    }
  }
}

TEST_CASE("bert tiny f16 / bf16 stay near the float64 reference of their rounded weights") {
  const Case c;
  for (const lf::DType dt : {lf::DType::f16, lf::DType::bf16}) {
    CAPTURE(lf::dtype_name(dt));
    const BertModel m = BertModel::random(c.cfg, 7, dt, lf::Device::cpu(), kInitStd);
    const auto want = bert_ref::forward(c.cfg, bert_ref::params_of(m), c.ids, c.mask, c.b, c.s,
                                        lf::bert::dtype_min(dt));
    const double tol = dt == lf::DType::f16 ? 2e-2 : 1.5e-1;
    for (int it = 0; it < 4; ++it) {
      const lf::Tensor out = m.forward(c.ids_t(m.device()), c.mask_t(m.device()));
      CHECK(out.dtype() == dt);
      check_close(out.to_doubles(), want, tol, "low precision");
    }
  }
}

TEST_CASE("bert attention mask: padded tokens do not change the kept ones") {
  const Case c;
  const BertModel m = BertModel::random(c.cfg, 8, lf::DType::f32, lf::Device::cpu(), kInitStd);
  std::vector<int64_t> other = c.ids;
  int64_t changed = 0;
  for (size_t i = 0; i < other.size(); ++i)
    if (c.mask[i] == 0) {
      other[i] = (other[i] + 17) % c.cfg.vocab_size;
      ++changed;
    }
  REQUIRE(changed > 0);
  const lf::Tensor mask = c.mask_t(m.device());
  const auto a = m.forward(c.ids_t(m.device()), mask).to_doubles();
  const auto b =
      m.forward(lf::from_int64s(other, {c.b, c.s}, lf::DType::i64, m.device()), mask).to_doubles();
  const int64_t H = c.cfg.hidden_size;
  bool kept_same = true, padded_differ = false;
  for (size_t t = 0; t < c.mask.size(); ++t)
    for (int64_t i = 0; i < H; ++i) {
      const double d = std::abs(a[t * H + i] - b[t * H + i]);
      if (c.mask[t])
        kept_same = kept_same && d < 1e-5;
      else
        padded_differ = padded_differ || d > 1e-3;
    }
  CHECK(kept_same);
  CHECK(padded_differ);
}

TEST_CASE("bert weights: safetensors round trip, 'bert.' prefix, missing key, wrong shape") {
  const Case c;
  const BertModel m = BertModel::random(c.cfg, 9, lf::DType::f32, lf::Device::cpu(), kInitStd);
  const std::string dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  const std::string path = dir + "/lf_bert_test_weights.safetensors";

  // Task-model layout: "bert." prefix, f16 storage, and extra keys the encoder ignores.
  std::vector<std::pair<std::string, lf::Tensor>> named;
  for (const auto& [name, t] : m.named_parameters())
    named.emplace_back("bert." + name, lf::cast(t, lf::DType::f16));
  named.emplace_back("bert.pooler.dense.weight", lf::rand_normal({64, 64}, 3));
  lf::safetensors::write(path, named, {{"format", "pt"}});
  const BertModel loaded =
      BertModel::from_safetensors(c.cfg, path, lf::DType::f32, lf::Device::cpu());
  const auto orig = m.named_parameters();
  const auto back = loaded.named_parameters();
  REQUIRE(orig.size() == back.size());
  for (size_t i = 0; i < orig.size(); ++i) {
    CAPTURE(orig[i].first);
    CHECK(orig[i].first == back[i].first);
    // f32 -> f16 -> f32: equal to the f16 rounding of the original.
    CHECK(lf::cast(orig[i].second, lf::DType::f16).to_doubles() == back[i].second.to_doubles());
  }

  // A missing key names itself.
  REQUIRE(named[7].first == "bert.encoder.layer.0.attention.self.key.weight");
  named.erase(named.begin() + 7);
  lf::safetensors::write(path, named);
  CHECK_THROWS_WITH_AS(
      BertModel::from_safetensors(c.cfg, path, lf::DType::f32, lf::Device::cpu()),
      doctest::Contains("missing tensor 'bert.encoder.layer.0.attention.self.key.weight'"),
      lf::Error);

  // A config that disagrees with the weights: wrong shape, named with both shapes.
  BertConfig wider = c.cfg;
  wider.intermediate_size = 128;
  std::vector<std::pair<std::string, lf::Tensor>> plain;
  for (const auto& [name, t] : m.named_parameters()) plain.emplace_back(name, t);
  lf::safetensors::write(path, plain);
  CHECK_THROWS_WITH_AS(BertModel::from_safetensors(wider, path, lf::DType::f32, lf::Device::cpu()),
                       doctest::Contains("has shape [256, 64], expected [128, 64]"), lf::Error);
  // Unprefixed names load too, exactly.
  const BertModel exact =
      BertModel::from_safetensors(c.cfg, path, lf::DType::f32, lf::Device::cpu());
  // The weights round-trip bit-exactly; the outputs may come from a fused plan on one call and
  // eager kernels on the other (reductions in another order), so they agree to rounding.
  for (const auto& [name, t] : exact.named_parameters()) {
    bool found = false;
    for (const auto& [n2, t2] : m.named_parameters())
      if (n2 == name) {
        found = true;
        CHECK_MESSAGE(t.to_doubles() == t2.to_doubles(), name);
      }
    CHECK_MESSAGE(found, name);
  }
  CHECK(lftest::allclose(exact.forward(c.ids_t(lf::Device::cpu())).to_doubles(),
                         m.forward(c.ids_t(lf::Device::cpu())).to_doubles(), 1e-4, 1e-5));
  std::remove(path.c_str());
}

TEST_CASE("bert forward rejects malformed inputs") {
  const Case c;
  const BertModel m = BertModel::random(c.cfg, 10, lf::DType::f32, lf::Device::cpu());
  const lf::Tensor ids = c.ids_t(m.device());
  CHECK_THROWS_WITH_AS(m.forward(lf::reshape(ids, {c.b * c.s})), doctest::Contains("[batch, seq]"),
                       lf::Error);
  CHECK_THROWS_WITH_AS(m.forward(lf::cast(ids, lf::DType::f32)), doctest::Contains("i32/i64"),
                       lf::Error);
  CHECK_THROWS_WITH_AS(m.forward(ids, lf::zeros({c.b, c.s + 1})),
                       doctest::Contains("attention_mask"), lf::Error);
  const lf::Tensor long_ids = lf::bert::random_input_ids(1, c.cfg.max_position_embeddings + 1,
                                                         c.cfg.vocab_size, 1, m.device());
  CHECK_THROWS_WITH_AS(m.forward(long_ids), doctest::Contains("max_position_embeddings"),
                       lf::Error);
}

TEST_CASE("bert demo runs the tiny preset on the CPU") {
  lf::bert::DemoOptions opt;
  opt.preset = "tiny";
  opt.device = lf::Device::cpu();
  opt.iters = 3;
  opt.seq = 16;
  opt.warmup_ms = 20;
  const auto r = lf::bert::run_bert_demo(opt);
  CHECK(r.out_shape == std::vector<int64_t>{1, 16, 64});
  CHECK(r.timing.iter_ms.size() == 3);
  CHECK(r.timing.median_ms > 0);
  // LayerNorm'd outputs: mean |x| of order 1, never 0 or NaN.
  CHECK(r.mean_abs > 0.1);
  CHECK(r.mean_abs < 10);
}
