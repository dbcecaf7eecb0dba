// A process that returns from main while the global kernel compiler still has NVRTC jobs
// running or queued must exit cleanly (status 0). NVRTC loads libraries of its own at its first
// compile; their teardown once ran before the compiler's drain and crashed the exit. Needs
// NVRTC only (no GPU): run by meson as "nvrtc-exit-with-compiles", "lto-exit-with-compiles" and
// "exit-during-warm-up".
#include <cstdio>
#include <future>
#include <string>
#include <vector>

#include "kernels/jit/kernel_compiler.hpp"
#include "livefuse/config.hpp"
#include "planner/planner.hpp"
#include "planner/segment.hpp"

int main(int argc, char** argv) {
  using namespace livefuse;
  using namespace livefuse::planner;
  if (!jit::nvrtc_available()) {
    std::printf("no NVRTC in this build: nothing to test\n");
    return 77;  // meson: skipped
  }
  jit::CompileOptions o;
  o.arch = 90;
  o.lto = livefuse::config().jit_lto;  // linked pointwise kernels, or NVRTC's (LIVEFUSE_JIT=nvrtc)
  std::vector<std::shared_future<jit::CompileResult>> jobs;
  std::vector<std::shared_ptr<const jit::KernelSpec>> batch;
  // The warm-up the planner service starts on a GPU machine (NVRTC's first use, the op library,
  // the linker's first use) is a job like the others: queued first, it may still run at exit.
  // With --warm-up-only the process returns with nothing else queued (a short program on a GPU
  // machine whose planner service just started).
  (void)jit::KernelCompiler::global().warm_up(o);
  if (argc > 1 && std::string(argv[1]) == "--warm-up-only") {
    std::printf("returning from main with the warm-up queued\n");
    return 0;
  }
  // Distinct kernels, so none is deduplicated or cached: pointwise ones alone, then row kernels
  // (two bodies: NVRTC's split compile, first used while the process exits) and a batch.
  for (int k = 0; k < 9; ++k) {
    SegmentBuilder b;
    const ValueRef x = b.input({64, 512}), w = b.input({512});
    ValueRef v = b.scalar_op(OpId::add, x, 1.0 + 0.01 * k);
    if (k >= 3) {
      Attrs a;
      a.push_float(1e-5);
      a.push_int(1);
      a.push_int(0);
      v = b.add(OpId::layer_norm, {v, w}, a);
    }
    for (int i = 0; i < 6; ++i)
      v = i % 2 ? b.add(OpId::gelu, {v}) : b.add(OpId::mul, {v, x});
    b.output(v);
    const PlannedSegment p = plan_segment(b.build(), default_planner_options(Device::cuda(0)));
    for (const Step& s : p.steps)
      if (const auto* fk = std::get_if<FusedKernelStep>(&s.body)) {
        if (k < 6) jobs.push_back(jit::KernelCompiler::global().submit(fk->spec, o));
        else batch.push_back(fk->spec);
      }
  }
  for (auto& f : jit::KernelCompiler::global().submit_batch(batch, o)) jobs.push_back(f);
  if (jobs.empty()) return 1;
  const jit::CompileResult first = jobs[0].get();
  std::printf("first kernel: %s; returning from main with %zu jobs submitted\n",
              first.ok() ? "compiled" : first.error.c_str(), jobs.size());
  return first.ok() ? 0 : 1;
}
