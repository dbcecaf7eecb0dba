#pragma once
// Eager topk over the last dim of dense rows (topk_host.cpp makes a strided input dense).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "livefuse/dtype.hpp"

namespace livefuse::cuda {

struct TopkPlan {
  const void* in = nullptr;  // [rows, n], dense
  DType dtype = DType::f32;  // of the input and the values
  void* values = nullptr;    // [rows, k], dense
  int64_t* indices = nullptr;
  int64_t rows = 0, n = 0;
  int k = 0;
};

void launch_topk(const TopkPlan& p, cudaStream_t s);

}  // namespace livefuse::cuda
