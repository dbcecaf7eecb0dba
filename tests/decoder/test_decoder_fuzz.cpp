// Differential fuzz of decode loops. Random decoder shapes (GPT-2 or Llama, 1-4 heads, grouped
// KV heads, head dims 4-16, 1-3 layers, both cache styles, batch 1-2 -- or both, by sequence --
// f32/f16/bf16) driven by random program habits -- sequences restarted at random prompt lengths,
// two sequences interleaved on caches of their own, a sequence forked from another's cache (beam
// search's copy), old caches kept alive for a few steps, logits read at once or left pending for
// several steps, ids from a buffer the program reuses, now and then a call that must fail, and
// now and then a plan run stopped part-way (a kernel still compiling: the window runs eagerly),
// now and then a program with a switch off its default (lftest::fuzz::Switches) --
// must give LIVEFUSE=off's logits with fusion on, and plans must serve. Shape families (one plan
// for every length), caches grown in place and the donation rule that decides when a cache may
// be grown are what these habits reach; one fixed model in one loop (the decoder suite's other
// cases) reaches few of their branches.
// Programs per run: LIVEFUSE_FUZZ_DECODE_PROGRAMS (default 40 on the CPU, 8 on a GPU);
// LIVEFUSE_FUZZ_DECODE_SEED=S runs program S alone (what a failure names).
#include <algorithm>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "examples/decoder/generate.hpp"
#include "tests/fuzz_util.hpp"

namespace lf = livefuse;
namespace lfd = livefuse::decoder;

namespace {

// What the program does at one forward call: on which of its sequences, whether that sequence
// starts over (a fresh cache and a prompt) or forks from the other one, and what it then does
// with the logits and the caches.
struct Action {
  int seq = 0;
  enum Start { none, fresh, fork } start = none;
  int64_t batch = 1;         // the sequence's rows (a fresh start may change it)
  std::vector<int64_t> ids;  // [batch, T], row-major
  int64_t T = 1;
  bool read_now = true;       // else the logits stay pending until a later read
  bool read_pending = false;  // read every pending logits after this call
  int hold_for = 0;           // > 0: the program keeps a copy of the cache for that many calls
  // The ids come from the program's own buffer (wrapped; on the CPU), one buffer for every
  // call, rewritten with other tokens right after each call returns: a plan binds the same
  // address call after call and must read what it holds at each call. (The rewrite cannot reach
  // a deferred read of it -- the embedding's window completes inside forward() -- so this is
  // not the test of snapshots: tests/users and the replacement suite's reachable cases are.)
  bool own_ids = false;
  // Right after the call, one with shapes that do not broadcast: it must throw livefuse::Error
  // and change nothing the program holds.
  bool bad_call = false;
};

struct Program {
  uint64_t seed = 0;
  lfd::DecoderConfig cfg;
  lf::DType dtype = lf::DType::f32;
  lfd::CacheKind kind = lfd::CacheKind::concat;
  int64_t batch = 1;         // the most rows a sequence has
  bool mixed_batch = false;  // each fresh start picks 1 or `batch` rows
  int64_t capacity = 0;
  bool sampled = false;  // live sampling on (plans alternate with eager runs while new)
  std::vector<Action> actions;
  std::vector<int> stops;  // per call: a plan run stopped part-way (lftest::fuzz::random_stops)
  int failure = -1;        // the call in which a plan's run fails (lftest::fuzz::random_failure)
  lftest::fuzz::Switches switches;  // fusion on runs with these (lftest::fuzz::Switches)

  std::string describe() const {
    std::ostringstream o;
    o << "program seed=" << seed << ": " << (cfg.arch == lfd::Arch::gpt2 ? "gpt2" : "llama") << " "
      << lf::dtype_name(dtype) << " " << lfd::cache_kind_name(kind) << " batch "
      << (mixed_batch ? "1-" : "") << batch << ", hidden " << cfg.hidden_size << ", heads "
      << cfg.num_attention_heads << "/" << cfg.num_key_value_heads << ", layers "
      << cfg.num_hidden_layers << ", " << cfg.hidden_act << (sampled ? ", sampled" : ", unsampled")
      << ", " << actions.size() << " calls ("
      << std::count_if(stops.begin(), stops.end(), [](int k) { return k >= 0; })
      << " with a run stopped part-way" << (failure >= 0 ? ", a run failing in call " + std::to_string(failure) : "")
      << ")" << switches.describe();
    return o.str();
  }
};

constexpr int64_t kMaxPrompt = 9;
constexpr int kCalls = 110;

Program make_program(uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  auto pick = [&rng](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  auto chance = [&rng](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  Program p;
  p.seed = seed;
  const bool gpt2 = pick(2) == 0;
  p.cfg = lfd::DecoderConfig::preset(gpt2 ? "gpt2-tiny" : "llama-tiny");
  const int64_t heads = int64_t{1} << pick(3);     // 1, 2, 4
  const int64_t head_dim = int64_t{4} << pick(3);  // 4, 8, 16
  p.cfg.num_attention_heads = heads;
  p.cfg.hidden_size = heads * head_dim;
  p.cfg.head_dim = 0;
  p.cfg.num_key_value_heads = gpt2 ? heads : heads >> pick(heads == 1 ? 1 : heads == 2 ? 2 : 3);
  p.cfg.num_hidden_layers = 1 + pick(3);
  p.cfg.intermediate_size = p.cfg.hidden_size * (2 + pick(3));
  p.cfg.vocab_size = 40 + pick(40);
  if (gpt2) {
    const char* acts[] = {"gelu_new", "gelu", "relu"};
    p.cfg.hidden_act = acts[pick(3)];
  } else {
    p.cfg.attention_bias = chance(0.3);
    p.cfg.mlp_bias = chance(0.3);
    p.cfg.tie_word_embeddings = chance(0.5);
  }
  const lf::DType dtypes[] = {lf::DType::f32, lf::DType::f32, lf::DType::f16, lf::DType::bf16};
  p.dtype = dtypes[pick(4)];
  p.kind = pick(2) ? lfd::CacheKind::concat : lfd::CacheKind::fixed;
  p.batch = chance(0.35) ? 2 : 1;
  p.mixed_batch = p.batch > 1 && chance(0.5);
  p.sampled = chance(0.25);
  p.capacity = 48;
  p.cfg.max_position_embeddings = std::max<int64_t>(p.cfg.max_position_embeddings, p.capacity);

  const int seqs = chance(0.5) ? 2 : 1;
  int64_t length[2] = {0, 0}, rows[2] = {p.batch, p.batch};
  bool started[2] = {false, false};
  int cur = 0;
  for (int c = 0; c < kCalls; ++c) {
    Action a;
    if (seqs == 2 && chance(0.15)) cur = 1 - cur;
    a.seq = cur;
    // A fork copies the other sequence's cache (its length too) and goes on with other tokens.
    if (seqs == 2 && started[1 - cur] && chance(0.04) && length[1 - cur] + 1 <= p.capacity) {
      a.start = Action::fork;
      length[cur] = length[1 - cur];
      rows[cur] = rows[1 - cur];
      started[cur] = true;
    }
    const bool full = length[cur] + 1 > p.capacity;
    if (a.start == Action::none && (!started[cur] || full || chance(0.02))) {
      a.start = Action::fresh;
      a.T = 1 + pick(static_cast<int>(kMaxPrompt));
      length[cur] = 0;
      if (p.mixed_batch) rows[cur] = chance(0.5) ? p.batch : 1;
      started[cur] = true;
    }
    length[cur] += a.T;
    a.batch = rows[cur];
    for (int64_t i = 0; i < a.batch * a.T; ++i)
      a.ids.push_back(pick(static_cast<int>(p.cfg.vocab_size)));
    a.read_now = chance(0.7);
    a.read_pending = chance(0.25);
    if (chance(0.06)) a.hold_for = 1 + pick(6);
    a.own_ids = chance(0.2);
    a.bad_call = chance(0.03);
    p.actions.push_back(std::move(a));
  }
  p.stops = lftest::fuzz::random_stops(seed, p.actions.size());
  p.failure = lftest::fuzz::random_failure(seed, p.actions.size());
  p.switches = lftest::fuzz::Switches(seed);
  return p;
}

// Runs the program's calls in the mode in force.
lftest::fuzz::Results run(const Program& p, const lfd::DecoderModel& m) {
  lftest::fuzz::Results r(p.actions.size());
  const lf::Device dev = m.device();
  std::vector<int64_t> own(static_cast<size_t>(p.batch * kMaxPrompt));
  lfd::KvCache cache[2];
  struct Held {
    lfd::KvCache kv;
    int left;
  };
  std::vector<Held> held;
  for (size_t i = 0; i < p.actions.size(); ++i) {
    const Action& a = p.actions[i];
    lfd::KvCache& kv = cache[a.seq];
    if (a.start == Action::fresh) kv = lfd::KvCache::make(m, p.kind, a.batch, p.capacity);
    if (a.start == Action::fork) kv = cache[1 - a.seq];
    const bool own_ids = a.own_ids && dev.is_cpu();
    if (own_ids) std::copy(a.ids.begin(), a.ids.end(), own.begin());
    const lf::Tensor ids = own_ids
                               ? lf::Tensor::wrap(own.data(), {a.batch, a.T}, lf::DType::i64, dev)
                               : lf::from_int64s(a.ids, {a.batch, a.T}, lf::DType::i64, dev);
    const lf::MatcherCounters& ctr = lf::matcher_counters();
    const uint64_t calls = ctr.calls, served = ctr.served;
    lf::Tensor logits;
    {
      const lftest::fuzz::FaultScope faults(p.stops[i], static_cast<int>(i) == p.failure);
      logits = m.forward(ids, kv);
    }
    r.note_calls(i, ctr.calls - calls, ctr.served - served);
    if (own_ids)
      for (int64_t& t : own) t = (t + 7) % p.cfg.vocab_size;
    if (a.bad_call) r.errors_missed += !lftest::fuzz::bad_call_throws(logits);
    if (a.hold_for) held.push_back({kv, a.hold_for});
    for (Held& h : held) --h.left;
    std::erase_if(held, [](const Held& h) { return h.left <= 0; });
    r.take(i, std::move(logits), a.read_now);
    if (a.read_pending) r.read_pending();
    // Past the warm-up the planner has had what it needs: wait for it once, so that the rest
    // of the program runs served (planning is asynchronous: without this the share served
    // would depend on the host's pace).
    if (i == 24) lftest::fuzz::settle_planner();
  }
  r.read_pending();
  return r;
}

std::string first_difference(const Program& p, const lftest::fuzz::Results& off,
                             const lftest::fuzz::Results& on) {
  const std::string d = lftest::fuzz::first_disagreement(off, on, p.dtype, [&](size_t i) {
    const Action& a = p.actions[i];
    return "call " + std::to_string(i) + " (sequence " + std::to_string(a.seq) + ", T " +
           std::to_string(a.T) + ")";
  });
  return d.empty() ? d : p.describe() + ": " + d;
}

lfd::DecoderModel model_of(const Program& p, lf::Device dev) {
  return lfd::DecoderModel::random(p.cfg, p.seed, p.dtype, dev, 0.08);
}

void fuzz(lf::Device dev, int programs, uint64_t first) {
  const std::vector<uint64_t> seeds = lftest::fuzz::seeds("LIVEFUSE_FUZZ_DECODE", programs, first);
  const uint64_t appends0 = lf::matcher_counters().appends_in_place;
  const lftest::fuzz::Tally t =
      lftest::fuzz::differential(dev, seeds, make_program, model_of, run, first_difference);
  const uint64_t appends = lf::matcher_counters().appends_in_place - appends0;
  MESSAGE(t.programs << " programs, " << t.calls << " calls, " << t.served << " served by plans ("
                     << 100.0 * t.served_share() << "%), " << t.engaged << " programs served, "
                     << appends << " caches grown in place, " << t.declined
                     << " windows declined (runs stopped part-way), " << t.failed << " windows of failed runs"
                     << lftest::fuzz::abandoned_captures());
  t.check_engaged();
  // ... and the habits reached what they are here for: caches grown in place.
  if (seeds.size() > 1) CHECK(appends > 0);
}

}  // namespace

TEST_CASE("decoder fuzz: random decoders and program habits, fusion on gives fusion off's logits") {
  fuzz(lf::Device::cpu(), 40, 1);
}

// Fewer programs: each random shape compiles its own kernels on the GPU.
LF_CUDA_TEST_CASE(
    "decoder fuzz on the GPU: random decoders and program habits, on gives off's logits") {
  fuzz(lf::Device::cuda(0), 8, 1000);
}

// Two threads, each with its own model and habits, at once: one plan table, one monitor, the
// matcher's windows per thread; each thread must get its own program's eager logits.
TEST_CASE("decoder fuzz: two threads, each its own random decoder and habits, at once") {
  const lf::Config saved = lf::config();
  const lf::Device cpu = lf::Device::cpu();
  uint64_t served = 0;
  for (uint64_t pair = 0; pair < 8; ++pair) {
    const Program a = make_program(5000 + 2 * pair), b = make_program(5001 + 2 * pair);
    CAPTURE(a.describe());
    CAPTURE(b.describe());
    const lfd::DecoderModel ma = model_of(a, cpu), mb = model_of(b, cpu);
    lf::set_config_for_testing(lftest::fuzz::with_mode(saved, lf::Mode::off, false));
    const auto want_a = run(a, ma), want_b = run(b, mb);
    lf::set_config_for_testing(lftest::fuzz::with_mode(saved, lf::Mode::on, false));
    lftest::fuzz::reset_pipeline(cpu);
    const uint64_t served0 = lf::matcher_counters().served;
    lftest::fuzz::Results got_a(0), got_b(0);
    std::thread other([&] { got_b = run(b, mb); });
    got_a = run(a, ma);
    other.join();
    served += lf::matcher_counters().served - served0;
    const std::string fa = first_difference(a, want_a, got_a),
                      fb = first_difference(b, want_b, got_b);
    CHECK_MESSAGE(fa.empty(), fa);
    CHECK_MESSAGE(fb.empty(), fb);
  }
  lf::set_config_for_testing(saved);
  lftest::fuzz::reset_pipeline(cpu);
  CHECK(served > 0);
}
