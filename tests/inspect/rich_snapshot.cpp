#include "rich_snapshot.hpp"

namespace lftest {

using namespace livefuse;

namespace {

PlanOpInfo op(const char* name, std::vector<std::string> in, std::vector<std::string> dt,
              std::vector<int> ranks, const char* attrs) {
  return {name, std::move(in), std::move(dt), std::move(ranks), attrs};
}

// layer_norm -> linear -> gelu: the shape of a transformer FFN entry.
PlanInfo active_plan() {
  PlanInfo p;
  p.id = 1;
  p.name = "layer_norm+linear+gelu";
  p.state = "active";
  p.device = "cuda";
  p.origin = "plan_table";
  p.signature = "0x9f1c2a7700b3e415";
  p.description = "2 kernels (1 fused row kernel, 1 GEMM with epilogue), CUDA graph per shape";
  p.n_external = 5;
  p.ops = {
      op("layer_norm", {"$0", "$1", "$2"}, {"f16", "f16", "f16"}, {3, 1, 1}, "0x00000000a1b2c3d4"),
      op("linear", {"%0.0", "$3", "$4"}, {"f16", "f16", "f16"}, {3, 2, 1}, "0x0000000011223344"),
      op("gelu", {"%1.0"}, {"f16"}, {3}, "0x0000000000000000")};
  p.hits = 1840;
  p.eager_fallbacks = 2;
  p.sampled_fused_us = {88.5, 61.25, 60.5, 62.0, 61.0};
  p.sampled_eager_us = {140.0, 131.5, 130.25, 133.0, 129.75};
  p.fused_us = 61.25;
  p.eager_us = 131.5;
  p.speedup = 131.5 / 61.25;
  p.last_reason = "sampled: plan 61.2 us vs eager 131.5 us (median of 5)";
  p.history = {{1204.5, "sampling", "published: 2 kernels compiled in 41.3 ms", false},
               {1290.25, "active", "sampled: plan 61.2 us vs eager 131.5 us (median of 5)", false}};
  PlanDetails& d = p.details;
  d.shape_pattern = "[B,S,768] [768] [768] [3072,768] [3072]";
  d.compile_ms = 41.3;
  d.groups = {{"g0", "row", {0}, "lf_row_ln_f16_768", std::nullopt},
              {"g1", "gemm_epilogue", {1, 2}, "lf_gemm_gelu_f16", std::nullopt}};
  d.kernels = {{"lf_row_ln_f16_768",
                "#include \"lf_fused.cuh\"\n"
                "extern \"C\" __global__ void lf_row_ln_f16_768(const __half* x, const __half* w,\n"
                "    const __half* b, __half* y, int rows) {\n"
                "  // one warp per row of 768\n"
                "  lf::row_layer_norm<768>(x, w, b, y, rows, 1e-5f);\n"
                "}\n",
                36.9, "miss", "",
                {"rows < 2^9, 32x8 threads: pipelined, timed 3.9 us against plain 4.6 us",
                 "rows < 2^8, 32x8 threads: plain (the starting guess; both bodies not timed yet)"}},
               {"lf_gemm_gelu_f16", "// cuBLASLt matmul with GELU epilogue (no generated source)",
                4.4, "disk", "", {}}};
  d.graphs = {{"[2,128,768] [768] [768] [3072,768] [3072]", 1790, 3},
              {"[1,128,768] [768] [768] [3072,768] [3072]", 50, 3}};
  d.decisions = {
      {"fuse #0 (layer_norm) into one row kernel",
       "saves 2 launches and a round trip of [B,S,768]"},
      {"fuse #2 (gelu) into the epilogue of #1 (linear)", "the GEMM writes its output once"}};
  d.notes = {{"graph_binding", "kernel-node parameter update"}};
  return p;
}

PlanInfo small_plan(uint64_t id, const char* state, const char* reason) {
  PlanInfo p;
  p.id = id;
  p.name = "mul+tanh+add";
  p.state = state;
  p.device = "cpu";
  p.origin = "plan_table";
  p.signature = "0x00000000000abcde";
  p.description = "1 kernel (CPU tiled interpreter)";
  p.n_external = 2;
  p.ops = {op("mul", {"$0", "$1"}, {"f32", "f32"}, {2, 1}, "0x0000000000000000"),
           op("tanh", {"%0.0"}, {"f32"}, {2}, "0x0000000000000000"),
           op("add", {"%1.0", "$0"}, {"f32", "f32"}, {2, 2}, "0x0000000000000000")};
  p.last_reason = reason;
  p.details.shape_pattern = "[N,64] [64]";
  p.details.groups = {{"g0", "vertical", {0, 1, 2}, "cpu_fused_0", std::nullopt}};
  p.details.kernels = {{"cpu_fused_0", "t0 = mul(in0, in1)\nt1 = tanh(t0)\nout0 = add(t1, in0)\n",
                        0.25, "memory", "", {}}};
  return p;
}

}  // namespace

Snapshot rich_snapshot() {
  Snapshot s;
  s.livefuse_version = "0.1.0";
  s.program = "livefuse-demo";
  s.pid = 4242;
  s.time_unix_ms = 1767225600000;
  s.uptime_ms = 5321.5;
  s.final = false;
  s.mode = "on";
  s.config = {{"LIVEFUSE", "on", "default"},
              {"LIVEFUSE_HOT", "3", "default"},
              {"LIVEFUSE_MAX_SEGMENT", "64", "default"},
              {"LIVEFUSE_GRAPHS", "1", "default"},
              {"LIVEFUSE_FUSION", "1", "default"},
              {"LIVEFUSE_COMPILE_THREADS", "4", "env"},
              {"LIVEFUSE_CACHE_DIR", "/home/user/.cache/livefuse", "default"},
              {"LIVEFUSE_VERIFY", "0", "default"},
              {"LIVEFUSE_REPORT", "/tmp/demo.json", "env"},
              {"LIVEFUSE_REPORT_MS", "1000", "env (invalid, default used)"},
              {"LIVEFUSE_TRACE", "", "default"},
              {"LIVEFUSE_LOG", "warn", "default"},
              {"LIVEFUSE_FMA", "1", "default"},
              {"LIVEFUSE_DEVICE", "", "default"}};
  s.counters = {
      {"matcher",
       {{"calls", 96000},
        {"deferred", 7420},
        {"served", 7360},
        {"completions", 1850},
        {"flush_divergent", 12},
        {"flush_sync", 3},
        {"flush_escaped", 0},
        {"flush_error", 1},
        {"plan_declined", 2},
        {"shadow_would_serve", 0}}},
      {"memory.cpu",
       {{"bytes_in_use", 3 << 20},
        {"bytes_cached", 12 << 20},
        {"peak_bytes_in_use", 20 << 20},
        {"allocations", 50211}}},
      {"plans",
       {{"total", 7},
        {"candidate", 1},
        {"compiling", 1},
        {"sampling", 1},
        {"active", 1},
        {"rejected", 1},
        {"retired", 1},
        {"failed", 1},
        {"replays", 1843}}},
      {"inspect",
       {{"decisions", 14},
        {"decisions_dropped", 3},
        {"trace_events", 0},
        {"trace_dropped", 0},
        {"provider_errors", 0}}},
      {"monitor", {{"events", 96000}, {"drops", 0}, {"evictions", 4}, {"candidates", 6}}},
      {"kernel_cache",
       {{"hits", 3},
        {"misses", 4},
        {"evictions", 0},
        {"disk_hits", 1},
        {"compile_us_total", 88120}}},
  };
  s.plans.push_back(active_plan());
  PlanInfo sampling = small_plan(2, "sampling", "published: 1 kernel compiled in 0.3 ms");
  sampling.hits = 2;
  sampling.description =
      "plan: 3 ops, 3 eager launches -> 1 (1 fused kernel)\n  step 0: pointwise #0..#2";
  sampling.sampled_fused_us = {14.5, 9.0};
  sampling.sampled_eager_us = {20.0};
  sampling.fused_us = 11.75;
  sampling.eager_us = 20.0;
  sampling.speedup = 20.0 / 11.75;
  sampling.history = {{5100.0, "sampling", "published: 1 kernel compiled in 0.3 ms", false}};
  s.plans.push_back(sampling);
  PlanInfo rejected =
      small_plan(3, "rejected", "sampled: plan 25.0 us vs eager 21.0 us (median of 5)");
  rejected.sampled_fused_us = {25.0, 24.0, 26.0, 25.0, 25.5};
  rejected.sampled_eager_us = {21.0, 20.5, 22.0, 21.0, 21.5};
  rejected.fused_us = 25.0;
  rejected.eager_us = 21.0;
  rejected.speedup = 21.0 / 25.0;
  rejected.history = {
      {2000.0, "sampling", "published", true},
      {2100.0, "rejected", "sampled: plan 25.0 us vs eager 21.0 us (median of 5)", true}};
  s.plans.push_back(rejected);
  PlanInfo failed = small_plan(4, "failed", "NVRTC: 1 error compiling lf_vert_f32_3");
  failed.device = "cuda";
  failed.description = "1 fused kernel (NVRTC)";
  failed.details.groups = {{"g0", "vertical", {0, 1, 2}, "lf_vert_f32_3", std::nullopt}};
  failed.details.kernels = {
      {"lf_vert_f32_3", "extern \"C\" __global__ void lf_vert_f32_3(float* y) { y[0] = tanhf(; }\n",
       std::nullopt, "miss",
       "lf_vert_f32_3.cu(1): error: expected an expression\n1 error detected in the compilation.", {}}};
  failed.history = {{1500.0, "compiling", "segment hot (3 repeats)", false},
                    {1530.0, "failed", "NVRTC: 1 error compiling lf_vert_f32_3", false}};
  s.plans.push_back(failed);
  PlanInfo retired = small_plan(5, "retired", "evicted: unused for 10000 calls");
  retired.hits = 1;
  retired.history = {{900.0, "sampling", "published", false},
                     {950.0, "active", "sampled", false},
                     {4000.0, "retired", "evicted: unused for 10000 calls", false}};
  retired.history_dropped = 2;
  s.plans.push_back(retired);
  PlanInfo candidate = small_plan(7, "candidate", "hot: 3 repeats of 3 ops");
  candidate.origin = "planner";
  candidate.description.clear();
  candidate.details = {};
  candidate.details.shape_pattern = "[N,64] [64]";
  s.plans.push_back(candidate);
  PlanInfo compiling = small_plan(8, "compiling", "1 kernel queued");
  compiling.origin = "planner";
  compiling.description = "1 kernel queued";
  compiling.details.groups = {{"g0", "vertical", {0, 1, 2}, "cpu_fused_1", std::nullopt}};
  compiling.details.kernels.clear();
  s.plans.push_back(compiling);
  s.decisions = {
      {900.0, "planner", "plan 5", "published", "1 kernel"},
      {1204.5, "planner", "plan 1", "published", "2 kernels compiled in 41.3 ms"},
      {1290.25, "plan", "plan 1 (layer_norm+linear+gelu)", "active",
       "sampled: plan 61.2 us vs eager 131.5 us (median of 5)"},
      {1500.0, "monitor", "segment 0x1f2e", "hot", "3 repeats of 3 ops"},
      {1530.0, "jit", "plan 4", "failed", "NVRTC: 1 error compiling lf_vert_f32_3"},
      {4000.0, "planner", "plan 5", "retired", "evicted: unused for 10000 calls"},
  };
  s.decisions_dropped = 3;
  return s;
}

}  // namespace lftest
