// A kernel's ops compiled once, kernels linked per compile: lib.cu (C++, e.g. the generated
// preamble plus `extern "C" __device__ float lf_op_gelu_f(float a) { return lf_gelu(a); }`)
// goes through NVRTC -dlto once; each kernel, NVVM IR calling lf_op_* (gen_ir.py --extern-gelu),
// goes through libNVVM -gen-lto and then nvJitLink -lto with the library, which inlines the
// calls and runs ptxas. Median of 7 after a warm-up.
// Build: g++ -O2 -o lto_probe lto_probe.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64 \
//          -lnvrtc -lnvvm -lnvJitLink -Wl,-rpath,/usr/local/cuda/lib64
// Session 6 (2 cores, here): library 17-21 ms once; per kernel 24 ms for the bench's kernel-1
// shape (glue 0.7 ms, link + LTO + ptxas 23.5), against NVRTC's 32; no calls left in the PTX.
#include <nvJitLink.h>
#include <nvrtc.h>
#include <nvvm.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "probe_util.hpp"

using probe::clk;
using probe::fetch;
using probe::ms_since;
using probe::read;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: lto_probe lib.cu kernel.ll\n");
    return 2;
  }
  const std::string lib = read(argv[1]), glue = read(argv[2]);
  auto t0 = clk::now();
  nvrtcProgram p;
  nvrtcCreateProgram(&p, lib.c_str(), "lib.cu", 0, nullptr, nullptr);
  const char* o[] = {"-arch=sm_90", "--std=c++17", "-default-device", "-minimal", "--no-cache", "-dlto", "-rdc=true"};
  if (nvrtcCompileProgram(p, 7, o)) {
    std::printf("library failed:\n%s\n", fetch(p, nvrtcGetProgramLogSize, nvrtcGetProgramLog).c_str());
    return 1;
  }
  const std::string libir = fetch(p, nvrtcGetLTOIRSize, nvrtcGetLTOIR);
  std::printf("library (NVRTC -dlto, once): %.1f ms, %zu bytes\n", ms_since(t0), libir.size());
  std::vector<double> a, b;
  bool has_entry = false, has_calls = true;
  for (int r = 0; r < 8; ++r) {
    auto t1 = clk::now();
    nvvmProgram vp;
    nvvmCreateProgram(&vp);
    nvvmAddModuleToProgram(vp, glue.data(), glue.size(), "kernel");
    const char* vo[] = {"-arch=compute_90", "-gen-lto"};
    if (nvvmCompileProgram(vp, 2, vo)) {
      std::printf("libNVVM failed:\n%s\n", fetch(vp, nvvmGetProgramLogSize, nvvmGetProgramLog).c_str());
      return 1;
    }
    const std::string gir = fetch(vp, nvvmGetCompiledResultSize, nvvmGetCompiledResult);
    nvvmDestroyProgram(&vp);
    const double glue_ms = ms_since(t1);
    auto t2 = clk::now();
    nvJitLinkHandle h;
    const char* lo[] = {"-arch=sm_90", "-lto", "-ptx"};
    nvJitLinkCreate(&h, r == 0 ? 3 : 2, lo);  // the first link keeps its PTX to look at
    nvJitLinkAddData(h, NVJITLINK_INPUT_LTOIR, gir.data(), gir.size(), "kernel");
    nvJitLinkAddData(h, NVJITLINK_INPUT_LTOIR, libir.data(), libir.size(), "lib");
    if (nvJitLinkComplete(h)) {
      std::printf("nvJitLink failed:\n%s\n", fetch(h, nvJitLinkGetErrorLogSize, nvJitLinkGetErrorLog).c_str());
      return 1;
    }
    if (r == 0) {
      const std::string ptx = fetch(h, nvJitLinkGetLinkedPtxSize, nvJitLinkGetLinkedPtx);
      has_entry = ptx.find(".entry") != std::string::npos;
      has_calls = ptx.find("call.uni") != std::string::npos || ptx.find("call ") != std::string::npos;
    }
    nvJitLinkDestroy(&h);
    if (r) {
      a.push_back(glue_ms);
      b.push_back(ms_since(t2));
    }
  }
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::printf("%s: kernel entry %s, calls left %s; glue IR -> LTO %.1f ms, link + LTO + ptxas %.1f ms, total %.1f\n",
              argv[2], has_entry ? "yes" : "NO", has_calls ? "YES" : "no", a[3], b[3], a[3] + b[3]);
}
