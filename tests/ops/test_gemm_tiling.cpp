// How the CPU GEMM cuts its output into tiles (kernels/cpu/gemm.cpp, gemm_tiling): the cut ends
// for every shape and thread count, covers the output without an empty tile, and a product runs
// right on a machine with many more threads than this one (the cut once looped forever for a
// 300-row product with 16 threads: every CUDA sibling case that checked against the CPU hung on
// the GPU machine's 16 cores and never on this machine's 2).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_microkernel.hpp"
#include "tests/ops/ops_util.hpp"

using namespace opstest;
using livefuse::cpu::gemm_tiling;
using livefuse::cpu::kMR;
using livefuse::cpu::kNR;

TEST_CASE("gemm tiling: ends, covers the output evenly, and cuts as far as it may") {
  for (const int workers : {1, 2, 3, 4, 8, 16, 24, 32, 64, 128, 256})
    for (const int64_t batch : {1, 3})
      for (int64_t M = 1; M <= 1100; M += (M < 80 ? 1 : 13))
        for (const int64_t N : {1, 31, 64, 65, 300, 768, 3072}) {
          const int64_t work = batch * M * N * 64;
          const auto t = gemm_tiling(M, N, batch, work, workers);
          INFO("M " << M << " N " << N << " batch " << batch << " workers " << workers << " -> "
                    << t.mt << " x " << t.mc << ", " << t.nt << " x " << t.nc);
          REQUIRE((t.mc % kMR == 0 && t.nc % kNR == 0));
          REQUIRE((t.mc <= 128 && t.nc <= 256));
          REQUIRE((t.mt * t.mc >= M && (t.mt - 1) * t.mc < M));  // covered, no empty tile
          REQUIRE((t.nt * t.nc >= N && (t.nt - 1) * t.nc < N));
          // Fewer than two tiles a thread only where neither side may be cut further.
          if (work >= 32 * 1024 && batch * t.mt * t.nt < 2 * workers)
            REQUIRE((t.mc <= 4 * kMR && t.nc <= 2 * kNR));
        }
}

TEST_CASE("gemm tiling: a linear over 300 rows is right in a 16-thread arena") {
  // LIVEFUSE_CPU_THREADS caps TBB for the whole process (the TSan run sets 1): no arena gets 16.
  if (lf::config().cpu_threads > 0 && lf::config().cpu_threads < 16) {
    MESSAGE("skipped: LIVEFUSE_CPU_THREADS=" << lf::config().cpu_threads << " caps the threads below 16");
    return;
  }
  const Tensor x = rand_tensor({300, 64}, DType::f32, Device::cpu(), 5);
  const Tensor w = rand_tensor({64, 64}, DType::f32, Device::cpu(), 6);
  const std::vector<double> xv = x.to_doubles(), wv = w.to_doubles();
  // In its own thread, waited for with a limit: before the fix this call never returned.
  // TBB caps parallelism at the machine's threads unless raised: 16 here, whatever this has.
  tbb::global_control more(tbb::global_control::max_allowed_parallelism, 16);
  int workers = 0;
  auto done = std::async(std::launch::async, [&] {
    tbb::task_arena arena(16);
    Tensor out;
    arena.execute([&] {
      workers = livefuse::cpu::cpu_workers();
      out = lf::linear(x, w);
    });
    return out.to_doubles();
  });
  if (done.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    std::fprintf(stderr, "gemm tiling: a 300 x 64 x 64 linear in a 16-thread arena did not end in 60 s\n");
    std::_Exit(1);
  }
  const std::vector<double> got = done.get();
  CHECK(workers == 16);  // the GEMM saw 16 threads (else this case proves nothing)
  for (int64_t m = 0; m < 300; ++m)
    for (int64_t n = 0; n < 64; ++n) {
      double want = 0;
      for (int64_t k = 0; k < 64; ++k) want += xv[m * 64 + k] * wv[n * 64 + k];
      REQUIRE(std::abs(got[m * 64 + n] - want) <= 1e-4 * (1 + std::abs(want)));
    }
}
