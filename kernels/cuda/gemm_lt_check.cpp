// A timed candidate of the GEMM tuning: its result read back and checked, its configuration
// described (gemm_lt_check.hpp).
#include "kernels/cuda/gemm_lt_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cuda/check.cuh"

namespace livefuse::cuda::detail {

// D of `c` (column-major m x n, ldd, `batch` of them stride_d apart) as floats, after the
// stream's work: the stream is synchronized.
std::vector<float> read_d(const LtCall& c, cudaStream_t s) {
  if (c.batch * c.n * c.m == 0) return {};
  const int64_t span = (c.batch - 1) * c.stride_d + (c.n - 1) * c.ldd + c.m;
  std::vector<std::byte> raw(static_cast<size_t>(span) * dtype_size(d_dtype(c)));
  LF_CUDA_CALL(cudaMemcpyAsync(raw.data(), c.d, raw.size(), cudaMemcpyDeviceToHost, s));
  LF_CUDA_CALL(cudaStreamSynchronize(s));
  std::vector<float> out(static_cast<size_t>(c.batch * c.n * c.m));
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t j = 0; j < c.n; ++j)
      cpu::load_floats(raw.data(), d_dtype(c), b * c.stride_d + j * c.ldd, c.m, 1,
                       out.data() + (b * c.n + j) * c.m);
  return out;
}

// Whether a candidate's D equals the reference's up to rounding: both sum in f32 and round once,
// so they may differ by one unit in the last place of the dtype (a sum near a rounding boundary:
// at most 2^-7 of the value in bf16, 2^-10 in f16) and by the f32 sums' order (relative to the
// largest value). A looser bound (1e-3 of the largest) let through a bf16 algorithm that moved
// a value of fuzz seed 100059's output by 11%.
bool same_result(const std::vector<float>& got, const std::vector<float>& ref, const LtCall& c) {
  double r = 1e-5, a = 1e-5;
  if (c.dtype == DType::bf16) r = 1.0 / 128;
  else if (c.dtype == DType::f16) r = 1.0 / 512;
  else if (c.tf32) r = 2e-3, a = 2e-3;
  double largest = 0;
  for (float v : ref) largest = std::max(largest, std::abs(static_cast<double>(v)));
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = got[i], w = ref[i];
    if (std::isnan(w) != std::isnan(g)) return false;
    if (!std::isnan(w) && std::abs(g - w) > r * std::abs(w) + a * largest) return false;
  }
  return true;
}

namespace {
// An attribute of an algorithm's configuration; nothing when cuBLASLt does not give it.
template <class T>
std::optional<T> algo_config(const cublasLtMatmulAlgo_t& algo,
                             cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) !=
      CUBLAS_STATUS_SUCCESS)
    return std::nullopt;
  return v;
}
}  // namespace

void describe_algo(const cublasLtMatmulAlgo_t& algo, GemmTuneRecord* rec) {
  if (const auto splits = algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM))
    rec->split_k = static_cast<uint32_t>(std::max<int32_t>(1, *splits));
  if (const auto scheme = algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME))
    rec->reduction = rec->split_k > 1 ? *scheme : 0;
  if (const auto id = algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID)) rec->algo_id = *id;
  if (const auto tile = algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID))
    rec->tile = static_cast<int>(*tile);
}

}  // namespace livefuse::cuda::detail
