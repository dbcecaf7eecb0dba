#pragma once
// NVRTC: CUDA source -> cubin for one SM architecture. Needs no GPU (CI compiles every
// generated kernel). Failures come back as data (ok = false, the log kept), never as throws.
#include <string>
#include <vector>

namespace livefuse::jit {

struct CompileOptions {
  int arch = 90;     // sm_XX: the device's own architecture (cubin, not PTX)
  bool fma = true;   // LIVEFUSE_FMA=0 -> --fmad=false
  // -Ofc=min (NVRTC 12.8+; ignored before): less optimisation for less compile time. The
  // compile service applies it to pointwise kernels only (options_for). Measured on the H200
  // (bench/RESULTS.md, session 6): pointwise kernels compile ~15-25% faster and run the same to
  // 5% slower (f32 gelu chains); row kernels ran 8-35% slower, and -Ofc=mid/max made every
  // generated kernel 3-80x slower, so neither is offered.
  bool fast_compile = false;
  // > 1: NVRTC optimizes and assembles up to this many entry points at once (-split-compile).
  // Same code; the compile service sets it for programs with several heavy entry points (row
  // kernels with both register bodies), where it saves a quarter of the time on two cores.
  // Not part of a cache key.
  int split = 0;

  std::vector<std::string> flags() const;
  std::string str() const;  // flags joined, for cache keys and logs
};

// Per entry point, from the ptxas report (-v) that NVRTC returns in its log.
struct EntryStats {
  std::string name;
  int registers = 0;
  int spill_bytes = 0;  // spill stores + spill loads
};

struct NvrtcOutput {
  bool ok = false;
  std::string cubin;
  std::string log;
  std::string error;  // short reason when !ok
  double compile_ms = 0;
  std::vector<EntryStats> entries;
};

bool nvrtc_available();           // false in a CPU-only build
std::string nvrtc_version();      // "13.0", or "none"
bool nvrtc_supports_arch(int arch);
// Compiles `source` (program name `name` in messages).
NvrtcOutput nvrtc_compile(const std::string& source, const std::string& name, const CompileOptions& opts);
// Parses ptxas -v output ("Function properties for X", "N bytes spill stores", "Used R registers").
std::vector<EntryStats> parse_ptxas_log(const std::string& log);

}  // namespace livefuse::jit
