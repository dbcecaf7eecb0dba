#pragma once
// What the GEMM tuning asks of a timed candidate (gemm_lt.cpp, tune(), [ Note -- tuned
// algorithms ]): its result, whether that is the reference's up to rounding, and what the
// algorithm is (for the records). Internal to kernels/cuda.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/cuda/gemm_lt.hpp"

namespace livefuse::cuda::detail {

// D of `c` as floats, after the stream's work (the stream is synchronized).
std::vector<float> read_d(const LtCall& c, cudaStream_t s);
// Whether a candidate's D equals the reference's up to rounding (gemm_lt_check.cpp says how).
bool same_result(const std::vector<float>& got, const std::vector<float>& ref, const LtCall& c);
// The algorithm's K splits, their reduction scheme and its cuBLASLt ids, into `rec`.
void describe_algo(const cublasLtMatmulAlgo_t& algo, GemmTuneRecord* rec);

}  // namespace livefuse::cuda::detail
