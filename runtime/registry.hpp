#pragma once
// Registered user ops (custom.hpp), looked up by id. Ids are dense and never reused, so a
// structural signature can name a custom op by id; entries live for the process.
#include <string>

#include "livefuse/custom.hpp"

namespace livefuse {

struct CustomElementwiseDef {
  uint32_t id = 0;
  std::string name;
  int arity = 1;
  std::string cuda_expr;  // over float a, b, c
  CpuScalarFn cpu_fn = nullptr;
};

struct OpaqueKernelDef {
  uint32_t id = 0;
  std::string name;
  LaunchFn launch;
  bool capturable = true;
};

// Throw livefuse::Error for an unknown id (a default-constructed CustomOp / OpaqueKernel).
const CustomElementwiseDef& custom_op(uint32_t id);
const OpaqueKernelDef& opaque_kernel(uint32_t id);

}  // namespace livefuse
