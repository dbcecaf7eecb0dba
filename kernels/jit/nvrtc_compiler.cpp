#include "kernels/jit/nvrtc_compiler.hpp"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

#if LIVEFUSE_HAS_CUDA
#include <nvrtc.h>
#endif

namespace livefuse::jit {

namespace {
bool nvrtc_at_least(int want_major, int want_minor) {
#if LIVEFUSE_HAS_CUDA
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return false;
  return major > want_major || (major == want_major && minor >= want_minor);
#else
  (void)want_major, (void)want_minor;
  return false;
#endif
}

// NVRTC 12.9+ keeps a compile cache of its own in the CUDA driver's compute cache whenever it
// can load the driver (it tries libcuda.so.1 at every compile; without a driver the cache is
// off). Ours (kernel_cache.hpp) already covers every compile with a complete key, so that second
// cache is only cost on GPU hosts: hashing, lookups and disk writes in every compile, and our
// cubins evicting the driver's own entries. --no-cache turns it off.
bool nvrtc_has_own_cache() {
  static const bool has = nvrtc_at_least(12, 9);
  return has;
}

bool nvrtc_has_fast_compile() {  // -Ofc
  static const bool has = nvrtc_at_least(12, 8);
  return has;
}
}  // namespace

int split_threads(size_t entries) {
  return static_cast<int>(std::min<size_t>(entries, std::max(2u, std::thread::hardware_concurrency())));
}

std::vector<std::string> CompileOptions::flags() const {
  // -minimal: generated kernels use no textures, runtime calls or device launches; skipping
  // those declarations saves a few ms of NVRTC time per kernel.
  const bool ptxas = output == Output::cubin;  // LTO IR and PTX stop before ptxas
  std::vector<std::string> f = {(output == Output::ptx ? "-arch=compute_" : "-arch=sm_") + std::to_string(arch),
                                "--std=c++17", "-default-device", "-minimal"};
  if (output == Output::lto_ir) {
    f.push_back("-dlto");
    f.push_back("-rdc=true");
  }
  if (ptxas) f.push_back("--ptxas-options=-v");
  if (nvrtc_has_own_cache()) f.push_back("--no-cache");
  if (!fma) f.push_back("--fmad=false");
  if (fast_compile && output != Output::lto_ir && nvrtc_has_fast_compile()) {  // a link optimises LTO IR
    f.push_back("-Ofc=min");
    if (ptxas) f.push_back("--ptxas-options=-Ofc=0");  // the register allocator at full strength
  }
  if (split > 1) f.push_back("-split-compile=" + std::to_string(split));
  return f;
}

std::string CompileOptions::str() const {
  CompileOptions keyed = *this;
  keyed.split = 0;  // how NVRTC spreads its work changes nothing it produces
  std::string s;
  for (const auto& f : keyed.flags()) s += (s.empty() ? "" : " ") + f;
  if (lto) s += " +lto";  // linked from the op library, not compiled from C++ (lto_render.hpp)
  return s;
}

std::vector<EntryStats> parse_ptxas_log(const std::string& log) {
  std::vector<EntryStats> out;
  std::istringstream is(log);
  std::string line;
  EntryStats* cur = nullptr;
  auto number_before = [](const std::string& l, const std::string& word) -> int {
    const size_t p = l.find(word);
    if (p == std::string::npos || p == 0) return -1;
    size_t e = p;
    while (e > 0 && l[e - 1] == ' ') --e;
    size_t b = e;
    while (b > 0 && std::isdigit(static_cast<unsigned char>(l[b - 1]))) --b;
    return b < e ? std::stoi(l.substr(b, e - b)) : -1;
  };
  while (std::getline(is, line)) {
    const std::string fp = "Function properties for ";
    if (size_t p = line.find(fp); p != std::string::npos) {
      out.push_back({line.substr(p + fp.size()), 0, 0});
      cur = &out.back();
      continue;
    }
    if (!cur) continue;
    if (int s = number_before(line, "bytes spill stores"); s > 0) cur->spill_bytes += s;
    if (int s = number_before(line, "bytes spill loads"); s > 0) cur->spill_bytes += s;
    if (int r = number_before(line, "registers"); r >= 0 && line.find("Used") != std::string::npos) cur->registers = r;
  }
  for (auto& e : out) {  // names may carry trailing blanks or quotes
    while (!e.name.empty() && (e.name.back() == ' ' || e.name.back() == '\r')) e.name.pop_back();
  }
  return out;
}

#if LIVEFUSE_HAS_CUDA

bool nvrtc_available() { return true; }

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

bool nvrtc_supports_arch(int arch) {
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return false;
  std::vector<int> archs(n);
  if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return false;
  return std::find(archs.begin(), archs.end(), arch) != archs.end();
}

NvrtcOutput nvrtc_compile(const std::string& source, const std::string& name, const CompileOptions& opts) {
  NvrtcOutput out;
  const auto t0 = std::chrono::steady_clock::now();
  if (!nvrtc_supports_arch(opts.arch)) {
    out.error = "NVRTC " + nvrtc_version() + " cannot compile for sm_" + std::to_string(opts.arch);
    return out;
  }
  nvrtcProgram prog = nullptr;
  nvrtcResult r = nvrtcCreateProgram(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) {
    out.error = std::string("nvrtcCreateProgram: ") + nvrtcGetErrorString(r);
    return out;
  }
  const std::vector<std::string> flags = opts.flags();
  std::vector<const char*> cflags;
  for (const auto& f : flags) cflags.push_back(f.c_str());
  r = nvrtcCompileProgram(prog, static_cast<int>(cflags.size()), cflags.data());
  // What NVRTC hands back (the log, a cubin, LTO IR, PTX): its size, then its bytes; empty when
  // either call fails or there is nothing.
  auto fetch = [&](auto size, auto get) {
    size_t n = 0;
    std::string s;
    if (size(prog, &n) == NVRTC_SUCCESS && n > 0) {
      s.resize(n);
      if (get(prog, s.data()) != NVRTC_SUCCESS) s.clear();
    }
    return s;
  };
  auto strip_nul = [](std::string& s) {
    while (!s.empty() && s.back() == '\0') s.pop_back();
  };
  out.log = fetch(nvrtcGetProgramLogSize, nvrtcGetProgramLog);
  strip_nul(out.log);
  // fast_compile hands ptxas -Ofc=min (from NVRTC) and then -Ofc=0 (ours, on purpose): ptxas
  // says so in every log. Not news to anyone reading one.
  const std::string expected = "ptxas warning : incompatible redefinition for option 'Ofast-compile'";
  for (size_t at; (at = out.log.find(expected)) != std::string::npos;) {
    const size_t end = out.log.find('\n', at);
    out.log.erase(at, end == std::string::npos ? std::string::npos : end + 1 - at);
  }
  if (r != NVRTC_SUCCESS) {
    out.error = std::string("nvrtcCompileProgram: ") + nvrtcGetErrorString(r);
  } else {
    switch (opts.output) {  // LTO IR and PTX take the cubin's place
      case CompileOptions::Output::cubin:
        out.cubin = fetch(nvrtcGetCUBINSize, nvrtcGetCUBIN);
        break;
      case CompileOptions::Output::lto_ir:
        out.cubin = fetch(nvrtcGetLTOIRSize, nvrtcGetLTOIR);
        break;
      case CompileOptions::Output::ptx:
        out.cubin = fetch(nvrtcGetPTXSize, nvrtcGetPTX);
        strip_nul(out.cubin);
        break;
    }
    out.ok = !out.cubin.empty();
    constexpr const char* kWhat[] = {"cubin", "LTO IR", "PTX"};
    if (!out.ok) out.error = std::string("NVRTC produced no ") + kWhat[static_cast<int>(opts.output)];
  }
  nvrtcDestroyProgram(&prog);
  out.entries = parse_ptxas_log(out.log);
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::string nvrtc_ptx(const std::string& source, const CompileOptions& opts) {
  CompileOptions o = opts;
  o.output = CompileOptions::Output::ptx;
  NvrtcOutput out = nvrtc_compile(source, "ptx", o);
  return out.ok ? std::move(out.cubin) : std::string();
}

#else  // CPU-only build

bool nvrtc_available() { return false; }
std::string nvrtc_version() { return "none"; }
bool nvrtc_supports_arch(int) { return false; }
std::string nvrtc_ptx(const std::string&, const CompileOptions&) { return {}; }
NvrtcOutput nvrtc_compile(const std::string&, const std::string&, const CompileOptions&) {
  NvrtcOutput out;
  out.error = "livefuse was built without CUDA: no NVRTC";
  return out;
}

#endif

}  // namespace livefuse::jit
