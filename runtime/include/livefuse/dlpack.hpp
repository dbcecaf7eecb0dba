#pragma once
// DLPack import/export, so PyTorch / CuPy / JAX memory is shared without copies.
#include "livefuse/tensor.hpp"

struct DLManagedTensor;

namespace livefuse {

// Takes ownership of `m` (its deleter runs when the last Tensor is gone).
Tensor from_dlpack(DLManagedTensor* m);
// The caller owns the result and must call its deleter; the Tensor's storage stays alive
// until then. A sync point (deferred work producing x is flushed first).
DLManagedTensor* to_dlpack(const Tensor& x);

}  // namespace livefuse
