#include "examples/bert/run.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <ostream>

namespace livefuse::bert {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

double one_forward_ms(const BertModel& model, const Tensor& ids, const Tensor& mask) {
  const auto t0 = std::chrono::steady_clock::now();
  {
    // The output is released before the next call, as a serving loop would: plan-owned
    // buffers can then be reused instead of reallocated.
    Tensor out = model.forward(ids, mask);
    synchronize(model.device());
  }
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

}  // namespace

Tensor random_input_ids(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed, Device device) {
  LF_CHECK(batch > 0 && seq > 0 && vocab > 0, "bert", "random ids need positive batch, seq, vocab");
  std::vector<int64_t> ids(static_cast<size_t>(batch * seq));
  uint64_t state = seed;
  for (int64_t& id : ids)
    id = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(vocab));
  return from_int64s(ids, {batch, seq}, DType::i64, device);
}

Tensor padding_mask(int64_t batch, int64_t seq, Device device) {
  std::vector<int64_t> m(static_cast<size_t>(batch * seq));
  for (int64_t r = 0; r < batch; ++r) {
    const int64_t keep = std::max<int64_t>(1, seq - r * seq / (2 * batch));
    for (int64_t j = 0; j < seq; ++j) m[r * seq + j] = j < keep ? 1 : 0;
  }
  return from_int64s(m, {batch, seq}, DType::i64, device);
}

Timing time_forward(const BertModel& model, const Tensor& ids, const Tensor& mask,
                    const TimingOptions& opt) {
  Timing t;
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };
  // Fixed warm-up, then windows of 10 until a window's median stops improving by > 3%:
  // plans are installed in the background, so the latency keeps dropping until they are.
  while (static_cast<int>(t.warmup_ms.size()) < opt.warmup || elapsed_ms() < opt.warmup_ms) {
    t.warmup_ms.push_back(one_forward_ms(model, ids, mask));
    if (elapsed_ms() > opt.max_warmup_ms) break;
  }
  double prev = percentile(t.warmup_ms, 0.5);
  while (elapsed_ms() < opt.max_warmup_ms) {
    std::vector<double> window;
    for (int i = 0; i < 10; ++i) window.push_back(one_forward_ms(model, ids, mask));
    t.warmup_ms.insert(t.warmup_ms.end(), window.begin(), window.end());
    const double med = percentile(window, 0.5);
    if (med > 0.97 * prev) break;
    prev = med;
  }
  for (int i = 0; i < opt.iters; ++i) t.iter_ms.push_back(one_forward_ms(model, ids, mask));

  t.first_ms = t.warmup_ms.empty() ? (t.iter_ms.empty() ? 0 : t.iter_ms[0]) : t.warmup_ms[0];
  if (!t.iter_ms.empty()) {
    double sum = 0;
    for (double v : t.iter_ms) sum += v;
    t.mean_ms = sum / static_cast<double>(t.iter_ms.size());
    t.median_ms = percentile(t.iter_ms, 0.5);
    t.min_ms = *std::min_element(t.iter_ms.begin(), t.iter_ms.end());
    t.p90_ms = percentile(t.iter_ms, 0.9);
  }
  // Time to steady state, from the whole history.
  std::vector<double> all = t.warmup_ms;
  all.insert(all.end(), t.iter_ms.begin(), t.iter_ms.end());
  const double limit = 1.25 * t.median_ms;
  size_t slow_after = 0;  // slow iterations in [i, end)
  std::vector<size_t> slow_suffix(all.size() + 1, 0);
  for (size_t i = all.size(); i-- > 0;) slow_suffix[i] = slow_suffix[i + 1] + (all[i] > limit);
  // Steady from the first iteration where the next 20 are (90%) fast AND at most 10% of all
  // later ones are slow: a long fast tail alone would forgive a slow start of any length.
  size_t steady = all.size();
  for (size_t i = 0; i < all.size(); ++i) {
    slow_after = slow_suffix[i];
    const size_t window = std::min<size_t>(20, all.size() - i);
    const size_t slow_in_window = slow_suffix[i] - slow_suffix[i + window];
    if (static_cast<double>(slow_in_window) <= 0.1 * static_cast<double>(window) &&
        static_cast<double>(slow_after) <= 0.1 * static_cast<double>(all.size() - i)) {
      steady = i;
      break;
    }
  }
  t.iters_to_steady = static_cast<int>(steady);
  for (size_t i = 0; i < steady; ++i) t.time_to_steady_ms += all[i];
  return t;
}

DemoResult run_bert_demo(const DemoOptions& opt, std::ostream* log) {
  const std::string preset = !opt.preset.empty()    ? opt.preset
                             : opt.device.is_cuda() ? "base"
                                                    : "tiny";
  DemoResult r;
  r.config = BertConfig::preset(preset);
  const BertModel model = BertModel::random(r.config, opt.seed, opt.dtype, opt.device);
  const int64_t seq = std::min(opt.seq, r.config.max_position_embeddings);
  const Tensor ids =
      random_input_ids(opt.batch, seq, r.config.vocab_size, opt.seed + 1, opt.device);
  const Tensor mask = padding_mask(opt.batch, seq, opt.device);

  const Tensor out = model.forward(ids, mask);
  r.out_shape.assign(out.shape().begin(), out.shape().end());
  double sum = 0;
  for (float v : out.to_floats()) sum += std::abs(v);
  r.mean_abs = sum / static_cast<double>(out.numel());

  TimingOptions topt;
  topt.iters = opt.iters;
  topt.warmup_ms = opt.warmup_ms;
  topt.max_warmup_ms = std::max(10000.0, opt.warmup_ms);
  r.timing = time_forward(model, ids, mask, topt);
  if (log) {
    *log << std::fixed << std::setprecision(3) << "bert-" << preset << " ("
         << r.config.num_hidden_layers << " layers, hidden " << r.config.hidden_size << ") "
         << dtype_name(opt.dtype) << " on " << opt.device.str() << ", batch " << opt.batch
         << ", seq " << seq << ": first " << r.timing.first_ms << " ms, steady median "
         << r.timing.median_ms << " ms (steady after " << r.timing.iters_to_steady
         << " iterations, " << r.timing.time_to_steady_ms << " ms); mean |out| " << r.mean_abs
         << "\n";
  }
  return r;
}

}  // namespace livefuse::bert
