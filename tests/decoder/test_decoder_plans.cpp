// How many plans a decode loop makes: one for the layer at every length, not one per length
// (monitor/structure_table.cpp, the note on settling). On the CPU, so CI counts them; the H200
// figures are in bench/RESULTS.md.
#include "examples/decoder/generate.hpp"
#include "livefuse/config.hpp"
#include "livefuse/inspect.hpp"
#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "runtime/plan.hpp"
#include "tests/fuzz_util.hpp"
#include "tests/test_util.hpp"
#if LIVEFUSE_HAS_CUDA
#include "kernels/cuda/pdl.hpp"
#endif

namespace lf = livefuse;
namespace lfd = livefuse::decoder;

namespace {

// A fresh pipeline under `c` (the monitor takes its options from it), then generations until
// the planner has nothing left to do; plans published meanwhile, tokens of the last run.
struct Counted {
  uint64_t handed = 0;  // candidates the monitor handed to the planner
  uint64_t published = 0;
  uint64_t served_calls = 0;
  std::vector<std::vector<int64_t>> tokens;
  std::vector<std::string> plans;  // state, hits, name: shown when a count check fails
};

Counted count_plans(const lf::Config& c, const lfd::DecoderModel& m, const lf::Tensor& p, int steps,
                    int runs) {
  lf::synchronize(lf::Device::cpu());
  lf::set_config_for_testing(c);
  lf::monitor::Monitor::instance().reset();
  lf::planner::wait_service_idle();
  lf::planner::reset_service_for_testing();
  lf::PlanTable::get().clear_for_testing();
  const uint64_t pub0 = lf::planner::service_counters().published;
  Counted out;
  for (int r = 0; r < runs; ++r) {
    const uint64_t before = lfd::plan_use().served_calls;
    out.tokens = lfd::generate(m, p, steps, lfd::CacheKind::concat, {}, false).tokens;
    out.served_calls = lfd::plan_use().served_calls - before;
  }
  lf::monitor::Monitor::instance().drain();
  lf::planner::wait_service_idle();
  out.published = lf::planner::service_counters().published - pub0;
  out.handed = lf::monitor::Monitor::instance().counters().candidates_emitted;
  for (const auto& pi : lf::inspect().plans)
    out.plans.push_back(pi.state + " " + std::to_string(pi.hits) + " (" + pi.last_reason + ") " +
                        pi.description.substr(0, pi.description.find('\n')) + ": " + pi.name);
  return out;
}

}  // namespace

TEST_CASE("decoder plans: a concat-cache decode loop is planned once, not once per length") {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    CAPTURE(preset);
    const lf::Config saved = lf::config();
    lfd::DecoderConfig cfg = lfd::DecoderConfig::preset(preset);
    cfg.vocab_size = 384;
    cfg.num_hidden_layers = 12;
    const lfd::DecoderModel m =
        lfd::DecoderModel::random(cfg, 4, lf::DType::f32, lf::Device::cpu(), 0.08);
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < 6; ++i) ids.push_back((i * 37 + 11) % cfg.vocab_size);
    const lf::Tensor p = lf::from_int64s(ids, {1, 6}, lf::DType::i64, lf::Device::cpu());
    lf::Config off = saved;
    off.mode = lf::Mode::off;
    lf::set_config_for_testing(off);
    const auto eager = lfd::generate(m, p, 96, lfd::CacheKind::concat, {}, false).tokens;

    lf::Config on = saved;
    on.mode = lf::Mode::on;
    on.sample = 0;  // kept unsampled: what is counted is what the monitor hands over
    on.settle = true;
    const Counted settled = count_plans(on, m, p, 96, 2);
    on.settle = false;
    const Counted at_once = count_plans(on, m, p, 96, 2);
    lf::set_config_for_testing(saved);
    lf::monitor::Monitor::instance().reset();
    MESSAGE("handed over: settled " << settled.handed << ", at once " << at_once.handed
                                    << "; plans published " << settled.published << " / "
                                    << at_once.published << "; calls served in the last run "
                                    << settled.served_calls << " / " << at_once.served_calls);
    CHECK(settled.tokens == eager);
    CHECK(at_once.tokens == eager);
    CHECK(settled.served_calls > 0);
    // 12 layers, 2 x 96 tokens: 4 plans settled -- the embedding, the head, the decode layer and
    // the prefill's layer (made, then retired) -- the decode issue's "<= 4 plans". Before the
    // detector took the prefill / decode divergence for a phase change rather than a branch
    // (monitor/stream_window.cpp, kBranchSwitches), the decode layer's first steps were cut in
    // three pieces and planned so: 6-7. Unsettled, a layer met at a new tuple is planned at once
    // and again with its family: 5-7, still more hand-overs than settled.
    // Llama's layer holds short stretches twice (two norms, q's and k's rotary): one unit all
    // the same (monitor/stream_window.hpp, note 2, inner repeats), where it made 10-27 plans.
    if (settled.published > 4)
      for (const std::string& pl : settled.plans) MESSAGE(pl);
    CHECK(settled.published <= 4);
    CHECK(settled.handed < at_once.handed);
  }
}

// Llama's norm chain (cast -> rms_norm -> cast -> mul) folded into the Q/K/V and gate/up GEMVs
// (LIVEFUSE_GEMV_NORM=2) at a hidden size the GEMV does not take (36 f16 columns: not whole
// 16-byte packs), so every run's fallback runs the chain op by op. Its values are bound memory now
// (planner.cpp, fold_norm_prologues): nothing is allocated inside a graph capture, so no capture
// is discarded and the plans keep their graphs (session 40's decode fuzz found the capture that
// held memory under this switch; the plans then ran without graphs).
LF_CUDA_TEST_CASE(
    "decoder plans: Llama's folded norm chain, refused by the GEMV, keeps its graphs") {
  const lf::Config saved = lf::config();
  const lf::Device dev = lf::Device::cuda(0);
  lfd::DecoderConfig cfg = lfd::DecoderConfig::preset("llama-tiny");
  cfg.hidden_size = 36, cfg.num_attention_heads = 3, cfg.num_key_value_heads = 1;
  cfg.intermediate_size = 96, cfg.vocab_size = 128;
  const lfd::DecoderModel m = lfd::DecoderModel::random(cfg, 5, lf::DType::f16, dev, 0.08);
  const lf::Tensor p = lf::from_int64s({3, 17, 41, 88, 5}, {1, 5}, lf::DType::i64, dev);
  lf::Config off = saved;
  off.mode = lf::Mode::off;
  lf::set_config_for_testing(off);
  const auto eager = lfd::generate(m, p, 48, lfd::CacheKind::concat, {}, false).tokens;
  lf::Config on = saved;
  on.mode = lf::Mode::on;
  on.sample = 0;
  on.gemv_norm = 2;
  lftest::fuzz::reset_pipeline(dev);
  lf::set_config_for_testing(on);
  const auto counter = [](const char* name) {
    return lf::find_counter(lf::counters(), "graphs", name).value_or(0);
  };
  const uint64_t held0 = counter("captures_holding_memory"), inst0 = counter("instantiations");
  const uint64_t served0 = lfd::plan_use().served_calls;
  std::vector<std::vector<int64_t>> tokens;
  // As below: the next run starts once the planner is idle (on a fresh machine, kernels compiled
  // cold, a run could end before its plans were made: served 0 calls, H100, session 48).
  for (int run = 0; run < 3; ++run) {
    tokens = lfd::generate(m, p, 48, lfd::CacheKind::concat, {}, false).tokens;
    lf::monitor::Monitor::instance().drain();
    lf::planner::wait_service_idle();
  }
  lf::synchronize(dev);
  const uint64_t held = counter("captures_holding_memory") - held0,
                 inst = counter("instantiations") - inst0;
  const uint64_t served = lfd::plan_use().served_calls - served0;
  bool folded = false;  // the chain did fold: a GEMV step runs the norm
  for (const lf::PlanInfo& pi : lf::inspect().plans)
    for (const auto& [what, why] : pi.details.decisions)
      folded |= what.find("(its prologue)") != std::string::npos;
  lf::set_config_for_testing(saved);
  lftest::fuzz::reset_pipeline(dev);
  MESSAGE("served " << served << " calls, " << inst << " graphs instantiated, " << held
                    << " captures discarded for held memory");
  CHECK(tokens == eager);
  CHECK(folded);
  CHECK(served > 0);
  CHECK(inst > 0);
  CHECK(held == 0);
}

// Under LIVEFUSE_PDL, a plan's kernel after another kernel of the same run loads what the run
// never writes before its wait (planner/early_reads.cpp, "a plan's reads before its PDL wait"):
// a GEMV its first weights, the decode attention its first cached keys. The decode loop's tokens
// stay those of fusion off, and the counters show the early loads engaged (sm_90+) -- but never
// for every GEMV: each run's first kernel waits for what came before the plan. With
// LIVEFUSE_EARLY_READS=0 nothing loads early, and the tokens are the same.
LF_CUDA_TEST_CASE("decoder plans under PDL: later GEMVs and attentions load early, the tokens of fusion off") {
  const lf::Config saved = lf::config();
  const lf::Device dev = lf::Device::cuda(0);
  // The counter sources are registered in every CUDA build.
  REQUIRE(lf::find_counter(lf::counters(), "cuda.gemv", "launches").has_value());
  REQUIRE(lf::find_counter(lf::counters(), "cuda.attention", "early_kv").has_value());
  const auto counter = [](const char* source, const char* name) {
    return lf::find_counter(lf::counters(), source, name).value_or(0);
  };
#if LIVEFUSE_HAS_CUDA
  const bool pdl = lf::cuda::pdl_enabled();  // sm_90+
#else
  const bool pdl = false;
#endif
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    CAPTURE(preset);
    const lfd::DecoderModel m =
        lfd::DecoderModel::random(lfd::DecoderConfig::preset(preset), 7, lf::DType::f16, dev, 0.08);
    const lf::Tensor p = lf::from_int64s({3, 17, 41, 88, 5}, {1, 5}, lf::DType::i64, dev);
    lf::Config off = saved;
    off.mode = lf::Mode::off;
    lf::set_config_for_testing(off);
    const auto eager = lfd::generate(m, p, 40, lfd::CacheKind::concat, {}, false).tokens;
    for (const bool early_reads : {true, false}) {
      CAPTURE(early_reads);
      lf::Config on = saved;
      on.mode = lf::Mode::on;
      on.sample = 0;
      on.pdl = true;
      on.early_reads = early_reads;
      lftest::fuzz::reset_pipeline(dev);
      lf::set_config_for_testing(on);
      const uint64_t served0 = lfd::plan_use().served_calls;
      const uint64_t launches0 = counter("cuda.gemv", "launches"), early0 = counter("cuda.gemv", "early_weights");
      const uint64_t kv0 = counter("cuda.attention", "early_kv");
      // Each run's plans are made while the program goes on (a tiny model's decode loop can end
      // before its kernels compile): the next run starts once the planner is idle.
      for (int run = 0; run < 4; ++run) {
        CHECK(lfd::generate(m, p, 40, lfd::CacheKind::concat, {}, false).tokens == eager);
        lf::monitor::Monitor::instance().drain();
        lf::planner::wait_service_idle();
      }
      lf::synchronize(dev);
      const uint64_t served = lfd::plan_use().served_calls - served0;
      const uint64_t launches = counter("cuda.gemv", "launches") - launches0;
      const uint64_t early = counter("cuda.gemv", "early_weights") - early0;
      const uint64_t early_kv = counter("cuda.attention", "early_kv") - kv0;
      lf::set_config_for_testing(saved);
      lftest::fuzz::reset_pipeline(dev);
      MESSAGE(std::string(preset) << (early_reads ? "" : " (LIVEFUSE_EARLY_READS=0)") << ": served " << served
                                  << " calls; GEMVs " << launches << ", " << early << " with their weights early; "
                                  << early_kv << " attentions with their keys early");
      CHECK(served > 0);
      if (pdl && early_reads) {
        CHECK(early > 0);
        CHECK(early_kv > 0);
      } else {
        CHECK(early == 0);
        CHECK(early_kv == 0);
      }
      CHECK(early < launches);
    }
  }
}

// A Llama decode layer's rotary inside its Q/K/V GEMV (planner/rotary_epilogue.cpp): the decode
// loop's tokens stay those of fusion off with it on and off, the plans fold it, and the GEMVs
// that rotate run (the "cuda.gemv" counter "rotary"); with LIVEFUSE_GEMV_ROTARY=0 none does.
// Also with the norm chain folded (LIVEFUSE_GEMV_NORM=2): norm, product and rotary in one GEMV.
LF_CUDA_TEST_CASE("decoder plans: Llama's rotary inside the Q/K/V GEMV, the tokens of fusion off") {
  const lf::Config saved = lf::config();
  const lf::Device dev = lf::Device::cuda(0);
  const auto counter = [](const char* name) { return lf::find_counter(lf::counters(), "cuda.gemv", name).value_or(0); };
  for (const lf::DType dt : {lf::DType::f16, lf::DType::bf16, lf::DType::f32}) {
    const std::string dtype(lf::dtype_name(dt));
    CAPTURE(dtype);
    const lfd::DecoderModel m = lfd::DecoderModel::random(lfd::DecoderConfig::preset("llama-tiny"), 9, dt, dev, 0.08);
    const lf::Tensor p = lf::from_int64s({3, 17, 41, 88, 5}, {1, 5}, lf::DType::i64, dev);
    lf::Config off = saved;
    off.mode = lf::Mode::off;
    lf::set_config_for_testing(off);
    const auto eager = lfd::generate(m, p, 40, lfd::CacheKind::concat, {}, false).tokens;
    for (const int setting : {1, 0, 2}) {  // rotary in the GEMV; its own step; in the GEMV with the norm chain
      CAPTURE(setting);
      lf::Config on = saved;
      on.mode = lf::Mode::on;
      on.sample = 0;
      on.gemv_rotary = setting != 0;
      on.gemv_norm = setting == 2 ? 2 : 1;
      lftest::fuzz::reset_pipeline(dev);
      lf::set_config_for_testing(on);
      const uint64_t served0 = lfd::plan_use().served_calls, rotary0 = counter("rotary");
      for (int run = 0; run < 4; ++run) {
        CHECK(lfd::generate(m, p, 40, lfd::CacheKind::concat, {}, false).tokens == eager);
        lf::monitor::Monitor::instance().drain();
        lf::planner::wait_service_idle();
      }
      lf::synchronize(dev);
      bool folded = false;
      for (const lf::PlanInfo& pi : lf::inspect().plans)
        for (const auto& [what, why] : pi.details.decisions)
          folded |= why.find("rotates q and k") != std::string::npos;
      const uint64_t served = lfd::plan_use().served_calls - served0, rotary = counter("rotary") - rotary0;
      lf::set_config_for_testing(saved);
      lftest::fuzz::reset_pipeline(dev);
      MESSAGE("served " << served << " calls, " << rotary << " GEMVs rotating");
      CHECK(served > 0);
      CHECK(folded == (setting != 0));
      CHECK((rotary > 0) == (setting != 0));
    }
  }
}
