#pragma once
// Kernels linked from the op library (lto_render.hpp): libNVVM turns a kernel's NVVM IR into
// LTO IR, nvJitLink links it with the library's LTO IR (inlining every call) and runs ptxas.
// libNVVM and nvJitLink are loaded at first use (dlopen: libnvvm lives outside the toolkit's
// lib64 on many installs); without them, lto_available() is false and kernels take NVRTC.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/jit/nvrtc_compiler.hpp"

namespace livefuse::jit {

class DiskCache;  // kernel_cache.hpp

bool lto_available();
std::string lto_unavailable_reason();  // empty when available

// Links kernels (NVVM IR from render_pointwise_ir, one exp flavour) against the library for
// `opts` and that flavour, into one cubin -- or its PTX, with opts.output == Output::ptx. The
// library is compiled once per (arch, options, flavour) and process; its NVRTC time is not part
// of compile_ms. The library is read, and ptxas set up, once for all the kernels. On failure,
// `error` and `log` say why.
struct LinkInput {
  const std::string* ir;
  std::string name;
  std::vector<uint32_t> custom_ops;  // custom_ops_of(spec): their modules join the link
};
//
// `library_cache`: where the library's LTO IR is kept between processes (the kernel cache's
// directory; the entry's key holds NVRTC's version, the library's options and a hash of its
// source, as a kernel's does). Null or disabled: compiled once per process.
NvrtcOutput lto_compile(const std::vector<LinkInput>& kernels, const CompileOptions& opts, bool fast_exp,
                        DiskCache* library_cache = nullptr);
// The op library for these options and flavour, compiled (or read from `library_cache`) if not
// yet done: paid once per process, outside every kernel's compile_ms.
struct LtoLibraryInfo {
  bool ok = false;
  double ms = 0;           // NVRTC time, or the disk read's when from_disk
  bool from_disk = false;
};
LtoLibraryInfo lto_library(const CompileOptions& opts, bool fast_exp, DiskCache* library_cache = nullptr);
// What the first kernel linked in a process would pay before its own link: both flavours of
// the library and libNVVM's and nvJitLink's first use (an empty kernel is linked). The compile
// service runs it on its arena when it starts on a GPU machine (KernelCompiler::warm_up).
NvrtcOutput lto_warm_up(const CompileOptions& opts, DiskCache* library_cache = nullptr);
// Test hook: forgets the libraries built in this process (the next use builds or reads them).
void forget_lto_libraries_for_testing();
// The PTX the same link makes (tests compare it with NVRTC's for the C++ kernel); empty on failure.
std::string lto_ptx(const std::string& ir, const CompileOptions& opts, bool fast_exp,
                    const std::vector<uint32_t>& custom_ops = {});

}  // namespace livefuse::jit
