// GPT-2 and Llama (grouped-query attention) decoders against float64 references written from
// Hugging Face's modeling code: greedy tokens for 64 steps and the logits they came from, both
// KV-cache styles, fusion off and on (plans must serve), and the HF file formats.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "examples/bert/safetensors.hpp"
#include "examples/decoder/generate.hpp"
#include "livefuse/config.hpp"
#include "livefuse/inspect.hpp"
#include "tests/decoder/decoder_reference.hpp"
#include "tests/test_util.hpp"

namespace lf = livefuse;
namespace lfd = livefuse::decoder;

namespace {

struct ModeGuard {
  lf::Config saved;
  explicit ModeGuard(lf::Mode m, int sample = -1) : saved(lf::config()) {
    lf::Config c = saved;
    c.mode = m;
    if (sample >= 0) c.sample = sample;
    lf::set_config_for_testing(c);
  }
  ~ModeGuard() { lf::set_config_for_testing(saved); }
};

// The tiny configs of the suite, written here (no network, no files but our own).
lfd::DecoderConfig tiny(lfd::Arch arch) {
  lfd::DecoderConfig c =
      lfd::DecoderConfig::preset(arch == lfd::Arch::gpt2 ? "gpt2-tiny" : "llama-tiny");
  c.vocab_size = 384;
  c.num_hidden_layers = 2;
  return c;
}

constexpr double kInitStd = 0.08;  // logits well apart, so greedy choices are not near-ties
constexpr int64_t kSteps = 64;

lf::Tensor prompt(int64_t batch, int64_t len, int64_t vocab, lf::Device dev) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < batch * len; ++i) v.push_back((i * 37 + 11) % vocab);
  return lf::from_int64s(v, {batch, len}, lf::DType::i64, dev);
}

// max |got - want| / max |want| over one row of logits.
double rel_error(const float* got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(got[i]) - want[i]));
    den = std::max(den, std::abs(want[i]));
  }
  return num / den;
}

// Checks a greedy generation against the reference, teacher-forced on the tokens generated:
// every step's logits within `tol` and its token the reference's argmax.
void check_against_reference(const lfd::DecoderModel& m, const lf::Tensor& p,
                             const lfd::GenerateResult& r, double tol) {
  const decoder_ref::Params P = decoder_ref::params_of(m);
  const std::vector<int64_t> pv = p.to_int64s();
  const int64_t B = p.dim(0), T = p.dim(1), V = m.config().vocab_size;
  REQUIRE(r.logits.size() == static_cast<size_t>(kSteps));
  double worst = 0;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> seq(pv.begin() + b * T, pv.begin() + (b + 1) * T);
    for (int64_t s = 0; s < kSteps; ++s) {
      const std::vector<double> want = decoder_ref::last_logits(m.config(), P, seq);
      const float* got = r.logits[static_cast<size_t>(s)].data() + b * V;
      worst = std::max(worst, rel_error(got, want));
      const int64_t best = std::max_element(want.begin(), want.end()) - want.begin();
      const int64_t tok = r.tokens[static_cast<size_t>(b)][static_cast<size_t>(s)];
      if (tok != best) {
        INFO("row " << b << " step " << s << ": token " << tok << ", reference " << best);
        CHECK(tok == best);
        return;
      }
      seq.push_back(tok);
    }
  }
  INFO("worst logits relative error " << worst);
  CHECK(worst <= tol);
}

}  // namespace

TEST_CASE("decoder tiny f32: greedy tokens and logits match the reference, both cache styles") {
  ModeGuard off(lf::Mode::off);
  for (const lfd::Arch arch : {lfd::Arch::gpt2, lfd::Arch::llama})
    for (const lfd::CacheKind kind : {lfd::CacheKind::concat, lfd::CacheKind::fixed}) {
      CAPTURE(arch == lfd::Arch::gpt2 ? "gpt2" : "llama");
      CAPTURE(lfd::cache_kind_name(kind));
      const lfd::DecoderModel m =
          lfd::DecoderModel::random(tiny(arch), 3, lf::DType::f32, lf::Device::cpu(), kInitStd);
      const lf::Tensor p = prompt(2, 5, m.config().vocab_size, m.device());
      const lfd::GenerateResult r = lfd::generate(m, p, kSteps, kind, {}, true);
      REQUIRE(r.tokens.size() == 2);
      CHECK(r.tokens[0].size() == static_cast<size_t>(kSteps));
      CHECK(r.step_ms.size() == static_cast<size_t>(kSteps - 1));
      check_against_reference(m, p, r, 1e-4);
    }
}

TEST_CASE("decoder tiny: fusion on serves plans and gives fusion off's tokens, both cache styles") {
  for (const lfd::Arch arch : {lfd::Arch::gpt2, lfd::Arch::llama})
    for (const lfd::CacheKind kind : {lfd::CacheKind::concat, lfd::CacheKind::fixed}) {
      CAPTURE(arch == lfd::Arch::gpt2 ? "gpt2" : "llama");
      CAPTURE(lfd::cache_kind_name(kind));
      const lfd::DecoderModel m =
          lfd::DecoderModel::random(tiny(arch), 4, lf::DType::f32, lf::Device::cpu(), kInitStd);
      const lf::Tensor p = prompt(1, 6, m.config().vocab_size, m.device());
      // A static cache's K and V writes are held to share a launch with fusion on, never off
      // (runtime/write_batch.hpp): the tokens below are checked with them engaged.
      const auto held = [] { return lf::inspect().counter("matcher", "writes_held").value_or(0); };
      lfd::GenerateResult eager;
      {
        ModeGuard off(lf::Mode::off);
        const uint64_t h0 = held();
        eager = lfd::generate(m, p, kSteps, kind, {}, true);
        CHECK(held() == h0);
      }
      ModeGuard on(lf::Mode::on, /*sample=*/0);
      const uint64_t h0 = held();
      // Plans are made in the background: repeat until they serve (each run must still match).
      uint64_t served = 0;
      for (int run = 0; run < 8 && served == 0; ++run) {
        CAPTURE(run);
        const uint64_t before = lfd::plan_use().served_calls;
        const lfd::GenerateResult fused = lfd::generate(m, p, kSteps, kind, {}, true);
        served = lfd::plan_use().served_calls - before;
        CHECK(fused.tokens == eager.tokens);
        double worst = 0;
        for (size_t s = 0; s < fused.logits.size(); ++s) {
          std::vector<double> want(eager.logits[s].begin(), eager.logits[s].end());
          worst = std::max(worst, rel_error(fused.logits[s].data(), want));
        }
        CHECK(worst <= 1e-4);
      }
      CHECK(served > 0);
      if (kind == lfd::CacheKind::fixed) CHECK(held() > h0);
      else CHECK(held() == h0);
    }
}

TEST_CASE(
    "decoder: concat and static caches give the same logits; prefill then steps equals one "
    "prefill") {
  ModeGuard off(lf::Mode::off);
  const lfd::DecoderModel m = lfd::DecoderModel::random(tiny(lfd::Arch::llama), 5, lf::DType::f32,
                                                        lf::Device::cpu(), kInitStd);
  const lf::Tensor p = prompt(1, 7, m.config().vocab_size, m.device());
  lfd::KvCache whole = lfd::KvCache::make(m, lfd::CacheKind::fixed, 1, 16);
  const std::vector<float> once = m.forward(p, whole).to_floats();
  for (const lfd::CacheKind kind : {lfd::CacheKind::concat, lfd::CacheKind::fixed}) {
    lfd::KvCache kv = lfd::KvCache::make(m, kind, 1, 16);
    m.forward(lf::slice(p, 1, 0, 4), kv);
    lf::Tensor last;
    for (int64_t t = 4; t < 7; ++t) last = m.forward(lf::slice(p, 1, t, t + 1), kv);
    CHECK(kv.length() == 7);
    const std::vector<float> stepped = last.to_floats();
    std::vector<double> want(once.begin(), once.end());
    CHECK(rel_error(stepped.data(), want) <= 1e-5);
  }
}

TEST_CASE("decoder f16 / bf16 stay near the reference of their rounded weights") {
  ModeGuard off(lf::Mode::off);
  for (const lf::DType dt : {lf::DType::f16, lf::DType::bf16})
    for (const lfd::Arch arch : {lfd::Arch::gpt2, lfd::Arch::llama}) {
      CAPTURE(lf::dtype_name(dt));
      const lfd::DecoderModel m =
          lfd::DecoderModel::random(tiny(arch), 6, dt, lf::Device::cpu(), kInitStd);
      const lf::Tensor p = prompt(1, 6, m.config().vocab_size, m.device());
      lfd::KvCache kv = lfd::KvCache::make(m, lfd::CacheKind::fixed, 1, 6);
      const lf::Tensor logits = m.forward(p, kv);
      CHECK(logits.dtype() == dt);
      const std::vector<float> got = logits.to_floats();
      const auto want =
          decoder_ref::last_logits(m.config(), decoder_ref::params_of(m), p.to_int64s());
      CHECK(rel_error(got.data(), want) <= (dt == lf::DType::f16 ? 2e-2 : 6e-2));
    }
}

TEST_CASE("decoder: Hugging Face config.json and safetensors round trip") {
  ModeGuard off(lf::Mode::off);
  const auto dir =
      std::filesystem::temp_directory_path() / ("lf-decoder-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const lfd::Arch arch : {lfd::Arch::gpt2, lfd::Arch::llama}) {
    lfd::DecoderConfig cfg = tiny(arch);
    if (arch == lfd::Arch::llama) cfg.tie_word_embeddings = false;  // lm_head.weight on disk
    const lfd::DecoderModel m =
        lfd::DecoderModel::random(cfg, 7, lf::DType::f32, lf::Device::cpu(), kInitStd);
    const std::string cj = (dir / "config.json").string(),
                      st = (dir / "model.safetensors").string();
    std::ofstream(cj) << cfg.to_json();
    lf::safetensors::write(st, m.named_parameters());
    const lfd::DecoderConfig back = lfd::DecoderConfig::from_json_file(cj);
    CHECK(back.to_json() == cfg.to_json());
    const lfd::DecoderModel loaded =
        lfd::DecoderModel::from_safetensors(back, st, lf::DType::f32, lf::Device::cpu());
    CHECK(loaded.num_parameters() == m.num_parameters());
    const lf::Tensor p = prompt(1, 4, cfg.vocab_size, m.device());
    lfd::KvCache a = lfd::KvCache::make(m, lfd::CacheKind::concat, 1, 4),
                 b = lfd::KvCache::make(loaded, lfd::CacheKind::concat, 1, 4);
    CHECK(m.forward(p, a).to_floats() == loaded.forward(p, b).to_floats());
  }
  // A Llama config as transformers writes it, with llama3 rope scaling and GQA.
  const lfd::DecoderConfig c = lfd::DecoderConfig::from_json_text(
      R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
          "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 100, "rms_norm_eps": 1e-5,
          "rope_theta": 500000.0, "tie_word_embeddings": true, "max_position_embeddings": 1024,
          "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})",
      "cfg.json");
  CHECK(c.num_key_value_heads == 2);
  CHECK(c.rope_scaling.type == "llama3");
  const std::vector<float> f = lfd::rope_inv_freq(c);
  CHECK(f.size() == 8);
  CHECK(f[0] == doctest::Approx(1.0));                     // high frequency: unchanged
  CHECK(f[7] < 1.0 / std::pow(500000.0, 14.0 / 16) / 31);  // low frequency: divided by 32
  CHECK_THROWS_WITH_AS(lfd::DecoderConfig::from_json_text(R"({"model_type": "mistral"})", "x.json"),
                       doctest::Contains("not supported"), lf::Error);
  CHECK_THROWS_WITH_AS(
      lfd::DecoderConfig::from_json_text(
          R"({"model_type": "llama", "num_attention_heads": 6, "num_key_value_heads": 4, "hidden_size": 48})",
          "x.json"),
      doctest::Contains("num_key_value_heads"), lf::Error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("decoder: sampling is reproducible from its seed; top_k 1 and tiny top_p are greedy") {
  ModeGuard off(lf::Mode::off);
  const lfd::DecoderModel m = lfd::DecoderModel::random(tiny(lfd::Arch::gpt2), 8, lf::DType::f32,
                                                        lf::Device::cpu(), kInitStd);
  const lf::Tensor p = prompt(2, 4, m.config().vocab_size, m.device());
  lfd::SampleOptions s;
  s.temperature = 1.5, s.top_k = 50, s.top_p = 0.9, s.seed = 42;
  const auto a = lfd::generate(m, p, 12, lfd::CacheKind::concat, s).tokens;
  CHECK(lfd::generate(m, p, 12, lfd::CacheKind::fixed, s).tokens == a);
  // top_k on the device (lf::topk) and over the whole row on the host pick the same tokens.
  CHECK(lfd::generate(m, p, 12, lfd::CacheKind::concat, s, /*keep_logits=*/true).tokens == a);
  s.seed = 43;
  CHECK(lfd::generate(m, p, 12, lfd::CacheKind::concat, s).tokens != a);
  const auto greedy = lfd::generate(m, p, 12, lfd::CacheKind::concat).tokens;
  s.top_k = 1;
  CHECK(lfd::generate(m, p, 12, lfd::CacheKind::concat, s).tokens == greedy);
  s.top_k = 0, s.top_p = 1e-9;
  CHECK(lfd::generate(m, p, 12, lfd::CacheKind::concat, s).tokens == greedy);
  {
    // With fusion on, topk (two outputs) sits inside the decode windows plans are made of.
    ModeGuard on(lf::Mode::on, 0);
    s.seed = 42, s.top_k = 50, s.top_p = 0.9;
    uint64_t served = 0;
    for (int run = 0; run < 8 && served == 0; ++run) {
      const uint64_t before = lfd::plan_use().served_calls;
      CHECK(lfd::generate(m, p, 12, lfd::CacheKind::concat, s).tokens == a);
      served = lfd::plan_use().served_calls - before;
    }
    CHECK(served > 0);
  }
  // The sampler alone: the frequencies follow softmax(logits / T).
  const float logits[3] = {0.0f, std::log(2.0f), std::log(5.0f)};
  lfd::SampleOptions one;
  one.temperature = 1.0;
  uint64_t state = 1;
  int count[3] = {0, 0, 0};
  for (int i = 0; i < 8000; ++i) ++count[lfd::sample_row(logits, 3, one, state)];
  CHECK(count[2] / 8000.0 == doctest::Approx(5.0 / 8).epsilon(0.05));
  CHECK(count[0] / 8000.0 == doctest::Approx(1.0 / 8).epsilon(0.15));
  lfd::SampleOptions bad;
  bad.top_p = 0;
  CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("top_p"), lf::Error);
}

TEST_CASE("decoder: misuse is an error naming what was wrong, and the cache stays usable") {
  const lfd::DecoderModel m = lfd::DecoderModel::random(tiny(lfd::Arch::llama), 9, lf::DType::f32,
                                                        lf::Device::cpu(), kInitStd);
  lfd::KvCache kv = lfd::KvCache::make(m, lfd::CacheKind::fixed, 1, 4);
  CHECK_THROWS_WITH_AS(m.forward(prompt(1, 5, 100, m.device()), kv), doctest::Contains("capacity"),
                       lf::Error);
  CHECK_THROWS_WITH_AS(m.forward(prompt(2, 1, 100, m.device()), kv), doctest::Contains("batch"),
                       lf::Error);
  CHECK(kv.length() == 0);
  m.forward(prompt(1, 4, 100, m.device()), kv);
  CHECK(kv.length() == 4);
  CHECK_THROWS_WITH_AS(lfd::parse_cache_kind("paged"), doctest::Contains("concat, static"),
                       lf::Error);
  CHECK_THROWS_WITH_AS(lfd::DecoderConfig::preset("gpt5"), doctest::Contains("unknown preset"),
                       lf::Error);
}

LF_CUDA_TEST_CASE(
    "decoder tiny on CUDA: reference tokens and logits, fusion off and on, both caches") {
  const lf::Device gpu = lf::Device::cuda(0);
  for (const lf::Mode mode : {lf::Mode::off, lf::Mode::on}) {
    ModeGuard guard(mode, 0);
    for (const lfd::Arch arch : {lfd::Arch::gpt2, lfd::Arch::llama})
      for (const lfd::CacheKind kind : {lfd::CacheKind::concat, lfd::CacheKind::fixed}) {
        CAPTURE(lf::mode_name(mode));
        CAPTURE(arch == lfd::Arch::gpt2 ? "gpt2" : "llama");
        CAPTURE(lfd::cache_kind_name(kind));
        const lfd::DecoderModel m =
            lfd::DecoderModel::random(tiny(arch), 10, lf::DType::f32, gpu, kInitStd);
        const lf::Tensor p = prompt(2, 5, m.config().vocab_size, gpu);
        for (int run = 0; run < 3; ++run)
          check_against_reference(m, p, lfd::generate(m, p, kSteps, kind, {}, true), 1e-4);
        for (const lf::DType dt : {lf::DType::f16, lf::DType::bf16}) {
          const lfd::DecoderModel h = lfd::DecoderModel::random(tiny(arch), 10, dt, gpu, kInitStd);
          lfd::KvCache kv = lfd::KvCache::make(h, kind, 1, 6);
          const lf::Tensor q = prompt(1, 6, h.config().vocab_size, gpu);
          const std::vector<float> got = h.forward(q, kv).to_floats();
          const auto want =
              decoder_ref::last_logits(h.config(), decoder_ref::params_of(h), q.to_int64s());
          CHECK(rel_error(got.data(), want) <= (dt == lf::DType::f16 ? 2e-2 : 6e-2));
        }
      }
  }
}
