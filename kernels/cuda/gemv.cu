// Few-row products (gemv.hpp), the host side: which instantiation of the kernel
// (gemv_kernel.cuh) a call takes -- rows, warps a weight row, one or two weight rows a warp, a
// norm's, a rotary's -- and its grid. The split is chosen so that short-and-wide weights (GPT-2's
// FFN2: 768 rows of 3072) still have enough loads in flight per SM, while tall ones (a
// vocabulary head) use one warp a row.
#include <atomic>
#include <cstdint>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/gemv_kernel.cuh"
#include "kernels/cuda/launch_util.hpp"
#include "kernels/cuda/pdl.hpp"
#include "kernels/cuda/preload.hpp"
#include "livefuse/config.hpp"

namespace livefuse::cuda {
namespace {

using namespace gemv_device;  // the kernel (gemv_kernel.cuh) and its constants
std::atomic<uint64_t> g_launches{0}, g_early_launches{0}, g_rotary_launches{0}, g_norm_paired{0};
// A norm's normalized rows live in shared memory (gemv_kernel): the default limit of 48 KB a
// block less what the kernel's static arrays take (a few hundred bytes: a launch asking for 48 KB
// of dynamic memory beside them failed with "invalid argument", as 8 rows of 3072 did until
// session 54). 8 rows of 2048 16-bit elements fit; larger rows run the norm's own kernel first.
constexpr int64_t kNormedBytes = (int64_t{48} << 10) - 1024;

// The bytes of x's rows normalized: a norm's kernel's dynamic shared memory.
template <class S>
size_t normed_bytes(const GemvArgs& a) {
  return static_cast<size_t>(a.rows * a.k) * sizeof(typename S::Bits);
}

// Blocks of `kernel` resident at once on the current device, `smem` dynamic bytes each. Cached
// by the kernel's instantiation and smem in 128-byte steps: the query is not free, and a norm's
// GEMV is launched once a layer a decode step.
template <auto kKernel>
int64_t wave_blocks(size_t smem) {
  static std::atomic<int> per_sm[kNormedBytes / 128 + 1];
  std::atomic<int>& slot = per_sm[(smem + 127) / 128];
  int n = slot.load(std::memory_order_relaxed);
  if (n == 0) {
    LF_CUDA_CALL(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel, kWarps * 32, smem));
    n = n > 0 ? n : 1;
    slot.store(n, std::memory_order_relaxed);
  }
  return int64_t{n} * current_device_info().sm_count;
}

template <class S, int kRows, int kSplit, bool kNorm, bool kGate, bool kPair = false, bool kRope = false>
void launch_split(const GemvArgs& a, cudaStream_t s) {
  constexpr auto kKernel = gemv_kernel<S, kRows, kSplit, kNorm, kGate, kPair, kRope>;
  constexpr int64_t kGroup = kColumnsPerBlock<kSplit, kPair>;
  const int64_t cols = kGate ? a.n / 2 : a.n;
  const size_t smem = kNorm ? normed_bytes<S>(a) : 0;
  int64_t blocks = (cols + kGroup - 1) / kGroup;  // a group of rows each
  if constexpr (kNorm) {  // at most one wave, the groups spread evenly over it (gemv_kernel)
    const int64_t wave = wave_blocks<kKernel>(smem);
    const int64_t rounds = (blocks + wave - 1) / wave;
    blocks = (blocks + rounds - 1) / rounds;
  }
  launch_pdl("gemv_kernel", kKernel, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(a.batch)),
             kWarps * 32, smem, s, a);
}

// Whether a one-row norm GEMV with one weight row a warp needs more groups of rows than one wave
// of its blocks holds, so that blocks would take two or more groups one after another (each
// group's weights a DRAM round trip after the last group's sums). With two rows a warp the
// block takes twice the columns and every group's weights are in flight at once, its first
// group's before the PDL wait: GPT-2's FFN1 (3072 x 768, layer_norm inside) is 768 groups of 4
// columns against a wave of 660 blocks of 96 registers on 132 SMs (Config::gemv_pair).
template <class S, int kSplit>
bool norm_groups_past_wave(const GemvArgs& a) {
  const int64_t groups = (a.n + kColumnsPerBlock<kSplit, false> - 1) / kColumnsPerBlock<kSplit, false>;
  return groups > wave_blocks<gemv_kernel<S, 1, kSplit, true, false>>(normed_bytes<S>(a));
}

// `pair`: two weight rows a warp, taken by one-row products without a gate only (the
// instantiations stay few); launch_gemv decides it for products without a norm, this for those
// with one: every such product under LIVEFUSE_GEMV_PAIR=2, under 1 those past a wave.
template <class S, int kRows, bool kNorm, bool kGate>
void launch_rows(const GemvArgs& a, int split, bool pair, cudaStream_t s) {
  if constexpr (kRows == 1 && !kGate) {
    if (a.rope.cols > 0) {  // a rotary's pairs over two warps of a block, or (4 warps a row) one warp
      switch (split) {
        case 1: return launch_split<S, 1, 1, kNorm, false, false, true>(a, s);
        case 2: return launch_split<S, 1, 2, kNorm, false, false, true>(a, s);
        default: return launch_split<S, 1, 4, kNorm, false, true, true>(a, s);
      }
    }
    if constexpr (kNorm) {
      const int mode = config().gemv_pair;
      pair = mode == 2 || (mode == 1 && split <= 2 &&
                           (split == 1 ? norm_groups_past_wave<S, 1>(a) : norm_groups_past_wave<S, 2>(a)));
      if (pair && mode == 1) g_norm_paired.fetch_add(1, std::memory_order_relaxed);
    }
    if (pair) {
      switch (split) {
        case 1: return launch_split<S, 1, 1, kNorm, false, true>(a, s);
        case 2: return launch_split<S, 1, 2, kNorm, false, true>(a, s);
        default: return launch_split<S, 1, 4, kNorm, false, true>(a, s);
      }
    }
  }
  switch (split) {
    case 1: return launch_split<S, kRows, 1, kNorm, kGate>(a, s);
    case 2: return launch_split<S, kRows, 2, kNorm, kGate>(a, s);
    default: return launch_split<S, kRows, 4, kNorm, kGate>(a, s);
  }
}

template <class S, int kRows>
void load_rows() {
  const auto split = [](auto k) {
    constexpr int kSplit = decltype(k)::value;
    load_kernel(gemv_kernel<S, kRows, kSplit, false, false>);
    load_kernel(gemv_kernel<S, kRows, kSplit, true, false>);
    load_kernel(gemv_kernel<S, kRows, kSplit, false, true>);
    load_kernel(gemv_kernel<S, kRows, kSplit, true, true>);
  };
  split(std::integral_constant<int, 1>{});
  split(std::integral_constant<int, 2>{});
  split(std::integral_constant<int, 4>{});
  if constexpr (kRows == 1) {
    for (const auto k : {gemv_kernel<S, 1, 1, false, false, true>, gemv_kernel<S, 1, 2, false, false, true>,
                         gemv_kernel<S, 1, 4, false, false, true>, gemv_kernel<S, 1, 1, true, false, true>,
                         gemv_kernel<S, 1, 2, true, false, true>, gemv_kernel<S, 1, 4, true, false, true>})
      load_kernel(k);
    for (const auto k :  // the rotary's (kRope)
         {gemv_kernel<S, 1, 1, false, false, false, true>, gemv_kernel<S, 1, 2, false, false, false, true>,
          gemv_kernel<S, 1, 4, false, false, true, true>, gemv_kernel<S, 1, 1, true, false, false, true>,
          gemv_kernel<S, 1, 2, true, false, false, true>, gemv_kernel<S, 1, 4, true, false, true, true>})
      load_kernel(k);
  }
}

template <class S, bool kNorm, bool kGate>
void launch_typed(const GemvArgs& a, int split, bool pair, cudaStream_t s) {
  if (a.rows == 1) return launch_rows<S, 1, kNorm, kGate>(a, split, pair, s);
  if (a.rows == 2) return launch_rows<S, 2, kNorm, kGate>(a, split, pair, s);
  if (a.rows <= 4) return launch_rows<S, 4, kNorm, kGate>(a, split, pair, s);
  return launch_rows<S, 8, kNorm, kGate>(a, split, pair, s);
}

}  // namespace

bool gemv_supported(const GemvArgs& a) {
  if (a.dtype != DType::f32 && a.dtype != DType::f16 && a.dtype != DType::bf16) return false;
  if (a.rows < 1 || a.rows > kGemvMaxRows || a.n < 1 || a.k < 1) return false;
  if (a.n > int64_t{1} << 31 || (a.residual && a.act != GemvAct::none)) return false;
  // silu / erf gelu only gate; a gated pair has two halves, and writes neither parts nor a sum
  if ((a.act == GemvAct::silu || a.act == GemvAct::gelu) && !a.gated) return false;
  if (a.gated && (a.n % 2 != 0 || a.residual || a.parts > 0 || a.batch > 1 || a.ldo < a.n / 2)) return false;
  if (a.parts < 0 || a.parts > kGemvMaxParts || (a.parts > 0 && (a.residual || a.begin[a.parts] != a.n)))
    return false;
  const int64_t es = static_cast<int64_t>(dtype_size(a.dtype)), per = 16 / es;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (a.norm != GemvNorm::none &&
      ((a.norm == GemvNorm::rms && a.norm_b) || !aligned(a.norm_w) || !aligned(a.norm_b) ||
       a.rows * a.k * es > kNormedBytes))
    return false;
  if (!aligned(a.x) || (a.rows > 1 && a.ldx % per != 0)) return false;
  if (a.batch < 1 || a.batch > 65535) return false;
  if (a.batch > 1 && (a.bias || a.residual || a.norm != GemvNorm::none || a.parts > 0 ||
                      a.x_bstride % per != 0 || a.w_bstride % per != 0))
    return false;
  if (const GemvRope& r = a.rope; r.cols != 0 &&
      (r.cols < 0 || r.d < 2 || r.d % 2 != 0 || r.cols % r.d != 0 || r.cols > a.n || !r.cos || !r.sin ||
       a.rows != 1 || a.gated || a.residual || a.act != GemvAct::none || a.batch != 1))
    return false;
  return a.k % per == 0 && a.ldw % per == 0 && aligned(a.w) && (a.gated || a.ldo >= a.n);
}

namespace {
std::atomic<bool> g_prefetch{true};
std::atomic<bool> g_norm_early{true};
thread_local bool t_early_weights = false;  // EarlyWeightsScope
}  // namespace

GemvLaunchCounts gemv_launch_counts() {
  return {g_launches.load(std::memory_order_relaxed), g_early_launches.load(std::memory_order_relaxed),
          g_rotary_launches.load(std::memory_order_relaxed), g_norm_paired.load(std::memory_order_relaxed)};
}

EarlyWeightsScope::EarlyWeightsScope(bool on) : before_(t_early_weights) { t_early_weights = on; }
EarlyWeightsScope::~EarlyWeightsScope() { t_early_weights = before_; }
bool early_weights_scope() { return t_early_weights; }

void set_gemv_prefetch(bool on) { g_prefetch.store(on, std::memory_order_relaxed); }
void set_gemv_norm_early(bool on) { g_norm_early.store(on, std::memory_order_relaxed); }

void preload_gemv_kernels(DType dt) {
  with_float_storage(dt, [](auto storage) {
    using S = decltype(storage);
    load_rows<S, 1>();
    load_rows<S, 2>();
    load_rows<S, 4>();
    load_rows<S, 8>();
  });
}

void launch_gemv(const GemvArgs& args, cudaStream_t s) {
  GemvArgs a = args;
  a.prefetch = g_prefetch.load(std::memory_order_relaxed) && pdl_enabled();
  a.norm_early = g_norm_early.load(std::memory_order_relaxed);
  a.early_weights = (a.early_weights || t_early_weights) && pdl_enabled();
  g_launches.fetch_add(1, std::memory_order_relaxed);
  if (a.early_weights) g_early_launches.fetch_add(1, std::memory_order_relaxed);
  if (a.rope.cols > 0) g_rotary_launches.fetch_add(1, std::memory_order_relaxed);
  // Warps a weight row: more while the grid would leave loads per SM short and each lane would
  // otherwise wait on more than one round of kUnroll loads. (A gated product's warp reads two
  // rows: its warps are counted by the rows they read.)
  const int64_t runs = a.k / (16 / static_cast<int64_t>(dtype_size(a.dtype))) / 32;
  int split = 1;
  while (split < kWarps && a.n * split < 8192 && runs > int64_t{kUnroll} * split) split *= 2;
  // Two weight rows a warp (Config::gemv_pair): by default where each lane reads at least 8
  // chunks of its share of a row (Llama's down projection gained 11%; shorter rows lost 4-5%).
  const int pair_mode = config().gemv_pair;
  const bool wide = pair_mode == 2 || (pair_mode == 1 && runs >= int64_t{8} * split);
  // (A norm's product pairs by launch_rows' rule, and a rotary's pairs are its heads' column pairs.)
  const bool pair = a.norm == GemvNorm::none && wide;
  with_float_storage(a.dtype, [&](auto storage) {
    using S = decltype(storage);
    const bool norm = a.norm != GemvNorm::none;
    if (a.gated) norm ? launch_typed<S, true, true>(a, split, pair, s) : launch_typed<S, false, true>(a, split, pair, s);
    else norm ? launch_typed<S, true, false>(a, split, pair, s) : launch_typed<S, false, false>(a, split, pair, s);
  });
}

}  // namespace livefuse::cuda
