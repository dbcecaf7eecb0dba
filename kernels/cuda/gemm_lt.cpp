// cuBLASLt calls: handles, per-shape plans and per-stream workspaces.
//
// [ Note -- what is cached ]
//  * one cublasLtHandle_t per device (created once, never destroyed: cuBLASLt may be torn down
//    before static destructors run);
//  * one workspace of kGemmWorkspaceBytes per (device, stream) (stream_buffer.hpp), allocated
//    on the stream's first GEMM and kept: later calls allocate nothing, so they can be captured
//    in a graph;
//  * per thread, a GemmPlan per GemmKey: the matmul descriptor, the three matrix layouts and
//    the heuristic's algorithm. The key holds everything the heuristic sees: dtype, tf32,
//    transposes, m/n/k, leading dims, batch count and strides, bias on/off, the alignment of
//    every pointer (cuBLASLt picks kernels by alignment) and the device. Thread-local, so the
//    per-call bias pointer can be set on the cached descriptor without a lock or a race.
//    Bounded: past kMaxPlans entries the thread's cache is dropped and rebuilt.
//  * per thread, the algorithm of each few-row batched product family (a decode step's eager
//    attention products over every cache length: gemm_lt_family.hpp), bounded the same way.
//
// [ Note -- tuned algorithms ]
// The heuristic's top-1 is often far from the best algorithm for a shape (on the H200, BERT-base
// f16's projections at 128 rows ran at about half the speed the library reaches). A GEMM that
// misses its thread's plan cache under a GemmTuning guard asks for the top kGemmTuneCandidates,
// times each on its own operands and stream, and keeps the fastest in a process-wide table
// (key -> algo, workspace), bounded by kMaxTuned. The planner does this on its own thread
// while a CUDA plan compiles (planner/gemm_tuning.cpp), on scratch operands laid out as the
// plan's, so the program's thread only ever looks the choice up:
//  * a plan built on a miss takes the table's algorithm when it has the key;
//  * a plan built before the key was tuned (the eager GEMMs that ran while the sequence was
//    getting hot) looks again once per change of the table (g_tuned_gen, one relaxed load a
//    call), so the plan's GEMMs pick up the tuned algorithm without a lock per call.
// LIVEFUSE_GEMM_TUNE=0 turns the lookup off (the planner then tunes nothing either).
// Timing: 2 warm-up runs and a synchronize (kernel modules load lazily at their first launch),
// then a GPU delay kernel and 5 timed runs between CUDA events (more, up to 100, for a GEMM
// that short that 5 runs are within the events' resolution). The delay lets the host queue
// all of them before the GPU reaches them, so they run back to back as in a CUDA graph and a
// short kernel (a decode GEMV is ~2 us) is timed, not its launch cost.
#include "kernels/cuda/gemm_lt.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/gemm_lt_check.hpp"
#include "kernels/cuda/gemm_lt_family.hpp"
#include "kernels/cuda/gemm_lt_operands.hpp"
#include "kernels/cuda/gpu_delay.hpp"
#include "kernels/cuda/stream_buffer.hpp"
#include "livefuse/config.hpp"
#include "runtime/inspect_registry.hpp"

namespace livefuse::cuda {
namespace {

using detail::cuda_type;
using detail::operand_alignment;

constexpr size_t kMaxPlans = 1024;
constexpr size_t kMaxTuned = 1024;
constexpr int kTuneWarmup = 2, kTuneReps = 5;
// A GEMM whose kTuneReps runs take less than kTuneMinTotalUs (a decode GEMV: ~2 us each) is
// timed over more runs, at most kTuneMaxReps, so that the events' resolution (~0.5 us) does not
// decide between candidates a few percent apart.
constexpr double kTuneMinTotalUs = 200;
constexpr int kTuneMaxReps = 100;
// The delay in front of the timed runs: enough for the host to queue them (cuBLASLt's launch
// costs a few microseconds of host time).
constexpr uint32_t kTuneDelayBaseNs = 100'000, kTuneDelayPerRunNs = 10'000;

// ---- handles and workspaces ---------------------------------------------------------------
// The maps are leaked as the handles are: a static built at a thread's first GEMM would be
// destroyed at exit before the atexit handlers registered earlier run -- one of which lets the
// planner thread finish the GEMM tuning it is in (planner/gemm_tuning.cpp), still using them.
cublasLtHandle_t handle_for(int device) {
  static std::mutex mu;
  static auto& handles = *new std::unordered_map<int, cublasLtHandle_t>();  // leaked (above)
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  LF_CUBLAS_CALL(cublasLtCreate(&h));
  handles.emplace(device, h);
  return h;
}

void* workspace_for(int device, cudaStream_t s) {
  void* ws = stream_buffer(StreamBuffer::gemm_workspace, device, s, kGemmWorkspaceBytes);
  LF_CHECK(ws, "matmul", "stream ", static_cast<const void*>(s),
           " is being captured before it ever ran a GEMM: its cuBLASLt workspace cannot be allocated now");
  return ws;
}

struct GemmKey {
  std::array<int64_t, 24> v{};
  bool operator==(const GemmKey& o) const { return v == o.v; }
};
struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t x : k.v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
    return h;
  }
};

struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool tuned = false;      // algo is the tuned table's (or was timed here)
  bool tune_tried = false; // timed here already (whatever came of it): never again
  uint64_t tuned_gen = 0;  // g_tuned_gen when the table was last consulted for it
  GemmPlan() = default;
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan() {
    // Errors on teardown are ignored: nothing useful can be done with them here.
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
  }
};

// ---- the tuned table ----------------------------------------------------------------------
struct Tuned {
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
};

struct TuneState {
  std::mutex mu;
  std::unordered_map<GemmKey, Tuned, GemmKeyHash> table;
  std::deque<GemmTuneRecord> records;
  GemmTuneCounters ctr;
};
TuneState& tune_state() {
  static TuneState* s = new TuneState;  // leaked: GEMMs may run from thread_local destructors
  return *s;
}
// Bumped on every change of the table. Starts at 1 so that a plan (tuned_gen 0) made before
// anything was tuned still looks once -- cheap, and simpler than a special case.
std::atomic<uint64_t> g_tuned_gen{1};

thread_local bool t_tuning = false;
std::atomic<int> g_tune_candidates{kGemmTuneCandidates};

using PlanMap = std::unordered_map<GemmKey, std::unique_ptr<GemmPlan>, GemmKeyHash>;
PlanMap& thread_plans() {
  // Per thread, and never destroyed: a thread's last GEMMs may run from other thread_local
  // destructors (deferred work flushed at thread exit), after this map would be gone. At most
  // kMaxPlans small descriptors per thread that ever ran a GEMM.
  thread_local auto& plans = *new PlanMap();
  return plans;
}

// Takes the table's algorithm for `key` into `p` if it has one. Called only when the table
// changed since `p` last looked (one relaxed load otherwise).
void refresh_from_table(const GemmKey& key, GemmPlan* p) {
  const uint64_t gen = g_tuned_gen.load(std::memory_order_acquire);
  if (p->tuned || p->tuned_gen == gen) return;
  p->tuned_gen = gen;
  TuneState& st = tune_state();
  std::lock_guard<std::mutex> lock(st.mu);
  auto it = st.table.find(key);
  if (it == st.table.end()) return;
  p->algo = it->second.algo;
  p->workspace = it->second.workspace;
  p->tuned = true;
  ++st.ctr.table_hits;
}

void store_tuned(const GemmKey& key, const Tuned& t, const GemmTuneRecord& rec, int timed,
                 int failed) {
  TuneState& st = tune_state();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    // Past the cap the table starts again: the shapes of the plans still being made come back
    // at their next compile, and any plan already built keeps its algorithm.
    if (st.table.size() >= kMaxTuned && !st.table.count(key)) st.table.clear();
    st.table[key] = t;
    st.records.push_back(rec);
    while (st.records.size() > kGemmTuneRecords) st.records.pop_front();
    ++st.ctr.tuned;
    st.ctr.candidates_timed += static_cast<uint64_t>(timed);
    st.ctr.candidates_failed += static_cast<uint64_t>(failed);
    st.ctr.candidates_wrong += static_cast<uint64_t>(rec.wrong);
    if (rec.chosen != 0) ++st.ctr.improved;
  }
  g_tuned_gen.fetch_add(1, std::memory_order_acq_rel);
}

const float kOne = 1.0f, kZero = 0.0f;

cublasStatus_t run_algo(const LtCall& c, const GemmPlan* p, const cublasLtMatmulAlgo_t& algo,
                        size_t ws_bytes, cublasLtHandle_t handle, void* ws, cudaStream_t s) {
  return cublasLtMatmul(handle, p->desc, &kOne, c.a.ptr, p->a, c.b.ptr, p->b,
                        c.c ? &kOne : &kZero, c.c ? c.c : c.d, p->d, c.d, p->d, &algo, ws,
                        ws_bytes, s);
}

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    LF_CUDA_CALL(cudaEventCreate(&start));
    LF_CUDA_CALL(cudaEventCreate(&stop));
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

// GPU microseconds per run of `algo`, or a negative value when it would not run. The stream is
// synchronized either way.
double time_algo(const LtCall& c, const GemmPlan* p, const cublasLtMatmulAlgo_t& algo,
                 size_t ws_bytes, cublasLtHandle_t handle, void* ws, cudaStream_t s,
                 const Events& ev, int reps) {
  bool ok = true;
  for (int i = 0; i < kTuneWarmup && ok; ++i)
    ok = run_algo(c, p, algo, ws_bytes, handle, ws, s) == CUBLAS_STATUS_SUCCESS;
  if (!ok) {
    (void)cudaStreamSynchronize(s);
    (void)cudaGetLastError();  // a launch cuBLASLt refused leaves nothing sticky
    return -1;
  }
  LF_CUDA_CALL(cudaStreamSynchronize(s));
  gpu_delay(s, kTuneDelayBaseNs + kTuneDelayPerRunNs * static_cast<uint32_t>(reps));
  LF_CUDA_CALL(cudaEventRecord(ev.start, s));
  for (int i = 0; i < reps && ok; ++i)
    ok = run_algo(c, p, algo, ws_bytes, handle, ws, s) == CUBLAS_STATUS_SUCCESS;
  LF_CUDA_CALL(cudaEventRecord(ev.stop, s));
  LF_CUDA_CALL(cudaEventSynchronize(ev.stop));
  if (!ok) return -1;
  float ms = 0;
  LF_CUDA_CALL(cudaEventElapsedTime(&ms, ev.start, ev.stop));
  return 1000.0 * ms / reps;
}

// Times the heuristic's candidates (`results`, best first by its estimate) and takes the
// fastest into `p` and the table. `p`'s desc already carries this call's bias pointer.
void tune(const GemmKey& key, const LtCall& c, GemmPlan* p,
          const cublasLtMatmulHeuristicResult_t* results, int found, cublasLtHandle_t handle,
          void* ws, cudaStream_t s) {
  p->tune_tried = true;
  const Events ev;
  GemmTuneRecord rec;
  rec.m = c.n, rec.n = c.m, rec.k = c.k, rec.batch = c.batch;
  rec.dtype = c.dtype, rec.act = c.act, rec.bias = c.bias != nullptr, rec.c = c.c != nullptr;
  rec.offered = found;
  int best = -1, failed = 0, reps = kTuneReps;
  double best_us = 0;
  std::vector<float> ref;  // D of the first candidate that ran
  for (int i = 0; i < found; ++i) {
    const cublasLtMatmulHeuristicResult_t& r = results[i];
    double us = -1;
    if (r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= kGemmWorkspaceBytes) {
      us = time_algo(c, p, r.algo, r.workspaceSize, handle, ws, s, ev, reps);
      if (best < 0 && us > 0 && us * reps < kTuneMinTotalUs) {
        // The first candidate that ran sets the run count for all of them (same footing).
        reps = std::min(kTuneMaxReps, static_cast<int>(kTuneMinTotalUs / us) + 1);
        us = time_algo(c, p, r.algo, r.workspaceSize, handle, ws, s, ev, reps);
      }
    }
    if (us < 0) {
      ++failed;
      continue;
    }
    ++rec.timed;
    std::vector<float> d = detail::read_d(c, s);
    if (ref.empty()) {
      ref = std::move(d);
    } else if (!detail::same_result(d, ref, c)) {
      ++rec.wrong;
      continue;
    }
    if (i == 0) rec.top1_us = us;
    if (best < 0 || us < best_us) best = i, best_us = us;
  }
  if (best < 0) return;  // nothing ran: keep the top-1 already in `p`, record nothing
  rec.chosen = best;
  rec.chosen_us = best_us;
  detail::describe_algo(results[best].algo, &rec);
  rec.workspace = results[best].workspaceSize;
  rec.top1_workspace = results[0].workspaceSize;
  p->algo = results[best].algo;
  p->workspace = results[best].workspaceSize;
  p->tuned = true;
  store_tuned(key, Tuned{p->algo, p->workspace}, rec, rec.timed, failed);
}

bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &st) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;  // unknown: treat as capturing (no synchronizing calls)
  }
  return st != cudaStreamCaptureStatusNone;
}

GemmKey key_of(const LtCall& c, int device) {
  GemmKey key;
  key.v = {static_cast<int64_t>(c.dtype),
           c.tf32,
           c.a.op,
           c.b.op,
           c.m,
           c.n,
           c.k,
           c.a.ld,
           c.b.ld,
           c.ldd,
           c.batch,
           c.stride_a,
           c.stride_b,
           c.stride_d,
           c.bias != nullptr,
           c.bias ? c.stride_bias : 0,
           operand_alignment(c.a.ptr, c.a.ld, c.stride_a, c.batch, c.dtype),
           operand_alignment(c.b.ptr, c.b.ld, c.stride_b, c.batch, c.dtype),
           operand_alignment(c.d, c.ldd, c.stride_d, c.batch, d_dtype(c)),
           c.bias ? operand_alignment(c.bias, 0, c.stride_bias, c.batch, c.dtype) : 0,
           c.c ? operand_alignment(c.c, c.ldd, c.stride_d, c.batch, d_dtype(c)) : -1,
           device,
           static_cast<int64_t>(c.act),
           c.d_f32};
  return key;
}

// The matmul descriptor and layouts of `c` (no algorithm yet).
std::unique_ptr<GemmPlan> make_plan(const LtCall& c) {
  auto p = std::make_unique<GemmPlan>();
  const cudaDataType_t t = cuda_type(c.dtype);
  const cublasComputeType_t compute =
      c.dtype == DType::f32 && c.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  LF_CUBLAS_CALL(cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F));
  LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &c.a.op,
                                                sizeof(c.a.op)));
  LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &c.b.op,
                                                sizeof(c.b.op)));
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  switch (c.act) {
    case LtAct::none:
      epi = c.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
      break;
    case LtAct::relu:
      epi = c.bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
      break;
    case LtAct::gelu_tanh:
      epi = c.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
      break;
  }
  if (epi != CUBLASLT_EPILOGUE_DEFAULT)
    LF_CUBLAS_CALL(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (c.bias) {
    LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t,
                                                  sizeof(t)));
    LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                  &c.bias, sizeof(c.bias)));
    if (c.batch > 1 && c.stride_bias != 0)
      LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                                                    &c.stride_bias, sizeof(c.stride_bias)));
  }
  const auto make_layout = [&](cublasLtMatrixLayout_t* l, int64_t rows, int64_t cols, int64_t ld,
                               int64_t stride, cudaDataType_t type) {
    LF_CUBLAS_CALL(cublasLtMatrixLayoutCreate(l, type, static_cast<uint64_t>(rows),
                                              static_cast<uint64_t>(cols), ld));
    if (c.batch > 1) {
      const int32_t count = static_cast<int32_t>(c.batch);
      LF_CUBLAS_CALL(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                      &count, sizeof(count)));
      LF_CUBLAS_CALL(cublasLtMatrixLayoutSetAttribute(
          *l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    }
  };
  make_layout(&p->a, c.a.rows, c.a.cols, c.a.ld, c.stride_a, t);
  make_layout(&p->b, c.b.rows, c.b.cols, c.b.ld, c.stride_b, t);
  make_layout(&p->d, c.m, c.n, c.ldd, c.stride_d, cuda_type(d_dtype(c)));
  return p;
}

// The heuristic's best `want` algorithms for `p` (best first); returns how many it gave.
// `tuning`: candidates for timing. For f16/bf16 outputs they exclude split-K schemes that add
// the K parts up in the output type (in place in D, or in a workspace of the output type): each
// part rounded to 8 or 11 bits before the sum, less exact than the top-1 (what eager runs).
// (Not what fuzz seed 100059 met: that algorithm split nothing; tune()'s result check caught it.)
int heuristic(const LtCall& c, const GemmPlan* p, cublasLtHandle_t handle, int want,
              cublasLtMatmulHeuristicResult_t* results, bool tuning = false) {
  cublasLtMatmulPreference_t pref = nullptr;
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceCreate(&pref));
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } guard{pref};
  const uint64_t ws = kGemmWorkspaceBytes;
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al_a =
      static_cast<uint32_t>(operand_alignment(c.a.ptr, c.a.ld, c.stride_a, c.batch, c.dtype));
  const uint32_t al_b =
      static_cast<uint32_t>(operand_alignment(c.b.ptr, c.b.ld, c.stride_b, c.batch, c.dtype));
  const uint32_t al_d =
      static_cast<uint32_t>(operand_alignment(c.d, c.ldd, c.stride_d, c.batch, d_dtype(c)));
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  const uint32_t al_c =
      c.c ? std::min(al_d, static_cast<uint32_t>(
                               operand_alignment(c.c, c.ldd, c.stride_d, c.batch, d_dtype(c))))
          : al_d;
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  LF_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)));
  if (tuning && c.dtype != DType::f32) {
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    LF_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes)));
  }
  int found = 0;
  LF_CUBLAS_CALL(cublasLtMatmulAlgoGetHeuristic(handle, p->desc, p->a, p->b, p->d, p->d, pref,
                                                want, results, &found));
  LF_CHECK(found > 0, "matmul", "cuBLASLt has no algorithm for ", dtype_name(c.dtype), " m=", c.m,
           " n=", c.n, " k=", c.k, " batch=", c.batch, " (column-major terms; lda=", c.a.ld,
           " ldb=", c.b.ld, ")");
  return found;
}

// ---- few-row families (gemm_lt_family.hpp) --------------------------------------------------
// Per thread, as the plans are: family representative's key -> the heuristic's top-1 for it.
using FamilyMap = std::unordered_map<GemmKey, cublasLtMatmulAlgo_t, GemmKeyHash>;
FamilyMap& thread_families() {
  thread_local auto& families = *new FamilyMap();  // leaked as thread_plans() is
  return families;
}

// Takes the algorithm of `c`'s family into `p` when `c` has one and it runs `c`'s shape within
// the workspace; false otherwise (the caller asks the heuristic about `c` itself).
bool take_family_algo(const LtCall& c, int device, cublasLtHandle_t handle, GemmPlan* p) {
  if (!in_few_row_family(c)) return false;
  const LtCall r = family_representative(c);
  const GemmKey fk = key_of(r, device);
  FamilyMap& families = thread_families();
  auto it = families.find(fk);
  if (it == families.end()) {
    if (families.size() >= kMaxPlans) families.clear();
    const std::unique_ptr<GemmPlan> rp = make_plan(r);
    cublasLtMatmulHeuristicResult_t top{};
    try { heuristic(r, rp.get(), handle, 1, &top); } catch (const Error&) { return false; }  // none
    it = families.emplace(fk, top.algo).first;
    const std::lock_guard<std::mutex> lock(tune_state().mu);
    ++tune_state().ctr.family_representatives;
  }
  cublasLtMatmulHeuristicResult_t check{};
  const cublasStatus_t st = cublasLtMatmulAlgoCheck(handle, p->desc, p->a, p->b, p->d, p->d, &it->second, &check);
  if (st != CUBLAS_STATUS_SUCCESS || check.workspaceSize > kGemmWorkspaceBytes) return false;
  p->algo = it->second;
  p->workspace = check.workspaceSize;
  const std::lock_guard<std::mutex> lock(tune_state().mu);
  ++tune_state().ctr.family_algos;
  return true;
}

// Tuning mode's part of plan_for: the table's choice if another plan already tuned the key,
// else the candidates timed here. `p` ends with the heuristic's top-1 at worst.
void tune_plan(const GemmKey& key, const LtCall& c, GemmPlan* p, cublasLtHandle_t handle,
               void* ws, cudaStream_t s) {
  refresh_from_table(key, p);
  if (p->tuned) return;
  cublasLtMatmulHeuristicResult_t results[kGemmTuneCandidates]{};
  const int want = std::clamp(g_tune_candidates.load(std::memory_order_relaxed), 1, kGemmTuneCandidates);
  const int found = heuristic(c, p, handle, want, results, /*tuning=*/true);
  p->algo = results[0].algo;
  p->workspace = results[0].workspaceSize;
  if (capturing(s)) {
    // Never expected (the planner tunes on its own stream, outside any capture): timing would
    // synchronize a capturing stream, so the call keeps the top-1 and a counter says so.
    std::lock_guard<std::mutex> lock(tune_state().mu);
    ++tune_state().ctr.skipped_capturing;
    return;
  }
  if (c.bias)
    LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                  &c.bias, sizeof(c.bias)));
  tune(key, c, p, results, found, handle, ws, s);
}

GemmPlan* plan_for(const LtCall& c, int device, cublasLtHandle_t handle, void* ws,
                   cudaStream_t s) {
  PlanMap& plans = thread_plans();
  const GemmKey key = key_of(c, device);
  auto it = plans.find(key);
  if (it != plans.end()) {
    GemmPlan* p = it->second.get();
    if (!p->tuned) {
      // Made before the key was tuned (an eager GEMM of the same shape), or never tuned: look
      // at the table once per change of it; time it here only in tuning mode.
      if (p->tuned_gen != g_tuned_gen.load(std::memory_order_relaxed) && config().gemm_tune)
        refresh_from_table(key, p);
      if (!p->tuned && t_tuning && !p->tune_tried) tune_plan(key, c, p, handle, ws, s);
    }
    return p;
  }
  if (plans.size() >= kMaxPlans) plans.clear();

  const trace::Scope span("gemm", "new_shape");  // descriptors and the heuristic, once a shape
  std::unique_ptr<GemmPlan> p = make_plan(c);
  if (t_tuning) {
    tune_plan(key, c, p.get(), handle, ws, s);
  } else {
    if (config().gemm_tune) refresh_from_table(key, p.get());
    else p->tuned_gen = g_tuned_gen.load(std::memory_order_relaxed);
    if (!p->tuned && !take_family_algo(c, device, handle, p.get())) {
      cublasLtMatmulHeuristicResult_t result{};
      heuristic(c, p.get(), handle, 1, &result);
      p->algo = result.algo;
      p->workspace = result.workspaceSize;
    }
  }
  GemmPlan* raw = p.get();
  plans.emplace(key, std::move(p));
  return raw;
}

}  // namespace

void lt_matmul(const LtCall& c, cudaStream_t s) {
  const int device = current_device();
  cublasLtHandle_t handle = handle_for(device);
  void* ws = workspace_for(device, s);
  GemmPlan* p = plan_for(c, device, handle, ws, s);
  if (c.bias)
    LF_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                  &c.bias, sizeof(c.bias)));
  LF_ASSERT(!c.c || c.act == LtAct::none, "a GEMM's C input with an activation epilogue");
  LF_CUBLAS_CALL(run_algo(c, p, p->algo, p->workspace, handle, ws, s));
}

GemmTuneRecord lt_top1_algo(const LtCall& c) {
  const std::unique_ptr<GemmPlan> p = make_plan(c);
  cublasLtMatmulHeuristicResult_t r{};
  heuristic(c, p.get(), handle_for(current_device()), 1, &r);
  GemmTuneRecord rec;
  detail::describe_algo(r.algo, &rec);
  return rec;
}

GemmTuning::GemmTuning() : prev_(t_tuning) { t_tuning = true; }
GemmTuning::~GemmTuning() { t_tuning = prev_; }

std::vector<GemmTuneRecord> gemm_tune_records() {
  TuneState& st = tune_state();
  std::lock_guard<std::mutex> lock(st.mu);
  return {st.records.begin(), st.records.end()};
}

GemmTuneCounters gemm_tune_counters() {
  TuneState& st = tune_state();
  std::lock_guard<std::mutex> lock(st.mu);
  GemmTuneCounters c = st.ctr;
  c.entries = st.table.size();
  return c;
}

void reset_gemm_tuning() {
  thread_plans().clear();
  thread_families().clear();
  TuneState& st = tune_state();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.table.clear();
    st.records.clear();
    st.ctr = {};
  }
  g_tuned_gen.fetch_add(1, std::memory_order_acq_rel);
}

void set_gemm_tune_candidates_for_testing(int n) {
  g_tune_candidates.store(n, std::memory_order_relaxed);
}

}  // namespace livefuse::cuda
