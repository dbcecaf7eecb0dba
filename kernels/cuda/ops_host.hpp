#pragma once
// OpCall -> plan translation for each op family (host code, g++): the .cu launchers only see
// plain plans, so nvcc never parses the runtime's headers.
#include <cuda_runtime_api.h>

#include <span>

#include <vector>

#include "kernels/cuda/layout.hpp"
#include "livefuse/error.hpp"
#include "runtime/op_call.hpp"

namespace livefuse::cuda {

void run_elementwise(const OpCall& call, const Tensor& out, cudaStream_t s);
void run_reduction(const OpCall& call, const Tensor& out, cudaStream_t s);
void run_topk(const OpCall& call, std::span<const Tensor> outputs, cudaStream_t s);
void run_normalization(const OpCall& call, const Tensor& out, cudaStream_t s);
void run_layout(const OpCall& call, const Tensor& out, cudaStream_t s);
void run_embedding(const OpCall& call, const Tensor& out, cudaStream_t s);
// A concat's copies (each input into its slab of `out`), for launch_copies: run_layout launches
// them, a plan gathers those of several concats into one launch.
void concat_copies(const OpCall& call, const Tensor& out, std::vector<CopyJob>& jobs);

}  // namespace livefuse::cuda
