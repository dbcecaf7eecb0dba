#pragma once
// One cuBLASLt matmul call in cuBLASLt's own (column-major) terms; gemm_lt.cpp keeps the
// handle, the per-shape plans and the per-stream workspaces behind it.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "livefuse/dtype.hpp"

namespace livefuse::cuda {

// A matrix operand for cuBLASLt: already in its (column-major) terms.
struct LtMat {
  const void* ptr = nullptr;
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t rows = 0, cols = 0, ld = 0;  // of the stored matrix, before op
};

// Row-major [R, C] view with strides (sr, sc) as a column-major cuBLASLt matrix whose op()
// is the transpose of the view, i.e. op(M) = view^T with shape [C, R]. False if the view has
// no unit stride (it must be copied).
bool as_transposed(int64_t R, int64_t C, int64_t sr, int64_t sc, LtMat* m);

// The activation cuBLASLt applies after the (bias and) product, in its epilogue. Its GELU is
// the tanh approximation (gelu_tanh), never erf gelu.
enum class LtAct : uint8_t { none, relu, gelu_tanh };

// D = act(op(A) op(B) (+ bias per row of D)) (+ C), `batch` strided matrices. C, when set, is
// laid out as D (the residual of a layer: one rounding instead of the GEMM's and the add's).
struct LtCall {
  DType dtype = DType::f32;
  bool tf32 = false;
  LtMat a, b;  // cuBLASLt's A (our B) and B (our A)
  void* d = nullptr;
  int64_t m = 0, n = 0, k = 0, ldd = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_d = 0;
  const void* bias = nullptr;
  int64_t stride_bias = 0;  // batch > 1: elements from one matrix's bias to the next's (0: shared)
  const void* c = nullptr;  // added with beta = 1; never with an activation (it would apply after C)
  LtAct act = LtAct::none;
  bool d_f32 = false;  // D in f32 whatever `dtype` is: a split GEMM's partial sums (gemm.hpp)
};
inline DType d_dtype(const LtCall& c) { return c.d_f32 ? DType::f32 : c.dtype; }

// Enqueues the call on `s`. Allocates nothing after the stream's first GEMM.
void lt_matmul(const LtCall& c, cudaStream_t s);

// ---- timed algorithm choice (gemm_lt.cpp, [ Note -- tuned algorithms ]) ----------------------
// While one is alive on a thread, that thread's GEMMs whose shape (GemmKey) has no plan yet time
// cuBLASLt's top kGemmTuneCandidates algorithms on the call's own operands and stream, and the
// fastest is kept for that key in a process-wide table every thread's later plans use. Only
// for scratch operands (each candidate runs several times; D is overwritten, C only read) and
// never on the program's thread: the timing synchronizes. Skipped while `s` is capturing.
// A candidate whose D differs from the reference's (the first that ran: the top-1, which eager
// runs) by more than rounding is never chosen: an algorithm cuBLASLt offers for a layout can
// still be less exact than rounding allows (one for a bf16 [7, 67] x [67, 67] GEMM moved a fuzz
// program's output by 11%).
class GemmTuning {
 public:
  GemmTuning();
  ~GemmTuning();
  GemmTuning(const GemmTuning&) = delete;
  GemmTuning& operator=(const GemmTuning&) = delete;

 private:
  bool prev_;
};

inline constexpr int kGemmTuneCandidates = 8;

// One tuned GEMM, in row-major terms: out[m, n] = a[m, k] b[k, n], `batch` of them.
struct GemmTuneRecord {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  DType dtype = DType::f32;
  LtAct act = LtAct::none;
  bool bias = false, c = false;
  int offered = 0;      // algorithms the heuristic returned
  int timed = 0;        // of them, timed (the others failed or need too much workspace)
  int wrong = 0;        // of the timed, results other than the reference's: never chosen
  int chosen = 0;       // index of the chosen one in the heuristic's order (0: its top-1)
  double top1_us = -1;  // GPU time per run of the top-1 (-1: it could not run)
  double chosen_us = -1;
  // The chosen algorithm's K splits and how it adds them (cublasLtReductionScheme_t; 0: one
  // pass). f16/bf16 never add them in the output type (gemm_lt.cpp, heuristic()).
  uint32_t split_k = 1, reduction = 0;
  size_t workspace = 0, top1_workspace = 0;  // bytes the chosen / the top-1 algorithm asks for
  int algo_id = -1, tile = -1;                // the chosen one's cuBLASLt ids (diagnostics)
};
inline constexpr size_t kGemmTuneRecords = 256;  // most recent kept

struct GemmTuneCounters {
  uint64_t tuned = 0;             // GEMM shapes tuned
  uint64_t candidates_timed = 0;  // algorithms timed, over all of them
  uint64_t candidates_failed = 0; // algorithms that would not run (or need too much workspace)
  uint64_t candidates_wrong = 0;  // algorithms whose result was not the reference's (never chosen)
  uint64_t improved = 0;          // shapes where another algorithm beat the top-1
  uint64_t skipped_capturing = 0; // tuning asked for on a capturing stream: not done
  uint64_t table_hits = 0;        // plans built from the tuned table (any thread)
  uint64_t entries = 0;           // shapes in the table now
  // Few-row batched products (gemm_lt_family.hpp): plans that took their family's algorithm,
  // and the families' representatives the heuristic was asked about.
  uint64_t family_algos = 0, family_representatives = 0;
};

// The algorithm the heuristic gives `c` first (what a call of its shape runs untuned), described:
// its K splits and how it adds them (split_k, reduction, algo_id, tile). Runs nothing: the
// pointers are read for their alignment only.
GemmTuneRecord lt_top1_algo(const LtCall& c);

std::vector<GemmTuneRecord> gemm_tune_records();  // oldest first
GemmTuneCounters gemm_tune_counters();
// Tests and benchmarks: forgets every tuned algorithm and record, and the calling thread's
// plans (its next GEMM of any shape asks the heuristic, or tunes, again).
void reset_gemm_tuning();
// Tests: how many of the heuristic's candidates a tuning times (1..kGemmTuneCandidates; 1 keeps
// the heuristic's top-1, so a difference that stays is not the algorithm's).
void set_gemm_tune_candidates_for_testing(int n);

}  // namespace livefuse::cuda
