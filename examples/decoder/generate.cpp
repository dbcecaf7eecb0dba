// The generate loop and the host-side sampler.
#include "examples/decoder/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "livefuse/inspect.hpp"

namespace livefuse::decoder {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// splitmix64: a generator whose whole state is one word, so a seed reproduces a run anywhere.
uint64_t next_u64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

void SampleOptions::validate() const {
  LF_CHECK(std::isfinite(temperature) && temperature >= 0, "generate",
           "temperature must be >= 0 (0 = greedy), got ", temperature);
  LF_CHECK(top_k >= 0, "generate", "top_k must be >= 0 (0 = all tokens), got ", top_k);
  LF_CHECK(top_p > 0 && top_p <= 1, "generate", "top_p must be in (0, 1], got ", top_p);
}

int64_t sample_row(const float* logits, int64_t vocab, const SampleOptions& o, uint64_t& state) {
  std::vector<int64_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  // Most likely first; ties by token id, so the order (and the sample) is deterministic.
  const auto more_likely = [&](int64_t a, int64_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const int64_t k = o.top_k > 0 ? std::min(o.top_k, vocab) : vocab;
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), more_likely);
  idx.resize(static_cast<size_t>(k));
  std::vector<double> p(idx.size());
  const double top = logits[idx[0]];
  double sum = 0;
  for (size_t i = 0; i < idx.size(); ++i)
    sum += p[i] = std::exp((static_cast<double>(logits[idx[i]]) - top) / o.temperature);
  size_t keep = idx.size();
  if (o.top_p < 1) {  // the smallest prefix whose mass reaches top_p (at least one token)
    double acc = 0;
    for (size_t i = 0; i < idx.size(); ++i) {
      acc += p[i] / sum;
      if (acc >= o.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += p[i];
  const double u = static_cast<double>(next_u64(state) >> 11) * 0x1.0p-53 * mass;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return idx[i];
  }
  return idx[keep - 1];
}

std::vector<int64_t> pick_tokens(const Tensor& logits, const SampleOptions& o,
                                 std::vector<uint64_t>& rng_state, std::vector<float>* kept) {
  const int64_t B = logits.dim(0), V = logits.dim(1);
  std::vector<int64_t> out;
  if (!kept && !o.greedy() && o.top_k > 0) {
    // Only the k best of each row come to the host, in the order sample_row sorts them: the
    // same token as sampling the whole row on the host, without copying a vocabulary per step.
    const int64_t k = std::min(o.top_k, V);
    const auto [values, indices] = topk(logits, k);
    const std::vector<float> v = values.to_floats();
    const std::vector<int64_t> idx = indices.to_int64s();
    SampleOptions within = o;
    within.top_k = 0;
    for (int64_t b = 0; b < B; ++b)
      out.push_back(idx[static_cast<size_t>(
          b * k + sample_row(v.data() + b * k, k, within, rng_state[static_cast<size_t>(b)]))]);
    return out;
  }
  std::vector<float> host;
  if (kept || !o.greedy()) host = logits.to_floats();
  if (kept) *kept = host;
  if (o.greedy()) return argmax(logits, 1).to_int64s();
  for (int64_t b = 0; b < B; ++b)
    out.push_back(sample_row(host.data() + b * V, V, o, rng_state[static_cast<size_t>(b)]));
  return out;
}

uint64_t served_calls() { return find_counter(counters(), "matcher", "served").value_or(0); }

PlanUse plan_use() {
  PlanUse u;
  const Snapshot snap = inspect();
  u.served_calls = snap.counter("matcher", "served").value_or(0);
  for (const PlanInfo& p : snap.plans) u.active_plans += p.state == "active";
  return u;
}

GenerateResult generate(const DecoderModel& model, const Tensor& prompt, int64_t steps,
                        CacheKind kind, const SampleOptions& sample, bool keep_logits) {
  sample.validate();
  LF_CHECK(steps >= 1, "generate", "steps must be >= 1, got ", steps);
  LF_CHECK(prompt.defined() && prompt.rank() == 2, "generate", "the prompt must be [batch, T]");
  const int64_t B = prompt.dim(0), T = prompt.dim(1);
  KvCache cache = KvCache::make(model, kind, B, T + steps);
  std::vector<uint64_t> rng(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b)
    rng[static_cast<size_t>(b)] = sample.seed * 0x2545F4914F6CDD1Dull + static_cast<uint64_t>(b);
  GenerateResult r;
  r.tokens.assign(static_cast<size_t>(B), {});
  std::vector<float> kept;
  const auto take = [&](const Tensor& logits) {
    const std::vector<int64_t> t = pick_tokens(logits, sample, rng, keep_logits ? &kept : nullptr);
    if (keep_logits) r.logits.push_back(kept);
    for (int64_t b = 0; b < B; ++b)
      r.tokens[static_cast<size_t>(b)].push_back(t[static_cast<size_t>(b)]);
    return t;
  };
  const uint64_t served_before = served_calls();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> next = take(model.forward(prompt.to(model.device()), cache));
  r.prefill_ms = ms_since(t0);
  for (int64_t s = 1; s < steps; ++s) {
    t0 = std::chrono::steady_clock::now();
    const Tensor ids = from_int64s(next, {B, 1}, DType::i64, model.device());
    const Tensor logits = model.forward(ids, cache);
    r.step_issue_ms.push_back(ms_since(t0));
    next = take(logits);
    r.step_ms.push_back(ms_since(t0));
    if (r.first_served_step < 0 && (s % kServedProbeEvery == 0 || s + 1 == steps) &&
        served_calls() > served_before)
      r.first_served_step = s - 1;
  }
  return r;
}

}  // namespace livefuse::decoder
