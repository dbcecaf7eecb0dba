// Differential fuzz: random valid programs run repeatedly with fusion on must give what
// LIVEFUSE=off gives, and plans must really serve the calls (a run where fusion never engaged
// fails). Now and then a plan's run stops part-way (lftest::fuzz::random_stops: its window runs
// eagerly), and in one program of eight one fails outright (random_failure: the plan is marked
// failed); both must still give eager's values. Programs per run: LIVEFUSE_FUZZ_PROGRAMS
// (default 2000).
#include <cstdlib>
#include <cstring>

#include "monitor/monitor.hpp"
#include "planner/service.hpp"
#include "random_program.hpp"
#include "runtime/plan.hpp"
#include "test_plan_util.hpp"
#include "tests/fuzz_util.hpp"
#if LIVEFUSE_HAS_CUDA
#include "kernels/cuda/gemm_lt.hpp"
#endif

namespace lf = livefuse;

namespace {

struct FuzzResult {
  uint64_t calls = 0, served = 0, mismatches = 0, programs = 0;
  uint64_t declined = 0;  // plan runs stopped part-way (their windows ran eagerly)
  uint64_t failed = 0;    // plan runs that failed (their plans marked failed)
  std::string first_failure;
};

lf::Config with_mode(lf::Mode m) {
  lf::Config c = lftest::unsettled(lf::config());  // 16 iterations a program
  c.mode = m;
  c.sample = 0;  // correctness here; live sampling has its own tests
  return c;
}

double rtol_for(lf::DType t) {
  return t == lf::DType::f32 ? 2e-4 : (t == lf::DType::f16 ? 1e-2 : 5e-2);
}

// `reachable`: the program writes its inputs through pointers from data_ptr() after each
// iteration's calls returned and before it reads their results (restoring them afterwards):
// results must be what the inputs held at the calls (CPU: the writes are plain stores).
FuzzResult fuzz(lf::Device dev, int programs, int iters, uint64_t seed0, bool reachable = false) {
  FuzzResult r;
  const lf::DType dtypes[] = {lf::DType::f32, lf::DType::f32, lf::DType::f32, lf::DType::f16,
                              lf::DType::bf16};
  for (int p = 0; p < programs; ++p) {
    const lf::DType dt = dtypes[p % 5];
    lftest::RandomProgram prog(seed0 + p, dev, dt);
    // Now and then a switch off its default (lftest::fuzz::Switches), named in a failure.
    const lftest::fuzz::Switches switches(seed0 + p);
    lf::Config on = with_mode(lf::Mode::on);
    switches.apply(on);
    lftest::reset_pipeline(&on);
    lf::set_config_for_testing(with_mode(lf::Mode::off));
    std::vector<std::vector<double>> ref;
    for (const lf::Tensor& t : prog.run()) ref.push_back(t.to_doubles());
    lf::set_config_for_testing(on);
    const uint64_t calls0 = lf::matcher_counters().calls, served0 = lf::matcher_counters().served;
    const uint64_t declined0 = lf::matcher_counters().plan_declined;
    const uint64_t failed0 = lf::matcher_counters().flush_error;
    // Drawn from a stream of their own: each seed's program is what it was before stops came. A
    // run of the program passes few step points (a plan or two of a few steps).
    const std::vector<int> stops = lftest::fuzz::random_stops(seed0 + p, static_cast<size_t>(iters), 3);
    // Failures in one program of 8: each costs the rest of its program the plan it failed.
    const int failure = lftest::fuzz::random_failure(seed0 + p, static_cast<size_t>(iters), 8);
    std::vector<std::pair<void*, size_t>> reach;
    std::vector<std::vector<char>> saved;
    if (reachable) {
      reach = prog.reach_inputs();
      for (const auto& [p, n] : reach) saved.emplace_back(static_cast<char*>(p), static_cast<char*>(p) + n);
    }
    for (int it = 0; it < iters; ++it) {
      // Spans the iteration: a plan may run at the read of its window's results.
      const lftest::fuzz::FaultScope faults(stops[static_cast<size_t>(it)], it == failure);
      std::vector<lf::Tensor> outs = prog.run();
      for (const auto& [p, n] : reach) std::memset(p, 0x7f, n);  // huge values: any stale read shows
      for (size_t k = 0; k < outs.size(); ++k) {
        size_t bad = 0;
        const std::vector<double> got = outs[k].to_doubles();
        if (!lftest::allclose(got, ref[k], rtol_for(dt), rtol_for(dt) * 0.1, &bad)) {
          ++r.mismatches;
          if (r.first_failure.empty())
            r.first_failure = prog.describe() + switches.describe() + " iter " + std::to_string(it) + " output " +
                              std::to_string(k) + " index " + std::to_string(bad) + ": got " +
                              std::to_string(got[bad]) + " want " + std::to_string(ref[k][bad]);
        }
      }
      for (size_t i = 0; i < reach.size(); ++i) std::memcpy(reach[i].first, saved[i].data(), saved[i].size());
      if (it == lf::config().hot + 1) {
        lf::monitor::Monitor::instance().drain();
        lf::planner::wait_service_idle();
      }
    }
    r.calls += lf::matcher_counters().calls - calls0;
    r.served += lf::matcher_counters().served - served0;
    r.declined += lf::matcher_counters().plan_declined - declined0;
    r.failed += lf::matcher_counters().flush_error - failed0;
    ++r.programs;
  }
  lftest::reset_pipeline();
  return r;
}

int programs_from_env(int dflt) {
  if (const char* v = std::getenv("LIVEFUSE_FUZZ_PROGRAMS")) return std::max(1, std::atoi(v));
  return dflt;
}

}  // namespace

TEST_CASE("differential: random programs, fusion on vs LIVEFUSE=off, on the CPU") {
  const lf::Config saved = lf::config();
  const FuzzResult r = fuzz(lf::Device::cpu(), programs_from_env(2000), 16, 1);
  lf::set_config_for_testing(saved);
  MESSAGE("programs " << r.programs << ", calls " << r.calls << ", served by plans " << r.served
                      << " (" << (r.calls ? 100.0 * double(r.served) / double(r.calls) : 0.0)
                      << "%), " << r.declined << " plan runs stopped part-way, " << r.failed << " failed");
  CHECK_MESSAGE(r.mismatches == 0, r.first_failure);
  CHECK(r.calls > 0);
  CHECK(double(r.served) >= 0.5 * double(r.calls));
  if (r.programs >= 50) CHECK(r.declined > 0);
  if (r.programs >= 50) CHECK(r.failed > 0);
}

TEST_CASE("differential: inputs the program rewrites through data_ptr() after the calls, on the CPU") {
  const lf::Config saved = lf::config();
  const uint64_t snaps0 = lf::matcher_counters().snapshots;
  const FuzzResult r = fuzz(lf::Device::cpu(), programs_from_env(2000) / 10, 16, 500000, true);
  lf::set_config_for_testing(saved);
  MESSAGE("programs " << r.programs << ", calls " << r.calls << ", served by plans " << r.served
                      << ", snapshots " << lf::matcher_counters().snapshots - snaps0);
  CHECK_MESSAGE(r.mismatches == 0, r.first_failure);
  CHECK(lf::matcher_counters().snapshots > snaps0);
  CHECK(double(r.served) >= 0.3 * double(r.calls));
}

LF_CUDA_TEST_CASE("differential: random programs, fusion on vs LIVEFUSE=off, on the GPU") {
  const lf::Config saved = lf::config();
  const FuzzResult r = fuzz(lf::Device::cuda(0), programs_from_env(2000) / 10, 16, 100000);
  lf::set_config_for_testing(saved);
  MESSAGE("programs " << r.programs << ", calls " << r.calls << ", served by plans " << r.served
                      << " (" << (r.calls ? 100.0 * double(r.served) / double(r.calls) : 0.0)
                      << "%), " << r.declined << " plan runs stopped part-way, " << r.failed << " failed");
  CHECK_MESSAGE(r.mismatches == 0, r.first_failure);
  CHECK(double(r.served) >= 0.5 * double(r.calls));
  if (r.programs >= 50) CHECK(r.declined > 0);
  if (r.programs >= 50) CHECK(r.failed > 0);
}

// LIVEFUSE_FUZZ_SEED=S reruns the program a failure names ("program seed=S ..."), on the GPU when
// there is one (LIVEFUSE_LOG=debug prints each plan's passes): the reproduction of a fuzz failure.
TEST_CASE("differential: the program of LIVEFUSE_FUZZ_SEED alone") {
  const char* s = std::getenv("LIVEFUSE_FUZZ_SEED");
  if (!s) return;
  const lf::Config saved = lf::config();
  const uint64_t seed = std::strtoull(s, nullptr, 10);
#if LIVEFUSE_HAS_CUDA
  // LIVEFUSE_TEST_TUNE_CANDIDATES=1 with LIVEFUSE_GEMM_TUNE=1: tuning times the top-1 only, so a
  // failure that stays is not a tuned algorithm's.
  if (const char* n = std::getenv("LIVEFUSE_TEST_TUNE_CANDIDATES"))
    lf::cuda::set_gemm_tune_candidates_for_testing(std::atoi(n));
#endif
  const lf::Device dev = lf::cuda_available() ? lf::Device::cuda(0) : lf::Device::cpu();
  // fuzz() takes a program's dtype from its index (p % 5): start where this one's index matches.
  const FuzzResult r = fuzz(dev, static_cast<int>(seed % 5) + 1, 16, seed - seed % 5);
  lf::set_config_for_testing(saved);
#if LIVEFUSE_HAS_CUDA
  for (const lf::cuda::GemmTuneRecord& t : lf::cuda::gemm_tune_records())
    MESSAGE("tuned GEMM m ", t.m, " n ", t.n, " k ", t.k, " batch ", t.batch, " ", lf::dtype_name(t.dtype),
            ": chosen ", t.chosen, " of ", t.offered, ", ", t.wrong, " wrong (", t.chosen_us, " us, top-1 ", t.top1_us,
            "), split_k ", t.split_k, ", reduction ", t.reduction, ", workspace ", t.workspace,
            " (top-1 ", t.top1_workspace, "), algo ", t.algo_id, " tile ", t.tile);
#endif
  CHECK_MESSAGE(r.mismatches == 0, r.first_failure);
}
