// Differential fuzz of encoder serving. Random BERT shapes (hidden 16-64, head dims 4-16, 1-3
// layers, erf / tanh GELU or relu, f32 / f16 / bf16) serving random requests -- a few
// (batch, length) shapes in a random mix, padding masks with random lengths (a row padded
// throughout now and then), token types or none, results read at once or left pending, a bad
// call now and then, a plan run stopped part-way now and then (a kernel still compiling: the
// window runs eagerly), a switch off its default now and then (lftest::fuzz::Switches) -- must
// give LIVEFUSE=off's hidden states with fusion on, and plans must serve. What the encoder's
// fusions (Q/K/V as one GEMM, attention as one step, GEMM epilogues, the layer seam) meet in
// serving that one fixed model at one shape does not show.
// Programs per run: LIVEFUSE_FUZZ_BERT_PROGRAMS (default 24 on the CPU, 6 on a GPU);
// LIVEFUSE_FUZZ_BERT_SEED=S runs program S alone (what a failure names).
#include <algorithm>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "examples/bert/bert.hpp"
#include "tests/fuzz_util.hpp"

namespace lf = livefuse;
using livefuse::bert::BertConfig;
using livefuse::bert::BertModel;

namespace {

struct Request {
  int64_t batch = 1, seq = 1;
  std::vector<int64_t> ids, types, mask;  // [batch, seq] each; types / mask empty: not given
  bool read_now = true;
  bool read_pending = false;
  bool bad_call = false;  // then a call whose shapes do not broadcast: livefuse::Error
};

struct Program {
  uint64_t seed = 0;
  BertConfig cfg;
  lf::DType dtype = lf::DType::f32;
  bool sampled = false;
  std::vector<Request> requests;
  std::vector<int> stops;  // per request: a plan run stopped part-way (lftest::fuzz::random_stops)
  int failure = -1;        // the request in which a plan's run fails (lftest::fuzz::random_failure)
  lftest::fuzz::Switches switches;  // fusion on runs with these (lftest::fuzz::Switches)

  std::string describe() const {
    std::ostringstream o;
    o << "program seed=" << seed << ": " << lf::dtype_name(dtype) << ", hidden " << cfg.hidden_size
      << ", heads " << cfg.num_attention_heads << ", layers " << cfg.num_hidden_layers << ", "
      << cfg.hidden_act << (sampled ? ", sampled" : ", unsampled") << ", " << requests.size()
      << " requests (" << std::count_if(stops.begin(), stops.end(), [](int k) { return k >= 0; })
      << " with a run stopped part-way" << (failure >= 0 ? ", a run failing in request " + std::to_string(failure) : "")
      << ")" << switches.describe();
    return o.str();
  }
};

constexpr int kRequests = 60;

Program make_program(uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 7);
  auto pick = [&rng](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  auto chance = [&rng](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  Program p;
  p.seed = seed;
  p.cfg = BertConfig::preset("tiny");
  const int64_t head_dim = int64_t{4} << pick(3);  // 4, 8, 16
  const int64_t heads = 1 + pick(4);
  p.cfg.num_attention_heads = heads;
  p.cfg.hidden_size = heads * head_dim;
  p.cfg.num_hidden_layers = 1 + pick(3);
  p.cfg.intermediate_size = p.cfg.hidden_size * (2 + pick(3));
  p.cfg.vocab_size = 50 + pick(50);
  p.cfg.max_position_embeddings = 32;
  const char* acts[] = {"gelu", "gelu", "gelu_new", "relu"};
  p.cfg.hidden_act = acts[pick(4)];
  const lf::DType dtypes[] = {lf::DType::f32, lf::DType::f32, lf::DType::f16, lf::DType::bf16};
  p.dtype = dtypes[pick(4)];
  p.sampled = chance(0.25);

  // The shapes the server sees: one mostly, a few others now and then.
  struct ShapeOf {
    int64_t batch, seq;
  };
  std::vector<ShapeOf> shapes;
  for (int64_t n = 1 + pick(3); n > 0; --n) shapes.push_back({1 + pick(3), 2 + pick(20)});
  const bool masked = chance(0.7), typed = chance(0.4);
  for (int r = 0; r < kRequests; ++r) {
    const ShapeOf sh = chance(0.7)
                           ? shapes[0]
                           : shapes[static_cast<size_t>(pick(static_cast<int64_t>(shapes.size())))];
    Request q;
    q.batch = sh.batch;
    q.seq = sh.seq;
    for (int64_t i = 0; i < q.batch * q.seq; ++i) q.ids.push_back(pick(p.cfg.vocab_size));
    if (typed)
      for (int64_t i = 0; i < q.batch * q.seq; ++i) q.types.push_back(pick(2));
    if (masked)
      for (int64_t b = 0; b < q.batch; ++b) {
        // Kept tokens first, then padding; now and then a row padded throughout (HF adds the
        // dtype's lowest finite value, not -inf: such a row averages every key).
        const int64_t kept = chance(0.05) ? 0 : 1 + pick(q.seq);
        for (int64_t t = 0; t < q.seq; ++t) q.mask.push_back(t < kept ? 1 : 0);
      }
    q.read_now = chance(0.7);
    q.read_pending = chance(0.3);
    q.bad_call = chance(0.03);
    p.requests.push_back(std::move(q));
  }
  p.stops = lftest::fuzz::random_stops(seed, p.requests.size());
  p.failure = lftest::fuzz::random_failure(seed, p.requests.size());
  p.switches = lftest::fuzz::Switches(seed);
  return p;
}

lftest::fuzz::Results run(const Program& p, const BertModel& m) {
  lftest::fuzz::Results r(p.requests.size());
  const lf::Device dev = m.device();
  for (size_t i = 0; i < p.requests.size(); ++i) {
    const Request& q = p.requests[i];
    const lf::Shape s{q.batch, q.seq};
    const auto given = [&](const std::vector<int64_t>& v) {
      return v.empty() ? lf::Tensor{} : lf::from_int64s(v, s, lf::DType::i64, dev);
    };
    if (lf::trace::enabled()) lf::trace::instant("fuzz", "request", "request " + std::to_string(i));
    const lf::MatcherCounters& ctr = lf::matcher_counters();
    const uint64_t calls = ctr.calls, served = ctr.served;
    lf::Tensor h;
    {
      const lftest::fuzz::FaultScope faults(p.stops[i], static_cast<int>(i) == p.failure);
      h = m.forward(given(q.ids), given(q.mask), given(q.types));
    }
    r.note_calls(i, ctr.calls - calls, ctr.served - served);
    if (q.bad_call) r.errors_missed += !lftest::fuzz::bad_call_throws(h);
    r.take(i, std::move(h), q.read_now);
    if (q.read_pending) r.read_pending();
    // The planner's work is asynchronous: wait for it once, so that the rest is served
    // whatever the host's pace.
    if (i == 20) lftest::fuzz::settle_planner();
  }
  r.read_pending();
  return r;
}

std::string first_difference(const Program& p, const lftest::fuzz::Results& off,
                             const lftest::fuzz::Results& on) {
  const std::string d = lftest::fuzz::first_disagreement(off, on, p.dtype, [&](size_t i) {
    const Request& q = p.requests[i];
    return "request " + std::to_string(i) + " [" + std::to_string(q.batch) + ", " +
           std::to_string(q.seq) + "]" + (q.mask.empty() ? "" : " masked") +
           (q.types.empty() ? "" : " typed");
  });
  return d.empty() ? d : p.describe() + ": " + d;
}

BertModel model_of(const Program& p, lf::Device dev) {
  return BertModel::random(p.cfg, p.seed, p.dtype, dev, 0.08);
}

void fuzz(lf::Device dev, int programs, uint64_t first) {
  const lftest::fuzz::Tally t =
      lftest::fuzz::differential(dev, lftest::fuzz::seeds("LIVEFUSE_FUZZ_BERT", programs, first),
                                 make_program, model_of, run, first_difference);
  MESSAGE(t.programs << " programs, " << t.calls << " calls, " << t.served << " served by plans ("
                     << 100.0 * t.served_share() << "%), " << t.engaged << " programs served, "
                     << t.declined << " windows declined (runs stopped part-way), " << t.failed << " windows of failed runs"
                     << lftest::fuzz::abandoned_captures());
  t.check_engaged();
}

}  // namespace

TEST_CASE(
    "bert fuzz: random encoders serving random requests, fusion on gives fusion off's values") {
  fuzz(lf::Device::cpu(), 24, 1);
}

// Fewer programs: each random shape compiles its own kernels on the GPU.
LF_CUDA_TEST_CASE("bert fuzz on the GPU: random encoders and requests, on gives off's values") {
  fuzz(lf::Device::cuda(0), 6, 1000);
}
