#pragma once
// Eager CUDA execution of registered custom elementwise ops. Their CUDA source only exists as
// a string, so the eager path compiles it with NVRTC (once per op, dtype and layout class;
// cached like every generated kernel). Owned by kernels/jit.
#include <span>

#include "runtime/op_call.hpp"

namespace livefuse::jit {
void launch_custom_eager(const OpCall& call, std::span<const Tensor> outputs, void* stream);
}
