// Reductions over one dim. Two shapes of work:
//  * row: the reduced dim is contiguous (stride 1) and long enough: a warp (or, for long rows,
//    a whole block) per output, coalesced reads, shuffle reduction. Long float rows with few
//    outputs (a decoder's argmax over its vocabulary) take 1024 threads with four 16-byte
//    loads in flight each -- one block of 256 doing one dependent load at a time took 90 us for
//    GPT-2's 50257 logits on an H200 -- and, on sm_90+, a cluster of 8 such blocks a row.
//  * col: anything else (typically reducing a leading dim): 32 consecutive outputs per block
//    along x, the reduced dim split over 8 y-threads, combined through shared memory.
// Reducers are templated on accumulator type only; storage dtypes are a runtime switch.
#include <cooperative_groups.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/cluster.hpp"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/dtype_io.cuh"
#include "kernels/cuda/launch_util.hpp"
#include "kernels/cuda/offset_calc.cuh"
#include "kernels/cuda/reduce.hpp"
#include "kernels/cuda/warp.cuh"

namespace livefuse::cuda {
namespace {

template <class Acc>
__device__ __forceinline__ Acc lowest() {
  if constexpr (sizeof(Acc) == 4) {
    return -__int_as_float(0x7f800000);  // -inf
  } else {
    return static_cast<Acc>(INT64_MIN);
  }
}

template <class Acc>
struct SumR {
  using State = Acc;
  __device__ static State init() { return Acc(0); }
  __device__ static State make(Acc v, int64_t) { return v; }
  __device__ static State combine(State a, State b) { return a + b; }
  __device__ static State shfl(State a, int o) { return __shfl_xor_sync(kFullMask, a, o); }
};

template <class Acc>
struct MaxR {
  using State = Acc;
  __device__ static State init() { return lowest<Acc>(); }
  __device__ static State make(Acc v, int64_t) { return v; }
  __device__ static State combine(State a, State b) { return lf_max(a, b); }  // NaN wins
  __device__ static State shfl(State a, int o) { return __shfl_xor_sync(kFullMask, a, o); }
};

// First index of the maximum; a NaN counts as the maximum (as in torch.argmax).
template <class Acc>
struct ArgMaxR {
  struct State {
    Acc v;
    int64_t i;
  };
  __device__ static State init() { return {lowest<Acc>(), INT64_MAX}; }
  __device__ static State make(Acc v, int64_t i) { return {v, i}; }
  __device__ static State combine(State a, State b) {
    const bool an = a.v != a.v, bn = b.v != b.v;
    bool take_a;
    if (an || bn) {
      take_a = an && (!bn || a.i < b.i);
    } else {
      take_a = a.v > b.v || (a.v == b.v && a.i < b.i);
    }
    return take_a ? a : b;
  }
  __device__ static State shfl(State a, int o) {
    return {__shfl_xor_sync(kFullMask, a.v, o), __shfl_xor_sync(kFullMask, a.i, o)};
  }
};

struct ReduceArgs {
  const void* in;
  void* out;
  DType in_dt, out_dt;
  bool mean;
  int64_t n_out, r, r_stride;
  OffsetCalc<int64_t, 1> oc;
};

template <class R, class Acc>
__device__ __forceinline__ void store_result(const ReduceArgs& a, int64_t o, typename R::State st) {
  if constexpr (sizeof(typename R::State) > sizeof(Acc)) {  // argmax: the index
    store_as<int64_t>(a.out, o, a.out_dt, st.i);
  } else if (a.mean) {
    store_as<Acc>(a.out, o, a.out_dt, st / static_cast<Acc>(a.r));
  } else {
    store_as<Acc>(a.out, o, a.out_dt, st);
  }
}

// Combines a block's per-thread states; thread 0 gets the result. blockDim.x a multiple of 32.
template <class R>
__device__ typename R::State block_combine(typename R::State st, typename R::State* smem) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) st = R::combine(st, R::shfl(st, off));
  const int warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  if (threadIdx.x % 32 == 0) smem[warp] = st;
  __syncthreads();
  if (warp == 0) {
    st = threadIdx.x < nwarps ? smem[threadIdx.x] : R::init();
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) st = R::combine(st, R::shfl(st, off));
  }
  return st;
}

// `group` threads (32, or blockDim.x for long rows) per output.
template <class R, class Acc>
__global__ void __launch_bounds__(256) reduce_row_kernel(const ReduceArgs a, int group) {
  using State = typename R::State;
  __shared__ State smem[32];
  const int lane = threadIdx.x % group;
  const int groups = blockDim.x / group;
  for (int64_t o = int64_t{blockIdx.x} * groups + threadIdx.x / group; o < a.n_out;
       o += int64_t{gridDim.x} * groups) {
    int64_t base[1];
    a.oc.get(o, base);
    State st = R::init();
    for (int64_t j = lane; j < a.r; j += group)
      st = R::combine(st, R::make(load_as<Acc>(a.in, base[0] + j, a.in_dt), j));
    if (group > 32) {  // block mode: one output per block, combine the warps
      st = block_combine<R>(st, smem);
      __syncthreads();
    } else {
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) st = R::combine(st, R::shfl(st, off));
    }
    if (lane == 0) store_result<R, Acc>(a, o, st);
  }
}

constexpr int kLongRowThreads = 1024, kLongRowUnroll = 4;
// Blocks a long row is split over on sm_90+: one thread-block cluster, the blocks' states
// combined through distributed shared memory (no workspace, still one launch). Llama's 128256
// bf16 logits took ~22 us as one block (one SM's share of the bandwidth, ncu, H200).
constexpr int kLongRowBlocks = 8;  // the portable cluster size

// One block's state over its share of row `o`'s chunks (16-byte chunks of the row's
// 16-byte-aligned part, split into `parts` shares: this is share `part`); share 0 also takes the
// elements before the first 16-byte boundary and after the last whole chunk, one by one.
// Thread 0 gets the block's state. Each thread reads kLongRowUnroll chunks before it combines
// any (eight 2-byte loads at a time took 25 us for Llama's 128256 bf16 logits on an H200).
template <class R, class S>
__device__ typename R::State long_row_state(const ReduceArgs& a, int64_t o, int part, int parts,
                                            typename R::State* smem) {
  using State = typename R::State;
  using Bits = typename S::Bits;
  constexpr int kPer = 16 / sizeof(Bits);
  int64_t base[1];
  a.oc.get(o, base);
  const Bits* in = static_cast<const Bits*>(a.in) + base[0];
  const int64_t misalign = static_cast<int64_t>(reinterpret_cast<uintptr_t>(in) % 16);
  const int64_t head = misalign % int64_t{sizeof(Bits)} != 0
                           ? a.r  // not even element-aligned: all one by one
                           : min(a.r, (16 - misalign) % 16 / int64_t{sizeof(Bits)});
  const int64_t chunks = (a.r - head) / kPer;
  const int64_t c_begin = chunks * part / parts, c_end = chunks * (part + 1) / parts;
  const uint4* vin = reinterpret_cast<const uint4*>(in + head);
  State st = R::init();
  const int64_t t = threadIdx.x, nt = blockDim.x;
  const auto take = [&](const uint4& v, int64_t c) {
    Bits b[kPer];
    static_assert(sizeof(b) == sizeof(uint4));
    __builtin_memcpy(b, &v, sizeof(v));
#pragma unroll
    for (int e = 0; e < kPer; ++e) st = R::combine(st, R::make(S::to(b[e]), head + c * kPer + e));
  };
  int64_t c = c_begin + t;
  for (; c + (kLongRowUnroll - 1) * nt < c_end; c += nt * kLongRowUnroll) {
    uint4 v[kLongRowUnroll];
#pragma unroll
    for (int u = 0; u < kLongRowUnroll; ++u) v[u] = __ldg(vin + c + u * nt);
#pragma unroll
    for (int u = 0; u < kLongRowUnroll; ++u) take(v[u], c + u * nt);
  }
  for (; c < c_end; c += nt) take(__ldg(vin + c), c);
  if (part == 0) {
    for (int64_t j = t; j < head; j += nt) st = R::combine(st, R::make(S::to(in[j]), j));
    for (int64_t j = head + chunks * kPer + t; j < a.r; j += nt) st = R::combine(st, R::make(S::to(in[j]), j));
  }
  return block_combine<R>(st, smem);
}

// One block per output; the storage type S is compile-time.
template <class R, class S>
__global__ void __launch_bounds__(kLongRowThreads) reduce_long_row_kernel(const ReduceArgs a) {
  __shared__ typename R::State smem[32];
  const auto st = long_row_state<R, S>(a, blockIdx.x, 0, 1, smem);
  if (threadIdx.x == 0) store_result<R, float>(a, blockIdx.x, st);
}

// One cluster of kLongRowBlocks blocks per output (sm_90+): block `rank` takes the rank-th share
// of the row's chunks; rank 0 combines the shares in rank order (a fixed order: the same bits
// every call, sums included) and writes.
template <class R, class S>
__global__ void __launch_bounds__(kLongRowThreads) reduce_long_row_cluster_kernel(const ReduceArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  using State = typename R::State;
  __shared__ State smem[32];
  __shared__ State mine;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank()), ranks = static_cast<int>(cluster.num_blocks());
  const int64_t o = blockIdx.x / ranks;
  const State st = long_row_state<R, S>(a, o, rank, ranks, smem);
  if (threadIdx.x == 0) mine = st;
  cluster.sync();  // every share is written
  if (rank == 0 && threadIdx.x == 0) {
    State all = *cluster.map_shared_rank(&mine, 0);
    for (int i = 1; i < ranks; ++i) all = R::combine(all, *cluster.map_shared_rank(&mine, i));
    store_result<R, float>(a, o, all);
  }
  cluster.sync();  // and read: a block's shared memory lives only as long as the block
#else
  (void)a;  // launched only where clusters run (clusters_fit)
#endif
}

template <class R, class S>
void launch_long_rows(const ReducePlan& p, const ReduceArgs& a, cudaStream_t s) {
  const DeviceInfo& dev = current_device_info();
  const auto cluster_kernel = reduce_long_row_cluster_kernel<R, S>;
  // Clusters while the outputs leave most SMs idle (a decoder's argmax: one or a few rows).
  static const bool fits = clusters_fit(cluster_kernel, kLongRowBlocks, kLongRowThreads);  // once a kernel
  if (dev.cc_major >= 9 && p.n_out * kLongRowBlocks <= int64_t{dev.sm_count} * 2 && fits) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(p.n_out * kLongRowBlocks));
    cfg.blockDim = dim3(kLongRowThreads);
    cfg.stream = s;
    cudaLaunchAttribute attr = cluster_attr(kLongRowBlocks);
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    LF_CUDA_CALL(cudaLaunchKernelEx(&cfg, cluster_kernel, a));
    return;
  }
  reduce_long_row_kernel<R, S><<<static_cast<unsigned>(p.n_out), kLongRowThreads, 0, s>>>(a);
  LF_CUDA_LAUNCH_CHECK("reduce_long_row_kernel");
}

constexpr int kColX = 32, kColY = 8;

template <class R, class Acc>
__global__ void __launch_bounds__(kColX* kColY) reduce_col_kernel(const ReduceArgs a) {
  using State = typename R::State;
  __shared__ State smem[kColY][kColX];
  const int64_t o = int64_t{blockIdx.x} * kColX + threadIdx.x;
  State st = R::init();
  if (o < a.n_out) {
    int64_t base[1];
    a.oc.get(o, base);
    for (int64_t j = threadIdx.y; j < a.r; j += kColY)
      st = R::combine(st, R::make(load_as<Acc>(a.in, base[0] + j * a.r_stride, a.in_dt), j));
  }
  smem[threadIdx.y][threadIdx.x] = st;
  __syncthreads();
  if (threadIdx.y == 0 && o < a.n_out) {
#pragma unroll
    for (int y = 1; y < kColY; ++y) st = R::combine(st, smem[y][threadIdx.x]);
    store_result<R, Acc>(a, o, st);
  }
}

template <class R, class Acc>
void launch(const ReducePlan& p, const ReduceArgs& a, cudaStream_t s) {
  if (p.r_stride == 1 && p.r >= 32) {
    // Long rows with few outputs get a block each; otherwise a warp each.
    const bool block_mode = p.r >= 4096 && p.n_out < int64_t{current_device_info().sm_count} * 8;
    if constexpr (std::is_same_v<Acc, float>) {
      if (block_mode && is_floating(p.in_dtype)) {
        with_float_storage(p.in_dtype, [&](auto storage) { launch_long_rows<R, decltype(storage)>(p, a, s); });
        return;
      }
    }
    const int group = block_mode ? 256 : 32;
    const int64_t blocks = (p.n_out + (256 / group) - 1) / (256 / group);
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(blocks, 1 << 30));
    reduce_row_kernel<R, Acc><<<grid, 256, 0, s>>>(a, group);
    LF_CUDA_LAUNCH_CHECK("reduce_row_kernel");
  } else {
    const int64_t blocks = (p.n_out + kColX - 1) / kColX;
    LF_ASSERT(blocks < (int64_t{1} << 31), "too many outputs for reduce_col_kernel");
    reduce_col_kernel<R, Acc><<<static_cast<unsigned>(blocks), dim3(kColX, kColY), 0, s>>>(a);
    LF_CUDA_LAUNCH_CHECK("reduce_col_kernel");
  }
}

}  // namespace

void launch_reduce(const ReducePlan& p, cudaStream_t s) {
  if (p.n_out == 0) return;
  ReduceArgs a{};
  a.in = p.in;
  a.out = p.out;
  a.in_dt = p.in_dtype;
  a.out_dt = p.out_dtype;
  a.mean = p.kind == ReduceKind::mean;
  a.n_out = p.n_out;
  a.r = p.r;
  a.r_stride = p.r_stride;
  a.oc = OffsetCalc<int64_t, 1>::make(p.outer, 0);
  switch (p.kind) {
    case ReduceKind::sum:
    case ReduceKind::mean:
      return p.int_acc ? launch<SumR<int64_t>, int64_t>(p, a, s)
                       : launch<SumR<float>, float>(p, a, s);
    case ReduceKind::max:
      return p.int_acc ? launch<MaxR<int64_t>, int64_t>(p, a, s)
                       : launch<MaxR<float>, float>(p, a, s);
    case ReduceKind::argmax:
      return p.int_acc ? launch<ArgMaxR<int64_t>, int64_t>(p, a, s)
                       : launch<ArgMaxR<float>, float>(p, a, s);
  }
}

}  // namespace livefuse::cuda
