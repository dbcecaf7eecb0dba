#include "kernels/jit/lto_compiler.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <type_traits>
#include <vector>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

#include "kernels/jit/kernel_cache.hpp"
#include "kernels/jit/lto_render.hpp"

#if LIVEFUSE_HAS_CUDA
#include <dlfcn.h>
#endif

namespace livefuse::jit {
namespace {

#if LIVEFUSE_HAS_CUDA
// The entry points used, declared here rather than taken from nvvm.h / nvJitLink.h: those
// headers are not where every install puts them, and nvJitLink.h maps its names onto
// versioned symbols; the unversioned ones below are exported by every 12.x and 13.x library.
using Handle = void*;
constexpr int kInputLtoIr = 3;  // NVJITLINK_INPUT_LTOIR
struct Api {
  bool ok = false;
  std::string why;
  int (*nvvmCreateProgram)(Handle*);
  int (*nvvmDestroyProgram)(Handle*);
  int (*nvvmAddModuleToProgram)(Handle, const char*, size_t, const char*);
  int (*nvvmCompileProgram)(Handle, int, const char**);
  int (*nvvmGetCompiledResultSize)(Handle, size_t*);
  int (*nvvmGetCompiledResult)(Handle, char*);
  int (*nvvmGetProgramLogSize)(Handle, size_t*);
  int (*nvvmGetProgramLog)(Handle, char*);
  int (*nvJitLinkCreate)(Handle*, uint32_t, const char**);
  int (*nvJitLinkDestroy)(Handle*);
  int (*nvJitLinkAddData)(Handle, int, const void*, size_t, const char*);
  int (*nvJitLinkComplete)(Handle);
  int (*nvJitLinkGetLinkedCubinSize)(Handle, size_t*);
  int (*nvJitLinkGetLinkedCubin)(Handle, void*);
  int (*nvJitLinkGetLinkedPtxSize)(Handle, size_t*);
  int (*nvJitLinkGetLinkedPtx)(Handle, char*);
  int (*nvJitLinkGetErrorLogSize)(Handle, size_t*);
  int (*nvJitLinkGetErrorLog)(Handle, char*);
  int (*nvJitLinkGetInfoLogSize)(Handle, size_t*);
  int (*nvJitLinkGetInfoLog)(Handle, char*);
};

void* open_first(const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  return nullptr;
}

const Api& api() {
  static const Api a = [] {
    Api r{};
    std::vector<std::string> nvvm = {"libnvvm.so.4", "libnvvm.so"};
    std::vector<std::string> jitlink = {"libnvJitLink.so.13", "libnvJitLink.so.12", "libnvJitLink.so"};
    for (const char* root : {static_cast<const char*>(std::getenv("CUDA_HOME")), static_cast<const char*>(std::getenv("CUDA_PATH")), "/usr/local/cuda"}) {
      if (!root) continue;
      nvvm.push_back(std::string(root) + "/nvvm/lib64/libnvvm.so");
      nvvm.push_back(std::string(root) + "/lib64/libnvvm.so");
      jitlink.push_back(std::string(root) + "/lib64/libnvJitLink.so");
    }
    void* hv = open_first(nvvm);
    void* hj = open_first(jitlink);
    if (!hv || !hj) {
      r.why = std::string(hv ? "" : "libnvvm not found") + (!hv && !hj ? ", " : "") + (hj ? "" : "libnvJitLink not found");
      return r;
    }
    bool all = true;
    auto get = [&](void* h, const char* name, auto& fn) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn) {
        all = false;
        r.why = std::string("symbol ") + name + " missing";
      }
    };
    get(hv, "nvvmCreateProgram", r.nvvmCreateProgram);
    get(hv, "nvvmDestroyProgram", r.nvvmDestroyProgram);
    get(hv, "nvvmAddModuleToProgram", r.nvvmAddModuleToProgram);
    get(hv, "nvvmCompileProgram", r.nvvmCompileProgram);
    get(hv, "nvvmGetCompiledResultSize", r.nvvmGetCompiledResultSize);
    get(hv, "nvvmGetCompiledResult", r.nvvmGetCompiledResult);
    get(hv, "nvvmGetProgramLogSize", r.nvvmGetProgramLogSize);
    get(hv, "nvvmGetProgramLog", r.nvvmGetProgramLog);
    get(hj, "nvJitLinkCreate", r.nvJitLinkCreate);
    get(hj, "nvJitLinkDestroy", r.nvJitLinkDestroy);
    get(hj, "nvJitLinkAddData", r.nvJitLinkAddData);
    get(hj, "nvJitLinkComplete", r.nvJitLinkComplete);
    get(hj, "nvJitLinkGetLinkedCubinSize", r.nvJitLinkGetLinkedCubinSize);
    get(hj, "nvJitLinkGetLinkedCubin", r.nvJitLinkGetLinkedCubin);
    get(hj, "nvJitLinkGetLinkedPtxSize", r.nvJitLinkGetLinkedPtxSize);
    get(hj, "nvJitLinkGetLinkedPtx", r.nvJitLinkGetLinkedPtx);
    get(hj, "nvJitLinkGetErrorLogSize", r.nvJitLinkGetErrorLogSize);
    get(hj, "nvJitLinkGetErrorLog", r.nvJitLinkGetErrorLog);
    get(hj, "nvJitLinkGetInfoLogSize", r.nvJitLinkGetInfoLogSize);
    get(hj, "nvJitLinkGetInfoLog", r.nvJitLinkGetInfoLog);
    r.ok = all;
    return r;
  }();
  return a;
}

// What libNVVM and nvJitLink hand back (a result, PTX, a cubin, a log): its size, then its
// bytes. Empty when either call fails or there is nothing.
template <class SizeFn, class GetFn>
std::string fetch(Handle h, SizeFn size, GetFn get) {
  size_t n = 0;
  if (size(h, &n) != 0 || n == 0) return {};
  std::string s(n, '\0');
  if (get(h, s.data()) != 0) return {};
  return s;
}
template <class SizeFn, class GetFn>
std::string read_log(Handle h, SizeFn size, GetFn get) {
  std::string s = fetch(h, size, get);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

// The op library's LTO IR per (options, exp flavour): compiled once, shared by every kernel.
struct Library {
  std::once_flag once;
  NvrtcOutput out;
  bool from_disk = false;
};

std::mutex g_libs_mu;
std::map<std::tuple<std::string, bool, int64_t>, std::shared_ptr<Library>> g_libs;

// A library's disk entry: its own key family (a kernel lookup never matches it), with what its
// LTO IR depends on -- NVRTC's version, the options (arch among them), the source's hash.
KernelKey library_key(const std::string& kind, const std::string& source, const CompileOptions& lo) {
  return key_of("lfl1|" + kind + "|nvrtc=" + nvrtc_version() + "|opts=" + lo.str() +
                "|src=" + hex64(fnv1a(source.data(), source.size())));
}

// `custom`: a custom op's module (custom_op_source), else the op library.
std::shared_ptr<Library> library(const CompileOptions& opts, bool fast_exp, int64_t custom, DiskCache* disk) {
  CompileOptions lo = opts;
  lo.lto = false;
  lo.output = CompileOptions::Output::lto_ir;
  lo.split = 0;
  std::shared_ptr<Library> lib;
  {
    std::lock_guard<std::mutex> g(g_libs_mu);
    auto& slot = g_libs[{lo.str(), fast_exp, custom}];
    if (!slot) slot = std::make_shared<Library>();
    lib = slot;
  }
  std::call_once(lib->once, [&] {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string name = custom < 0 ? "lf_op_library" : "lf_custom_" + std::to_string(custom);
    const std::string source =
        custom < 0 ? op_library_source(fast_exp) : custom_op_source(static_cast<uint32_t>(custom), fast_exp);
    const KernelKey key = library_key(custom < 0 ? "op_library" : "custom_op", source, lo);
    CacheCounters unused;
    if (disk && disk->enabled())
      if (std::optional<std::string> ir = disk->get(key, unused); ir && !ir->empty()) {
        lib->out.ok = true;
        lib->out.cubin = std::move(*ir);
        lib->out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        lib->from_disk = true;
        return;
      }
    lib->out = nvrtc_compile(source, name, lo);
    if (lib->out.ok && disk && disk->enabled()) disk->put(key, lib->out.cubin, unused);
  });
  return lib;
}
#endif

}  // namespace

#if LIVEFUSE_HAS_CUDA
bool lto_available() { return api().ok; }
std::string lto_unavailable_reason() { return api().ok ? std::string() : api().why; }

NvrtcOutput lto_compile(const std::vector<LinkInput>& kernels, const CompileOptions& opts, bool fast_exp,
                        DiskCache* library_cache) {
  const bool ptx = opts.output == CompileOptions::Output::ptx;
  NvrtcOutput out;
  const Api& a = api();
  if (!a.ok) {
    out.error = "LTO linking unavailable: " + a.why;
    return out;
  }
  const std::shared_ptr<Library> lib = library(opts, fast_exp, -1, library_cache);
  if (!lib->out.ok) {
    out.error = "op library: " + lib->out.error;
    out.log = lib->out.log;
    return out;
  }
  std::vector<std::shared_ptr<Library>> custom_modules;  // each custom op once
  std::vector<uint32_t> ids;
  for (const LinkInput& k : kernels)
    for (uint32_t id : k.custom_ops)
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  for (uint32_t id : ids) {
    custom_modules.push_back(library(opts, fast_exp, id, library_cache));
    if (!custom_modules.back()->out.ok) {
      out.error = "custom op " + std::to_string(id) + ": " + custom_modules.back()->out.error;
      out.log = custom_modules.back()->out.log;
      return out;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  // Each kernel's IR -> LTO IR.
  const std::string arch = "-arch=compute_" + std::to_string(opts.arch);
  std::vector<const char*> vo = {arch.c_str(), "-gen-lto"};
  if (!opts.fma) vo.push_back("-fma=0");
  std::vector<std::string> kernel_lto;
  for (const LinkInput& k : kernels) {
    Handle vp = nullptr;
    if (a.nvvmCreateProgram(&vp) != 0) {
      out.error = "nvvmCreateProgram failed";
      return out;
    }
    if (a.nvvmAddModuleToProgram(vp, k.ir->data(), k.ir->size(), k.name.c_str()) != 0 ||
        a.nvvmCompileProgram(vp, static_cast<int>(vo.size()), vo.data()) != 0) {
      out.error = "libNVVM rejected the IR of " + k.name;
      out.log = read_log(vp, a.nvvmGetProgramLogSize, a.nvvmGetProgramLog);
      a.nvvmDestroyProgram(&vp);
      return out;
    }
    std::string lto = fetch(vp, a.nvvmGetCompiledResultSize, a.nvvmGetCompiledResult);
    a.nvvmDestroyProgram(&vp);
    if (lto.empty()) {
      out.error = "libNVVM produced no LTO IR for " + k.name;
      return out;
    }
    kernel_lto.push_back(std::move(lto));
  }
  // Link with the library (every call inlined), optimise, assemble.
  const std::string sm = "-arch=sm_" + std::to_string(opts.arch);
  std::vector<const char*> lo = {sm.c_str(), "-lto", "-verbose"};  // -verbose: ptxas's register report
  if (!opts.fma) lo.push_back("-fma=0");
  if (opts.fast_compile) {  // as for NVRTC (nvrtc_compiler.hpp): NVVM at -Ofc=min, ptxas at full strength
    lo.push_back("-Ofc=min");
    lo.push_back("-Xptxas=-Ofc=0");
  }
  if (ptx) lo.push_back("-ptx");
  // Several kernels: NVVM and ptxas may take them on the host's threads at once (as NVRTC's
  // -split-compile does for a program of several kernels).
  const std::string split = "-split-compile=" + std::to_string(split_threads(kernels.size()));
  if (kernels.size() > 1 && !ptx) lo.push_back(split.c_str());
  Handle h = nullptr;
  if (a.nvJitLinkCreate(&h, static_cast<uint32_t>(lo.size()), lo.data()) != 0) {
    out.error = "nvJitLinkCreate failed";
    return out;
  }
  bool linked = true;
  for (size_t k = 0; k < kernels.size() && linked; ++k)
    linked = a.nvJitLinkAddData(h, kInputLtoIr, kernel_lto[k].data(), kernel_lto[k].size(), kernels[k].name.c_str()) == 0;
  for (const auto& m : custom_modules)
    if (linked) linked = a.nvJitLinkAddData(h, kInputLtoIr, m->out.cubin.data(), m->out.cubin.size(), "lf_custom") == 0;
  linked = linked &&
           a.nvJitLinkAddData(h, kInputLtoIr, lib->out.cubin.data(), lib->out.cubin.size(), "lf_op_library") == 0 &&
           a.nvJitLinkComplete(h) == 0;
  out.log = read_log(h, a.nvJitLinkGetInfoLogSize, a.nvJitLinkGetInfoLog);
  if (!linked) {
    out.error = "nvJitLink failed";
    out.log += read_log(h, a.nvJitLinkGetErrorLogSize, a.nvJitLinkGetErrorLog);
  } else {
    out.cubin = ptx ? fetch(h, a.nvJitLinkGetLinkedPtxSize, a.nvJitLinkGetLinkedPtx)
                    : fetch(h, a.nvJitLinkGetLinkedCubinSize, a.nvJitLinkGetLinkedCubin);
    out.ok = !out.cubin.empty();
    if (!out.ok) out.error = ptx ? "nvJitLink produced no PTX" : "nvJitLink produced no cubin";
  }
  a.nvJitLinkDestroy(&h);
  out.entries = parse_ptxas_log(out.log);
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

LtoLibraryInfo lto_library(const CompileOptions& opts, bool fast_exp, DiskCache* library_cache) {
  const std::shared_ptr<Library> lib = library(opts, fast_exp, -1, library_cache);
  return {lib->out.ok, lib->out.compile_ms, lib->from_disk};
}

NvrtcOutput lto_warm_up(const CompileOptions& opts, DiskCache* library_cache) {
  // An empty kernel, as render_pointwise_ir writes a module.
  static const std::string ir =
      "target datalayout = \"e-i64:64-i128:128-v16:16-v32:32-n16:32:64\"\n"
      "target triple = \"nvptx64-nvidia-cuda\"\n\n"
      "define void @lf_warm_up() {\n  ret void\n}\n\n"
      "@llvm.used = appending global [1 x i8*] [i8* bitcast (void ()* @lf_warm_up to i8*)], section \"llvm.metadata\"\n\n"
      "!nvvm.annotations = !{!0}\n!0 = !{void ()* @lf_warm_up, !\"kernel\", i32 1}\n"
      "!nvvmir.version = !{!1}\n!1 = !{i32 2, i32 0}\n";
  CompileOptions o = opts;
  o.output = CompileOptions::Output::cubin;
  NvrtcOutput out = lto_compile({{&ir, "lf_warm_up", {}}}, o, false, library_cache);
  if (out.ok && !lto_library(o, true, library_cache).ok) {
    out.ok = false;
    out.error = "op library (fast exp): " + library(o, true, -1, library_cache)->out.error;
  }
  return out;
}

void forget_lto_libraries_for_testing() {
  std::lock_guard<std::mutex> g(g_libs_mu);
  g_libs.clear();
}

std::string lto_ptx(const std::string& ir, const CompileOptions& opts, bool fast_exp, const std::vector<uint32_t>& custom_ops) {
  CompileOptions o = opts;
  o.output = CompileOptions::Output::ptx;
  NvrtcOutput out = lto_compile({{&ir, "ptx", custom_ops}}, o, fast_exp);
  return out.ok ? std::move(out.cubin) : std::string();
}
#else
bool lto_available() { return false; }
std::string lto_unavailable_reason() { return "built without CUDA"; }
NvrtcOutput lto_compile(const std::vector<LinkInput>&, const CompileOptions&, bool, DiskCache*) {
  NvrtcOutput out;
  out.error = "LTO linking unavailable: built without CUDA";
  return out;
}
NvrtcOutput lto_warm_up(const CompileOptions& opts, DiskCache* cache) { return lto_compile({}, opts, false, cache); }
LtoLibraryInfo lto_library(const CompileOptions&, bool, DiskCache*) { return {}; }
void forget_lto_libraries_for_testing() {}
std::string lto_ptx(const std::string&, const CompileOptions&, bool, const std::vector<uint32_t>&) { return {}; }
#endif

}  // namespace livefuse::jit
