#pragma once
// The one place where LIVEFUSE_* variables are read (once, at first use). A bad value gives one
// warning naming the variable and the accepted values; the default is used.
#include <cstdint>
#include <string>
#include <vector>

namespace livefuse {

enum class Mode : uint8_t { off, trace, shadow, on };
enum class LogLevel : uint8_t { error, warn, info, debug };

struct Config {
  Mode mode = Mode::on;
  int hot = 3;           // repeats before a sequence is hot (see config.cpp for why)
  int max_segment = 64;  // longest sequence considered
  bool graphs = true;    // LIVEFUSE_GRAPHS
  bool fusion = true;    // LIVEFUSE_FUSION
  int compile_threads = 2;
  // LIVEFUSE_CPU_THREADS: most threads the CPU kernels run on (0: one per core). Read once, at
  // start. 1 keeps TBB's uninstrumented work hand-off out of ThreadSanitizer runs.
  int cpu_threads = 0;
  std::string cache_dir;  // empty: memory-only ("off")
  int verify = 0;         // first N replays of each plan also run eagerly and compared
  int sample = 5;         // LIVEFUSE_SAMPLE: timed plan/eager pairs before a plan is kept (0: keep)
  std::string report_path;
  int report_ms = 1000;
  std::string trace_path;
  LogLevel log = LogLevel::warn;
  bool fma = true;
  // LIVEFUSE_FAST_COMPILE: NVRTC's front end at -Ofc=min, ptxas at full optimisation
  // (nvrtc_compiler.hpp says what was measured).
  bool fast_compile = true;
  // LIVEFUSE_JIT: "lto" (default) links the pointwise kernels it covers from a precompiled op
  // library (kernels/jit/lto_render.hpp) instead of compiling them from C++ with NVRTC
  // ("nvrtc"). Measured on the H200 (bench/RESULTS.md, session 7): 5.6-9 ms a pointwise kernel
  // against NVRTC's 38-66 ms, the same kernel speed and bit-identical results.
  bool jit_lto = true;
  bool cuda_cache = true;  // LIVEFUSE_CUDA_CACHE: reuse freed CUDA blocks per stream
  int cache_max_mb = 1024;  // LIVEFUSE_CACHE_MAX_MB: freed memory kept per device (memory.cpp)
  // LIVEFUSE_PROFILE: CUDA plans run their steps one by one between events (no graph) and
  // record each fusion group's GPU time (inspect(), report: groups[].gpu_us). Diagnostic: it
  // synchronizes after every replay. CPU plans time each step on the host clock.
  bool profile = false;
  // Switches for measuring one fusion against its absence (each defaults on):
  // LIVEFUSE_ATTENTION: the fused attention step (pass_attention). -1 (auto, the default): on
  // the CPU, and on CUDA where a fast kernel takes the shapes (attention_fast_on_cuda in
  // kernels/attention_args.hpp: tensor cores for f16/bf16 with head dims 64/128, the f32 FMA
  // kernel for f32 at those head dims, the split-KV decode kernel for few rows) -- the general
  // FMA kernel took BERT-base f16 from 0.61 to 1.33 ms a forward; 1: everywhere; 0: nowhere.
  int attention = -1;
  bool gemm_siblings = true;  // LIVEFUSE_GEMM_SIBLINGS: linears over one input as one GEMM
  bool rotary = true;  // LIVEFUSE_ROTARY: x * cos + rotate_half(x) * sin as one step (pass_rotary)
  // LIVEFUSE_SEAM: the monitor cuts a layer after the norm that follows its residual add, so
  // the two are one row kernel (monitor/stream_window.hpp, note 3); 0: before the norm.
  bool seam = true;
  // LIVEFUSE_SETTLE: the monitor hands a hot sequence to the planner once its shape mix has
  // settled (monitor/structure_table.cpp, the Note); 0: as soon as it is hot or gains a shape.
  bool settle = true;
  bool pack_cache = true;     // LIVEFUSE_PACK_CACHE: the CPU GEMM keeps weights packed
  // LIVEFUSE_FAMILY_GRAPH: a CUDA plan with a shape family (a decode step) replays one graph a
  // run, its varying steps' kernel nodes patched (graphs/patchable_graph.hpp); 0: its fixed
  // stretches replay as graphs and the varying steps launch directly between them.
  bool family_graph = true;
  // LIVEFUSE_FAMILY_RECORD: that graph's varying kernel nodes take parameters the varying steps'
  // launches recorded (kernels/cuda/launch_record.hpp); 0: from a stream capture of those steps at
  // every run, for comparison.
  bool family_record = true;
  // LIVEFUSE_WRITE_BATCH: in-place writes (copy_into, index_copy) the program cannot observe
  // before its next call are held and enqueued together, one launch for a static KV cache's K
  // and V (runtime/write_batch.hpp); 0: each write launches at its call.
  bool write_batch = true;
  // LIVEFUSE_APPEND: a concat that grows a cache gets room to grow into, and a served step's
  // concat takes the block of the cache the program let go, copying only the new rows
  // (runtime/append.hpp); 0: every concat copies everything into dense storage, for comparison.
  bool append = true;
  // LIVEFUSE_INFER_MEMO: a call a window may take is shaped from the window's memory of the same
  // call at the same position (runtime/infer_memo.hpp); 0: every call through infer_outputs, for
  // comparison.
  bool infer_memo = true;
  // LIVEFUSE_GEMV: CUDA products of at most 8 rows over a linear's weight (a decode step's
  // linears) run as livefuse's GEMV kernel (kernels/cuda/gemv.hpp); 0: cuBLASLt, for comparison.
  bool gemv = true;
  // LIVEFUSE_GEMM_TC=1: CUDA plans run f16/bf16 linears that cuBLASLt needs more than one launch
  // for on livefuse's tensor-core GEMM (kernels/cuda/gemm_tc.hpp): merged Q/K/V written as
  // three dense outputs at once, a bias + erf-GELU or SiLU in its epilogue. Off by default: its
  // mma.sync kernel took twice cuBLASLt's time for BERT's linears on an H100 (Q/K/V at 128 rows
  // 8.1 against 4.0 us; FFN1 + gelu 9.5 against 6.6 for cuBLASLt's GEMM and the gelu kernel),
  // and BERT-base f16 batch 1 0.540 against 0.474 ms a forward (bench/RESULTS.md, session 43);
  // launched with PDL and its weights on their way before the wait, 0.510 against 0.455
  // (session 53).
  bool gemm_tc = false;
  // LIVEFUSE_GEMM_F32X3=1: CUDA plans run f32 linears on livefuse's tensor-core GEMM near f32's
  // accuracy, each product as three TF32 products (kernels/cuda/gemm_tc_f32.cuh) where eager
  // (cuBLASLt) runs SIMT f32; merged Q/K/V then write their dense outputs in one launch (no
  // split kernel) and an erf-GELU / SiLU rides in the epilogue. Off by default: its mma.sync
  // kernel took 1.1-1.3x cuBLASLt's SIMT time on BERT's f32 linears at 128 rows (H100: Q/K/V
  // 24.5 against 19.1 us, FFN2 27.3 against 23.4; 2% faster only at 1024 rows), with 2-6x its
  // error, and f32 BERT-base b1 1.367 against 1.221 ms a forward (bench/RESULTS.md, session 52).
  bool gemm_f32x3 = false;
  // LIVEFUSE_GEMV_NORM: which decode-step norms whose only reader is a few-row linear run inside
  // that linear's GEMV (its prologue: planner.cpp, fold_norm_prologues). 1 (default): a lone
  // layer_norm / rms_norm (GPT-2's); 2: also Llama's cast -> rms_norm -> cast -> mul chain, the
  // residual add before it moved onto the previous GEMV's epilogue (measured slower on the H200,
  // bench/RESULTS.md, session 25); 0: none, each norm a row kernel of its own.
  int gemv_norm = 1;
  // LIVEFUSE_GEMV_PAIR: one-row GEMVs without a gate take two adjacent weight rows a warp (twice
  // the loads in flight a lane) -- 1 (default): a product without a norm where each lane reads at
  // least 8 16-byte chunks of a row (Llama's down projection, 2048 x 8192, took 11.4 us against
  // 12.9 in a graph of 16 on the H200, where smaller products lost 4-5%: bench/RESULTS.md, session
  // 35), and a product with a norm inside whose columns one row a warp would spread over more
  // than one wave of blocks (GPT-2's FFN1: kernels/cuda/gemv.cu, launch_rows); 2: every such
  // product (tests, livefuse-bench-gemv-chain); 0: one row a warp, for comparison.
  int gemv_pair = 1;
  // LIVEFUSE_GEMV_ROTARY: a one-row Q/K/V GEMV applies the rotary of q and k as it writes them
  // (kernels/cuda/gemv.hpp, GemvRope; planner/rotary_epilogue.cpp): a Llama decode layer's
  // rotary is then no launch of its own. 0: the rotary step after the GEMV, for comparison.
  bool gemv_rotary = true;
  // LIVEFUSE_GEMM_TUNE=1: CUDA plans time cuBLASLt's top candidate algorithms for each of their
  // GEMMs on the planner thread and run the fastest (kernels/cuda/gemm_lt.cpp). Off by default:
  // on the H200 it gained 1.6% on BERT-base f16 (0.561 against 0.570 ms). A candidate whose
  // result is not the top-1's up to rounding is never chosen (gemm_lt.hpp).
  bool gemm_tune = false;
  // LIVEFUSE_ATTENTION_SPLIT: the CUDA tensor-core attention splits the keys over two warp
  // groups when it has fewer blocks than SMs (kernels/cuda/attention_kernels.hpp); 0: never,
  // for comparison.
  bool attention_split = true;
  // LIVEFUSE_DECODE_LEAN: the CUDA decode attention's blocks of one or two query rows run the
  // build that fits two blocks an SM (kernels/cuda/attention_decode.cu); 0: the wide build, one
  // block an SM, and four-row blocks for a GQA group over a long cache, for comparison.
  bool decode_lean = true;
  // LIVEFUSE_ATTENTION_APPEND: a KV cache's concat that only the fused attention reads is done by
  // the attention step itself (pass_attention; on CUDA the decode kernel writes the new rows as it
  // reads them: one launch a layer fewer); 0: the concat stays its own step, for comparison.
  bool attention_append = true;
  // LIVEFUSE_DECODE_TC=1: f16/bf16 decode attention at head dims 64 and 128 (at most 16 rows a
  // K/V head) runs on tensor cores, the keys split over blocks (kernels/cuda/attention_mma_decode.cu),
  // instead of the split-KV FMA kernel (attention_decode.cu). Off by default until it is measured
  // faster on the GPU (bench/RESULTS.md, session 36).
  bool decode_tc = false;
  // LIVEFUSE_DECODE_STREAM_KEYS: from how many keys read (cached keys x batch x K/V heads) an
  // f16/bf16 decode attention (head dims 64 / 128, at most 8 rows a K/V head) runs on the
  // streaming kernel (kernels/cuda/attention_decode_stream.cu: every key of a block's split in
  // flight at once, one key a lane) instead of the split-KV FMA kernel; 0: never, 1: always.
  // Below the default the FMA kernel's shorter fixed cost wins (README, "Decode attention that
  // streams the cache").
  int decode_stream_keys = 16384;
  // LIVEFUSE_SPLIT_K_ROWS: a CUDA linear that cuBLASLt would split over K, read only by a row
  // kernel (a layer's FFN2 before add + layer_norm), writes its f32 partial products and the row
  // kernel adds them up (planner/split_k_rows.hpp); 0: cuBLASLt's split-K reduction, for comparison.
  bool split_k_rows = true;
  // LIVEFUSE_ROW_EARLY_LOADS: generated row kernels that hold their row in registers issue the
  // loads of their later loops (a norm's weight and bias, needed after the mean and variance)
  // at the row's start (kernels/jit/render_row.cpp); 0: each where its loop needs it, one more
  // memory round trip after the reductions, for comparison.
  bool row_early_loads = true;
  // LIVEFUSE_PDL: livefuse's decode kernels (GEMV, decode attention, copies, norms) launch with
  // CUDA's programmatic dependent launch on sm_90+ (kernels/cuda/pdl.cuh), and may do work
  // before the kernel before them ends (early_reads). On by default: H100, GPT-2 f16 decode
  // 0.380 -> 0.350 ms a token, Llama-1B 1.29 -> 1.27, BERT unchanged (README, "Programmatic
  // dependent launch"); 0: every kernel waits for the one before to end.
  bool pdl = true;
  // LIVEFUSE_EARLY_READS: under PDL, a plan's kernel that follows another kernel of its run loads
  // what no kernel of the run writes -- a GEMV its first weights, the decode attention its first
  // cached keys and values -- before its wait (planner/early_reads.cpp, "a plan's reads before
  // its PDL wait"); 0: nothing is loaded before the wait, for comparison.
  bool early_reads = true;
  std::string device;      // "", "cpu" or "cuda"

  // Where each value came from: variable name -> "default" | "env" | "env (invalid, default used)".
  std::vector<std::pair<std::string, std::string>> sources;

  bool operator==(const Config&) const = default;
};

// The process configuration: an immutable snapshot. A reference stays valid (and unchanged)
// for the life of the process, also across set_config_for_testing.
const Config& config();
// Parses a configuration from an environment lookup (tests use this with a fake environment).
Config parse_config(const char* (*getenv_fn)(const char*), std::vector<std::string>* warnings);
// Test hook: publishes `c` as the process configuration. Safe against threads reading
// config(): they see the old snapshot or the new one, never a mix. Components that read a value
// once, when they start (the CPU threads, the compile threads, the report), keep what they read.
void set_config_for_testing(const Config& c);

std::string_view mode_name(Mode m);

}  // namespace livefuse
