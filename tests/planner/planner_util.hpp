#pragma once
// Helpers of the planner suite: eager reference execution of a Segment (every node through the
// eager backends, as lf:: ops would run it) and the fused plan on the CPU interpreter, compared
// output by output.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "planner/plan_siblings.hpp"
#include "planner/planner.hpp"
#include "runtime/memory_pool.hpp"
#include "runtime/executor.hpp"
#include "runtime/write_batch.hpp"
#include "tests/test_util.hpp"

namespace plantest {

using namespace livefuse;
using namespace livefuse::planner;

inline std::vector<Tensor> eager_values(const Segment& seg, const std::vector<Tensor>& externals) {
  // run_eager_into reads storage: an external a live plan deferred is flushed first (as the
  // runtime's own eager path does; test_planner runs with LIVEFUSE=on, so hot sequences of the
  // helpers' own calls, e.g. random_externals' casts, can be planned and deferred).
  for (const Tensor& t : externals)
    if (t.impl()->pending) Executor::materialize(*t.impl());
  writes::flush_own();  // and held in-place writes land (runtime/write_batch.hpp), as at a call
  std::vector<Tensor> values(externals.begin(), externals.end());
  values.resize(seg.num_values());
  for (int j = 0; j < static_cast<int>(seg.nodes.size()); ++j) {
    OpCall c = seg.call_of(j, values);
    const OutputInfos infos = infer_outputs(c);
    const TensorList outs = Executor::make_outputs(c, infos, externals[0].device(), nullptr);
    Executor::run_eager_into(c, outs, Stream::current(externals[0].device()));
    for (size_t k = 0; k < outs.size(); ++k) values[seg.value_id(ValueRef::of(j, static_cast<int>(k)))] = outs[k];
  }
  return values;
}

// Random externals: uniform in [lo, hi); i32 in [-9, 9), i64 in [0, 9) (usable as ids).
inline std::vector<Tensor> random_externals(const Segment& seg, uint64_t seed, double lo = -2.0, double hi = 2.0) {
  std::vector<Tensor> xs;
  for (size_t e = 0; e < seg.externals.size(); ++e) {
    const ExternalInfo& x = seg.externals[e];
    const bool is_int = !is_floating(x.dtype);
    Tensor t = rand_uniform(x.shape, seed + 17 * e, is_int ? (x.dtype == DType::i64 ? 0.0 : -9.0) : lo, is_int ? 9.0 : hi,
                            is_int ? DType::f32 : x.dtype, Device::cpu());
    if (is_int) t = cast(t, x.dtype);
    xs.push_back(t);
  }
  return xs;
}

// Binds the plan's values with every written buffer poisoned first (so a value the plan fails
// to write cannot pass by inheriting a previous result). On CUDA, the outputs of a merged GEMM
// that writes them in place get one run of storages, as FusedPlan's binding sets give them.
inline std::vector<Tensor> poisoned_values(const PlannedSegment& p, const std::vector<Tensor>& externals) {
  std::vector<Tensor> values = bind_values(p, externals);
  const bool cuda = !externals.empty() && externals[0].device().is_cuda();
  for (const std::vector<int>& run : cuda ? planner::detail::sibling_output_runs(p) : std::vector<std::vector<int>>{}) {
    const bool all_pending = std::all_of(run.begin(), run.end(), [&](int v) {
      return p.values[v] == ValueKind::Materialized && values[v].defined() && !values[v].impl()->storage;
    });
    if (!all_pending) continue;
    const TensorImpl& first = *values[run[0]].impl();
    const auto bufs = allocate_storage_run(first.device, first.nbytes(), static_cast<int>(run.size()),
                                           Stream::current(first.device).handle());
    for (size_t i = 0; i < run.size(); ++i) {
      TensorImpl& impl = *values[run[i]].impl();
      impl.storage = bufs[i];
      impl.pending = nullptr;
      copy_into(values[run[i]], full(impl.shape, -777.0, impl.dtype, impl.device));
    }
  }
  for (size_t v = externals.size(); v < values.size(); ++v) {
    if (p.values[v] != ValueKind::Materialized) continue;
    TensorImpl& impl = *values[v].impl();
    if (impl.storage) continue;
    impl.storage = full(impl.shape, -777.0, impl.dtype, impl.device).impl()->storage;
    impl.pending = nullptr;
  }
  return values;
}

inline double tol_for(DType d) { return d == DType::f32 ? 2e-5 : lftest::tolerance(d) * 2; }

// Plans `seg` for the CPU, runs it on random inputs and compares every segment output with
// eager execution. Returns the plan (for kernel-count assertions).
inline PlannedSegment check_against_eager(const Segment& seg, uint64_t seed, double rtol = -1, double atol = -1,
                                          const PlannerOptions* opts = nullptr) {
  const PlannedSegment p = plan_segment(seg, opts ? *opts : default_planner_options(Device::cpu()));
  INFO(p.describe());
  const std::vector<Tensor> xs = random_externals(seg, seed);
  const std::vector<Tensor> want = eager_values(seg, xs);
  const std::vector<Tensor> got = poisoned_values(p, xs);
  run_plan(p, got);
  for (const ValueRef& r : seg.outputs) {
    const int v = seg.value_id(r);
    const DType dt = seg.dtype(r);
    const double rt = rtol >= 0 ? rtol : tol_for(dt);
    const double at = atol >= 0 ? atol : rt;
    size_t bad = 0;
    const auto g = got[v].to_doubles(), w = want[v].to_doubles();
    INFO("output value " << v << " " << dtype_name(dt) << seg.shape(r).str());
    const bool ok = lftest::allclose(g, w, rt, at, &bad);
    CHECK_MESSAGE(ok, "first mismatch at " << bad << ": got " << (bad < g.size() ? g[bad] : 0.0) << " want "
                                           << (bad < w.size() ? w[bad] : 0.0));
  }
  return p;
}

// Attrs of the ops the planner tests build, in the op table's conventions.
inline Attrs dim_attrs(int64_t dim, bool keepdim) {
  Attrs a;
  a.push_int(dim);
  a.push_int(keepdim ? 1 : 0);
  return a;
}
inline Attrs norm_attrs(double eps, bool w, bool b) {  // layer_norm / rms_norm (b unused there)
  Attrs a;
  a.push_float(eps);
  a.push_int(w ? 1 : 0);
  a.push_int(b ? 1 : 0);
  return a;
}
inline Attrs softmax_attrs(double scale, bool mask) {
  Attrs a;
  a.push_float(scale);
  a.push_int(mask ? 1 : 0);
  return a;
}
inline Attrs cast_attrs(DType d) {
  Attrs a;
  a.dtype = d;
  return a;
}
// Attrs of integers only (slice, permute, reshape, concat).
inline Attrs ints(std::initializer_list<int64_t> v) {
  Attrs a;
  for (int64_t d : v) a.push_int(d);
  return a;
}
inline Attrs linear_attrs(bool bias) {
  Attrs a;
  a.push_int(bias ? 1 : 0);
  a.push_int(0);
  return a;
}

// A fresh directory under the system's temp dir (kernel cache tests), removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           ("lf_kcache_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::remove_all(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::vector<std::filesystem::path> files(const std::string& ext = ".lfk") const {
    std::vector<std::filesystem::path> out;
    if (!std::filesystem::exists(path)) return out;
    for (const auto& e : std::filesystem::directory_iterator(path))
      if (ext.empty() || e.path().extension() == ext) out.push_back(e.path());
    return out;
  }
};

// NVRTC options for sm_90 (tests compile for it whether or not a GPU is present).
inline jit::CompileOptions sm90() {
  jit::CompileOptions o;
  o.arch = 90;
  return o;
}

// The generated kernels of a plan (fused steps and GEMM tails), in step order.
inline std::vector<std::shared_ptr<const jit::KernelSpec>> specs_of(const PlannedSegment& p) {
  std::vector<std::shared_ptr<const jit::KernelSpec>> s;
  for (const Step& st : p.steps) {
    if (const auto* fk = std::get_if<FusedKernelStep>(&st.body)) s.push_back(fk->spec);
    if (const auto* gs = std::get_if<GemmStep>(&st.body); gs && gs->tail) s.push_back(gs->tail->spec);
  }
  return s;
}

}  // namespace plantest
