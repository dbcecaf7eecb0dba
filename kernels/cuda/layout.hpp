#pragma once
// Data movement without arithmetic: strided copies (contiguous, concat, materialising an
// operand for cuBLASLt) and the embedding row gather.
#include <cuda_runtime_api.h>

#include "kernels/cuda/strided.hpp"
#include "livefuse/dtype.hpp"

namespace livefuse::cuda {

// Copies elements of `elem_bytes` from src to dst, both strided over `l` (operand 0 = dst,
// operand 1 = src). Bits are copied as they are (no conversion), so NaN payloads and i64
// survive. `l` is coalesced in place.
void launch_copy(void* dst, const void* src, size_t elem_bytes, StridedLayout& l, cudaStream_t s);

// Independent copies (none reads what another writes), in as few launches as their kinds
// allow: word copies of one word size share a launch (up to 8). A concat's inputs go this way.
struct CopyJob {
  void* dst;
  const void* src;
  size_t elem_bytes;
  StridedLayout l;  // operand 0 = dst, operand 1 = src
};
void launch_copies(const CopyJob* jobs, int n, cudaStream_t s);

struct GatherPlan {
  const void* weight = nullptr;
  DType dtype = DType::f32;
  int64_t num = 0, dim = 0;  // weight [num, dim]
  int64_t w_row_stride = 0, w_col_stride = 1;
  const void* ids = nullptr;
  DType ids_dtype = DType::i64;
  int64_t n_ids = 0;
  StridedLayout ids_layout;  // operand 0 = ids' strides
  void* out = nullptr;       // dense [n_ids, dim]
};

// Rows of weight picked by ids. An id outside [0, num) cannot be reported at launch time
// without a host sync, so the kernel fills that output row with NaN and records the id in a
// per-device flag; take_gather_error() reads (and clears) it -- a sync, so dispatch calls it
// only under LIVEFUSE_VERIFY.
void launch_gather(const GatherPlan& p, cudaStream_t s);
// Waits for `s`; returns the number of out-of-range ids seen since the last call and one of
// them in *example. Resets the flag.
int64_t take_gather_error(cudaStream_t s, int64_t* example);

}  // namespace livefuse::cuda
