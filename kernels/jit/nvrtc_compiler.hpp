#pragma once
// NVRTC: CUDA source -> cubin for one SM architecture. Needs no GPU (CI compiles every
// generated kernel). Failures come back as data (ok = false, the log kept), never as throws.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace livefuse::jit {

// Threads NVRTC (-split-compile) or nvJitLink may spread `entries` independent entry points over.
int split_threads(size_t entries);

struct CompileOptions {
  int arch = 90;     // sm_XX: the device's own architecture (cubin, not PTX)
  bool fma = true;   // LIVEFUSE_FMA=0 -> --fmad=false
  // LIVEFUSE_FAST_COMPILE (on by default): NVRTC's front end and NVVM at -Ofc=min, ptxas at
  // full optimisation (-Ofc=0 for ptxas; NVRTC 12.8+, older ones ignore it). Measured on the H200
  // (bench/RESULTS.md, session 6): every fused kernel of the fusion bench ran as fast as at full
  // optimisation (pointwise chains, f16 and f32 gelu chains, layer_norm, softmax, masked softmax,
  // rms_norm: all within run-to-run noise), and NVRTC took ~11% less per pointwise kernel, ~14%
  // less per row kernel (locally). -Ofc=min for ptxas too made row kernels 8-35% slower and
  // -Ofc=mid/max every kernel 3-60x slower: neither is used.
  bool fast_compile = true;
  // LIVEFUSE_JIT=lto: pointwise kernels the IR renderer covers are linked from the op library
  // (lto_render.hpp) instead of compiled from C++. Part of the key.
  bool lto = false;
  // What NVRTC hands back in NvrtcOutput::cubin: the cubin; LTO IR (-dlto -rdc=true, no ptxas:
  // the op library's own compile); or PTX (compute_XX, no ptxas: tests compare it).
  enum class Output : uint8_t { cubin, lto_ir, ptx };
  Output output = Output::cubin;
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
// nvrtc_compile with Output::ptx: the PTX of `source`, empty on failure (tests compare it with
// the linked route's).
std::string nvrtc_ptx(const std::string& source, const CompileOptions& opts);
// Parses ptxas -v output ("Function properties for X", "N bytes spill stores", "Used R registers").
std::vector<EntryStats> parse_ptxas_log(const std::string& log);

}  // namespace livefuse::jit
