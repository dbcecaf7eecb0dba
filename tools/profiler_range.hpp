#pragma once
// cuProfilerStart / cuProfilerStop for the tools' --profile-final: `ncu --profile-from-start off`
// then profiles only what runs between them (tools/gpu/kernels.sh). Looked up at run time in the
// driver every CUDA process has loaded -- the tools link only livefuse; silent without one.
#include <dlfcn.h>

namespace livefuse::tools {

inline void profiler_range(bool start) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return;
  using Fn = int (*)();
  if (auto fn = reinterpret_cast<Fn>(dlsym(lib, start ? "cuProfilerStart" : "cuProfilerStop")))
    (void)fn();
  dlclose(lib);
}

}  // namespace livefuse::tools
