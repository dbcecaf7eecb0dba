#include "kernels/jit/cuda_driver.hpp"

#include <algorithm>
#include <mutex>

#if LIVEFUSE_HAS_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "kernels/cuda/pdl.hpp"
#endif

namespace livefuse::jit {

#if LIVEFUSE_HAS_CUDA
namespace {

struct DriverApi {
  PFN_cuModuleLoadData_v2000 module_load = nullptr;
  PFN_cuModuleGetFunction_v2000 get_function = nullptr;
  PFN_cuFuncGetAttribute_v2020 get_attribute = nullptr;
  PFN_cuFuncSetAttribute_v9000 set_attribute = nullptr;
  PFN_cuLaunchKernel_v4000 launch = nullptr;
  PFN_cuLaunchKernelEx_v11060 launch_ex = nullptr;  // null: no PDL for generated kernels
  PFN_cuGetErrorString_v6000 error_string = nullptr;
  PFN_cuOccupancyMaxActiveBlocksPerMultiprocessor_v6050 occupancy = nullptr;
  std::string why;  // empty when usable
};

template <class F>
bool entry(const char* name, F* out, std::string& why) {
  void* fn = driver_entry_point(name, why.empty() ? &why : nullptr);
  *out = reinterpret_cast<F>(fn);
  return fn != nullptr;
}

const DriverApi& api() {
  static DriverApi a = [] {
    DriverApi d;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      cudaGetLastError();
      d.why = "[jit] no CUDA device or driver";
      return d;
    }
    entry("cuModuleLoadData", &d.module_load, d.why);
    entry("cuModuleGetFunction", &d.get_function, d.why);
    entry("cuFuncGetAttribute", &d.get_attribute, d.why);
    entry("cuFuncSetAttribute", &d.set_attribute, d.why);
    entry("cuLaunchKernel", &d.launch, d.why);
    std::string optional;  // a driver without it launches every kernel without PDL
    entry("cuLaunchKernelEx", &d.launch_ex, optional);
    entry("cuGetErrorString", &d.error_string, d.why);
    entry("cuOccupancyMaxActiveBlocksPerMultiprocessor", &d.occupancy, d.why);
    return d;
  }();
  return a;
}

std::string cu_error(CUresult r) {
  const char* s = nullptr;
  if (api().error_string) api().error_string(r, &s);
  return s ? s : ("CUresult " + std::to_string(static_cast<int>(r)));
}

}  // namespace

void* driver_entry_point(const char* name, std::string* why) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q);
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || fn == nullptr) {
    if (why) *why = std::string("[jit] no CUDA driver entry point ") + name + ": " + cudaGetErrorString(e);
    cudaGetLastError();  // the failed query must not poison later runtime calls
    return nullptr;
  }
  return fn;
}

bool driver_available(std::string* why) {
  const DriverApi& a = api();
  if (why) *why = a.why;
  return a.why.empty();
}

void* load_cubin(const std::string& cubin, std::string* error) {
  if (!driver_available(error)) return nullptr;
  // The runtime creates (or binds) the primary context; the driver calls below use it.
  if (cudaFree(nullptr) != cudaSuccess) {
    cudaGetLastError();
    *error = "[jit] cannot initialise the CUDA context";
    return nullptr;
  }
  CUmodule mod = nullptr;
  if (CUresult r = api().module_load(&mod, cubin.data()); r != CUDA_SUCCESS) {
    *error = "[jit] cuModuleLoadData: " + cu_error(r);
    return nullptr;
  }
  return mod;
}

std::shared_ptr<LoadedModule> module_functions(void* module, const std::vector<std::string>& entries,
                                               std::string* error) {
  const DriverApi& a = api();
  auto m = std::make_shared<LoadedModule>();
  m->module = module;
  m->device = current_device_index();
  for (const auto& name : entries) {
    LoadedFunction f;
    CUfunction fn = nullptr;
    if (CUresult r = a.get_function(&fn, static_cast<CUmodule>(module), name.c_str()); r != CUDA_SUCCESS) {
      *error = "[jit] cuModuleGetFunction(" + name + "): " + cu_error(r);
      return nullptr;
    }
    f.fn = fn;
    a.get_attribute(&f.registers, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
    a.get_attribute(&f.local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn);
    a.get_attribute(&f.max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn);
    m->functions.push_back(f);
  }
  return m;
}

bool set_dynamic_smem(LoadedFunction& f, int bytes, std::string* error) {
  if (bytes <= 32 * 1024 || bytes <= f.smem_optin_set) return true;
  const CUresult r = api().set_attribute(static_cast<CUfunction>(f.fn),
                                         CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
  if (r != CUDA_SUCCESS) {
    *error = "[jit] cuFuncSetAttribute(max dynamic smem " + std::to_string(bytes) + "): " + cu_error(r);
    return false;
  }
  f.smem_optin_set = bytes;
  return true;
}

bool launch_function(const LoadedFunction& f, unsigned grid_x, unsigned block_x, unsigned block_y,
                     unsigned smem, void* stream, void** params, std::string* error) {
  const DriverApi& a = api();
  CUresult r;
  if (a.launch_ex && cuda::pdl_enabled()) {
    // With PDL: every generated kernel waits first (render_common.cpp's lf_pdl_wait), so it may
    // be resident while the kernel before it on the stream runs (kernels/cuda/pdl.cuh's note).
    CUlaunchAttribute pdl{};
    pdl.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    pdl.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg{};
    cfg.gridDimX = grid_x, cfg.gridDimY = 1, cfg.gridDimZ = 1;
    cfg.blockDimX = block_x, cfg.blockDimY = block_y, cfg.blockDimZ = 1;
    cfg.sharedMemBytes = smem;
    cfg.hStream = static_cast<CUstream>(stream);
    cfg.attrs = &pdl;
    cfg.numAttrs = 1;
    r = a.launch_ex(&cfg, static_cast<CUfunction>(f.fn), params, nullptr);
  } else {
    r = a.launch(static_cast<CUfunction>(f.fn), grid_x, 1, 1, block_x, block_y, 1, smem,
                 static_cast<CUstream>(stream), params, nullptr);
  }
  if (r != CUDA_SUCCESS) {
    *error = "[jit] cuLaunchKernel: " + cu_error(r);
    return false;
  }
  return true;
}

int resident_blocks_per_sm(const LoadedFunction& f, int threads, int smem) {
  int n = 0;
  if (!api().occupancy ||
      api().occupancy(&n, static_cast<CUfunction>(f.fn), threads, static_cast<size_t>(smem)) != CUDA_SUCCESS)
    return 1;
  return std::max(n, 1);
}

// The timing calls below run while the program may be capturing a graph on another thread. A
// capture in global mode (the default) makes "unsafe" calls such as cudaEventQuery fail on
// every thread of the process, and fail that capture with them; none of these touch a
// captured stream, so they run in relaxed mode.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() {
    if (cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) cudaGetLastError();
  }
  ~RelaxedCaptureMode() {
    if (cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) cudaGetLastError();
  }

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

bool stream_capturing(void* stream) {
  RelaxedCaptureMode relaxed;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &st) != cudaSuccess) {
    cudaGetLastError();
    return true;
  }
  return st != cudaStreamCaptureStatusNone;
}

void* timing_event() {
  RelaxedCaptureMode relaxed;
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return e;
}

bool record_event(void* event, void* stream) {
  if (cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

int elapsed_ms(void* start, void* end, float* ms) {
  RelaxedCaptureMode relaxed;
  const cudaError_t q = cudaEventQuery(static_cast<cudaEvent_t>(end));
  if (q == cudaErrorNotReady) return 0;
  if (q == cudaSuccess &&
      cudaEventElapsedTime(ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)) == cudaSuccess)
    return 1;
  cudaGetLastError();
  return -1;
}

void destroy_event(void* event) {
  if (!event) return;
  RelaxedCaptureMode relaxed;
  if (cudaEventDestroy(static_cast<cudaEvent_t>(event)) != cudaSuccess) cudaGetLastError();
}

int current_device_sm_count() {
  const int d = current_device_index();
  int v = 0;
  if (d < 0 || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, d) != cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  return v;
}

int current_device_index() {
  int d = 0;
  if (cudaGetDevice(&d) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return d;
}

int current_device_arch() {
  const int d = current_device_index();
  int major = 0, minor = 0;
  if (d < 0 || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return major * 10 + minor;
}

int current_device_smem_optin() {
  const int d = current_device_index();
  int v = 0;
  if (d < 0 || cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, d) != cudaSuccess) {
    cudaGetLastError();
    return 48 * 1024;
  }
  return v;
}

#else  // CPU-only build

void* driver_entry_point(const char*, std::string* why) {
  if (why) *why = "[jit] built without CUDA";
  return nullptr;
}
bool driver_available(std::string* why) {
  if (why) *why = "[jit] built without CUDA";
  return false;
}
void* load_cubin(const std::string&, std::string* error) {
  *error = "[jit] built without CUDA";
  return nullptr;
}
std::shared_ptr<LoadedModule> module_functions(void*, const std::vector<std::string>&, std::string* error) {
  *error = "[jit] built without CUDA";
  return nullptr;
}
bool set_dynamic_smem(LoadedFunction&, int, std::string* error) {
  *error = "[jit] built without CUDA";
  return false;
}
bool launch_function(const LoadedFunction&, unsigned, unsigned, unsigned, unsigned, void*, void**, std::string* error) {
  *error = "[jit] built without CUDA";
  return false;
}
int current_device_arch() { return 0; }
int current_device_smem_optin() { return 48 * 1024; }
int current_device_sm_count() { return 1; }
bool stream_capturing(void*) { return true; }
void* timing_event() { return nullptr; }
bool record_event(void*, void*) { return false; }
int elapsed_ms(void*, void*, float*) { return -1; }
void destroy_event(void*) {}
int resident_blocks_per_sm(const LoadedFunction&, int, int) { return 1; }
int current_device_index() { return -1; }

#endif

}  // namespace livefuse::jit
