// What a pointwise kernel costs to compile without NVRTC's C++ front end: NVVM IR text
// (gen_ir.py) -> libNVVM -> PTX -> nvJitLink (ptxas) -> sm_90 cubin, median of 7 after a warm-up.
// Build: g++ -O2 -o nvvm_probe nvvm_probe.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64 \
//          -lnvvm -lnvJitLink -Wl,-rpath,/usr/local/cuda/lib64
// Session 6 (2 cores, here): 18.7 ms for the kernel-1 shape (4 elements, 2 gelus; NVRTC takes
// 32.0 with the fast-compile default, 36 without), 11.3 ms without the gelus.
#include <nvJitLink.h>
#include <nvvm.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "probe_util.hpp"

using probe::clk;
using probe::fetch;
using probe::ms_since;

int main(int argc, char** argv) {
  for (int f = 1; f < argc; ++f) {
    const std::string ir = probe::read(argv[f]);
    std::vector<double> a, b;
    std::string ptx;
    for (int r = 0; r < 8; ++r) {
      auto t1 = clk::now();
      nvvmProgram vp;
      nvvmCreateProgram(&vp);
      if (nvvmAddModuleToProgram(vp, ir.data(), ir.size(), "k")) {
        std::printf("add fail\n");
        return 1;
      }
      const char* vo[] = {"-arch=compute_90", "-opt=3"};
      if (nvvmCompileProgram(vp, 2, vo)) {
        std::printf("nvvm fail %s\n", fetch(vp, nvvmGetProgramLogSize, nvvmGetProgramLog).c_str());
        return 1;
      }
      ptx = fetch(vp, nvvmGetCompiledResultSize, nvvmGetCompiledResult);
      nvvmDestroyProgram(&vp);
      const double ta = ms_since(t1);
      auto t2 = clk::now();
      nvJitLinkHandle h;
      const char* lo[] = {"-arch=sm_90", "-verbose"};
      nvJitLinkCreate(&h, 2, lo);
      nvJitLinkAddData(h, NVJITLINK_INPUT_PTX, ptx.data(), strlen(ptx.c_str()), "k.ptx");
      if (nvJitLinkComplete(h)) {
        std::printf("link fail %s\n", fetch(h, nvJitLinkGetErrorLogSize, nvJitLinkGetErrorLog).c_str());
        return 1;
      }
      if (r == 0) std::printf("%s", fetch(h, nvJitLinkGetInfoLogSize, nvJitLinkGetInfoLog).c_str());
      nvJitLinkDestroy(&h);
      if (r) {
        a.push_back(ta);
        b.push_back(ms_since(t2));
      }
    }
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    std::printf("%s: libnvvm IR->PTX %.1f ms, PTX->cubin %.1f ms, total %.1f\n", argv[f], a[3], b[3], a[3] + b[3]);
  }
}
