#pragma once
// The few driver API calls fused kernels need (module load, function lookup and attributes,
// launch), reached through the runtime's cudaGetDriverEntryPointByVersion at first use. The
// library never links libcuda: binaries must start on machines without a driver (CI), where
// every call here reports "no driver" as data.
#include <memory>
#include <string>
#include <vector>

namespace livefuse::jit {

struct LoadedFunction {
  void* fn = nullptr;       // CUfunction
  int registers = 0;
  int local_bytes = 0;      // > 0: the variant spills (or uses a stack frame)
  int max_threads = 0;
  int smem_optin_set = 0;   // dynamic shared memory already allowed for this function
};

// A kernel's entry points in a cubin loaded into the current device's primary context. Modules
// are never unloaded: a kernel may still be referenced by a captured graph when its cache entry
// goes away. Several kernels may share one module (one program, program_source).
struct LoadedModule {
  void* module = nullptr;   // CUmodule
  int device = -1;
  std::vector<LoadedFunction> functions;  // in the order of the names asked for
};

bool driver_available(std::string* why = nullptr);
// The driver function `name` (its CUDA 12 form), or nullptr with *why set when given.
void* driver_entry_point(const char* name, std::string* why = nullptr);
// Loads `cubin` on the current device: the CUmodule, or nullptr + *error.
void* load_cubin(const std::string& cubin, std::string* error);
// Looks up `entries` in `module` (loaded on the current device). nullptr + *error on failure.
std::shared_ptr<LoadedModule> module_functions(void* module, const std::vector<std::string>& entries,
                                               std::string* error);
// Allows `bytes` of dynamic shared memory for `f` (static + dynamic above 48 KiB needs it; any
// request above 32 KiB is made explicit).
bool set_dynamic_smem(LoadedFunction& f, int bytes, std::string* error);
bool launch_function(const LoadedFunction& f, unsigned grid_x, unsigned block_x, unsigned block_y,
                     unsigned smem, void* stream, void** params, std::string* error);

// Timing launches without waiting (row body tuning, row_tuner.hpp), through runtime events.
bool stream_capturing(void* stream);  // also true when it cannot be told
void* timing_event();                 // nullptr when none can be made
bool record_event(void* event, void* stream);
// Time between two recorded events: 1 (*ms set), 0 (not complete yet) or -1 (failed).
int elapsed_ms(void* start, void* end, float* ms);
void destroy_event(void* event);

// Facts of the current device (runtime API): SM version (major*10+minor), opt-in shared memory.
int current_device_arch();
int current_device_smem_optin();
int current_device_sm_count();
// Blocks of `threads` threads and `smem` dynamic shared memory one SM holds at once (>= 1).
int resident_blocks_per_sm(const LoadedFunction& f, int threads, int smem);
int current_device_index();

}  // namespace livefuse::jit
