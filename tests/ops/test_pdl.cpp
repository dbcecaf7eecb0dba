// Programmatic dependent launch (kernels/cuda/pdl.cuh): a kernel launched with it may start
// while the kernel before it runs, so every such kernel must wait before it reads what that
// kernel wrote or writes what it reads. Checked on chains in which each kernel writes the buffer
// the one before it read (a write-after-read a missing wait would race) and reads what it wrote,
// run eagerly, as a captured graph and as a PatchableGraph patched from a capture or from recorded
// launches (kernels/cuda/launch_record.hpp): the same bits as the chain
// without PDL. Kernels that load read-only operands before their wait (a GEMV's weights, the
// decode attention's cached keys) give those bits too. Needs a GPU (sm_90 for the overlap
// itself; older ones run the same code unchained).
#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "graphs/cuda_graph.hpp"
#include "graphs/patchable_graph.hpp"
#include "kernels/attention_args.hpp"
#include "kernels/cuda/attention_kernels.hpp"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/launch_record.hpp"
#include "kernels/cuda/layout.hpp"
#include "kernels/cuda/pdl.hpp"
#include "livefuse/config.hpp"
#include "tests/test_util.hpp"

namespace cu = livefuse::cuda;
namespace gr = livefuse::graphs;
using livefuse::DType;

namespace {

#define CU_OK(call) REQUIRE((call) == cudaSuccess)

constexpr int kRows = 2, kCols = 512, kPadded = 520, kSteps = 24;

// f16 bits of values uniform in [-a, a) (round to nearest through float -> half in software).
std::vector<uint16_t> half_bits(size_t n, float a, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-a, a);
  std::vector<uint16_t> out(n);
  for (auto& h : out) {
    const float f = u(g);
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffffu;
    if (exp <= 0) {  // |f| < 2^-14: flush to zero (these tests never need subnormals)
      h = static_cast<uint16_t>(sign);
      continue;
    }
    uint32_t v = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (v & 1u))) ++v;
    h = static_cast<uint16_t>(sign | v);
  }
  return out;
}

template <class T>
T* device_copy(const std::vector<T>& host) {
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, host.size() * sizeof(T)) == cudaSuccess);
  REQUIRE(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  return static_cast<T*>(p);
}

// Buffers of the chain: dense rows D [2, 512], padded rows P [2, 520] (so the copy back is a
// strided copy kernel, not a memcpy), a weight [512, 512], a norm's scale and shift.
struct Chain {
  uint16_t *in0, *in1, *d, *p, *w, *gamma, *beta;

  Chain() {
    in0 = device_copy(half_bits(kRows * kCols, 2.0f, 1));
    in1 = device_copy(half_bits(kRows * kCols, 2.0f, 2));
    d = device_copy(std::vector<uint16_t>(kRows * kCols, 0));
    p = device_copy(std::vector<uint16_t>(kRows * kPadded, 0));
    // Entries of variance 1 / 512: a product keeps its input's scale, step after step.
    w = device_copy(half_bits(size_t{kCols} * kCols, 0.0765f, 3));
    gamma = device_copy(half_bits(kCols, 1.0f, 4));
    beta = device_copy(half_bits(kCols, 0.5f, 5));
  }
  ~Chain() {
    for (void* q : {in0, in1, d, p, w, gamma, beta}) cudaFree(q);
  }

  // GEMV D (or `first`) -> P, then the strided copy P -> D, kSteps times; every other product
  // normalizes its rows first (layer_norm in the GEMV's prologue).
  void enqueue(const uint16_t* first, cudaStream_t s) const {
    for (int i = 0; i < kSteps; ++i) {
      cu::GemvArgs g;
      g.dtype = DType::f16;
      g.rows = kRows;
      g.n = g.k = kCols;
      g.x = i == 0 ? first : d;
      g.ldx = kCols;
      g.w = w;
      g.ldw = kCols;
      g.out = p;
      g.ldo = kPadded;
      if (i % 2 == 1) {
        g.norm = cu::GemvNorm::layer;
        g.norm_w = gamma;
        g.norm_b = beta;
        g.eps = 1e-5f;
      }
      REQUIRE(cu::gemv_supported(g));
      cu::launch_gemv(g, s);
      copy_back(s);
    }
  }

  // The strided copy P -> D.
  void copy_back(cudaStream_t s) const {
    cu::StridedLayout l;
    l.rank = 2;
    l.n_operands = 2;
    l.sizes[0] = kRows;
    l.sizes[1] = kCols;
    l.strides[0][0] = kCols;    // dst: D
    l.strides[0][1] = 1;
    l.strides[1][0] = kPadded;  // src: P
    l.strides[1][1] = 1;
    cu::launch_copy(d, p, 2, l, s);
  }

  std::vector<uint16_t> result(cudaStream_t s) const {
    std::vector<uint16_t> out(kRows * kCols);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    REQUIRE(cudaMemcpy(out.data(), d, out.size() * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }
};

// Programmatic edges in `g` (edges whose type is not the default full dependency).
size_t programmatic_edges(cudaGraph_t g) {
  size_t n = 0;
  REQUIRE(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n) == cudaSuccess);
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  if (n) REQUIRE(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &n) == cudaSuccess);
  size_t k = 0;
  for (const auto& e : data) k += e.type == cudaGraphDependencyTypeProgrammatic;
  return k;
}

// `chain` captured as one graph -- linked by programmatic edges where PDL overlaps (sm_90+):
// at least `edges` -- and replayed three times over `dst` zeroed: `want` each time.
template <class Enqueue, class Result>
void check_replays(cudaStream_t s, Enqueue&& chain, Result&& result, uint16_t* dst, size_t elems,
                   size_t edges, const std::vector<uint16_t>& want) {
  gr::CudaGraph g = gr::capture(s, chain);
  if (cu::current_device_info().cc_major >= 9) CHECK(programmatic_edges(g.get()) >= edges);
  const gr::CudaGraphExec e(g);
  for (int r = 0; r < 3; ++r) {
    CU_OK(cudaMemsetAsync(dst, 0, elems * 2, s));
    e.launch(s);
    CHECK(result(s) == want);
  }
}

}  // namespace

LF_CUDA_TEST_CASE("pdl: a chain of GEMVs and copies, each writing what the one before read, gives the bits it gives without PDL") {
  cudaStream_t s;
  CU_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const Chain c;
  std::vector<uint16_t> want;
  {
    const lftest::ScopedConfig off(&livefuse::Config::pdl, false);
    c.enqueue(c.in0, s);
    want = c.result(s);
  }
  const bool overlap = cu::current_device_info().cc_major >= 9;
  const lftest::ScopedConfig on(&livefuse::Config::pdl, true);
  CHECK(cu::pdl_enabled() == overlap);
  SUBCASE("eager") {
    c.enqueue(c.in0, s);
    CHECK(c.result(s) == want);
  }
  SUBCASE("one captured graph, replayed") {  // its programmatic edges: the overlap engaged
    check_replays(s, [&] { c.enqueue(c.in0, s); }, [&](cudaStream_t t) { return c.result(t); }, c.d,
                  kRows * kCols, 2 * kSteps - 1, want);
  }
  SUBCASE("a PatchableGraph whose chain takes another input") {
    std::vector<uint16_t> want1;
    {
      const lftest::ScopedConfig off(&livefuse::Config::pdl, false);
      c.enqueue(c.in1, s);
      want1 = c.result(s);
    }
    REQUIRE(want1 != want);
    auto pg = gr::PatchableGraph::capture(s, [&](gr::RegionMarks& m) {
      m.begin();
      c.enqueue(c.in0, s);
      m.end();
    });
    REQUIRE(pg);
    REQUIRE(pg->ok());  // its chain ordered through programmatic edges
    CHECK(pg->patchable_nodes() == 2 * kSteps);
    pg->launch(s);
    CHECK(c.result(s) == want);
    const gr::KernelChain k = gr::KernelChain::capture(s, [&] { c.enqueue(c.in1, s); });
    REQUIRE(k.ok());
    REQUIRE(k.shape() == pg->shape());
    REQUIRE(pg->patch(k));
    pg->launch(s);
    CHECK(c.result(s) == want1);
  }
  SUBCASE("a PatchableGraph patched from recorded launches: nothing runs while recording") {
    std::vector<uint16_t> want1;
    {
      const lftest::ScopedConfig off(&livefuse::Config::pdl, false);
      c.enqueue(c.in1, s);
      want1 = c.result(s);
    }
    auto pg = gr::PatchableGraph::capture(s, [&](gr::RegionMarks& m) {
      m.begin();
      c.enqueue(c.in0, s);
      m.end();
    });
    REQUIRE(pg);
    REQUIRE(pg->ok());
    CU_OK(cudaMemsetAsync(c.d, 0, kRows * kCols * 2, s));
    cu::LaunchRecorder rec;
    {
      const cu::RecordingScope scope(&rec);
      c.enqueue(c.in1, s);
    }
    CHECK(cu::recorder() == nullptr);
    CHECK(rec.launches().size() == 2 * kSteps);
    CHECK(c.result(s) == std::vector<uint16_t>(kRows * kCols, 0));  // nothing ran
    // Trusted after one match with a capture of the same launches.
    const gr::KernelChain k = gr::KernelChain::capture(s, [&] { c.enqueue(c.in1, s); });
    REQUIRE(k.ok());
    REQUIRE(k.recorded_by(rec));
    REQUIRE(pg->patch(rec));
    pg->launch(s);
    CHECK(c.result(s) == want1);
    // And back to the first input, from another recording of the same shape.
    cu::LaunchRecorder again;
    {
      const cu::RecordingScope scope(&again);
      c.enqueue(c.in0, s);
    }
    CHECK(again.shape() == rec.shape());
    REQUIRE(pg->patch(again));
    pg->launch(s);
    CHECK(c.result(s) == want);
  }
  CU_OK(cudaStreamDestroy(s));
}


// A GEMV that loads its first weights before its wait (gemv.hpp, EarlyWeightsScope): the chain's
// weights are never written, so the overlap may take them before the kernel before ends. The
// same bits, eagerly and as a graph; the counters show the early loads engaged only inside the
// scope and only with PDL (sm_90+).
LF_CUDA_TEST_CASE("pdl: GEMVs whose first weights load before the wait give the bits they give without PDL") {
  cudaStream_t s;
  CU_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const Chain c;
  std::vector<uint16_t> want;
  {
    const lftest::ScopedConfig off(&livefuse::Config::pdl, false);
    const cu::EarlyWeightsScope early(true);  // no PDL: nothing early
    const uint64_t e0 = cu::gemv_launch_counts().early_weights;
    c.enqueue(c.in0, s);
    want = c.result(s);
    CHECK(cu::gemv_launch_counts().early_weights == e0);
  }
  const bool overlap = cu::current_device_info().cc_major >= 9;
  const lftest::ScopedConfig on(&livefuse::Config::pdl, true);
  {
    const uint64_t e0 = cu::gemv_launch_counts().early_weights;
    c.enqueue(c.in0, s);  // PDL, outside the scope
    CHECK(c.result(s) == want);
    CHECK(cu::gemv_launch_counts().early_weights == e0);
  }
  const cu::EarlyWeightsScope early(true);
  SUBCASE("eager") {
    const uint64_t e0 = cu::gemv_launch_counts().early_weights;
    c.enqueue(c.in0, s);
    CHECK(c.result(s) == want);
    CHECK(cu::gemv_launch_counts().early_weights - e0 == (overlap ? uint64_t{kSteps} : 0));
  }
  SUBCASE("one captured graph, replayed") {
    check_replays(s, [&] { c.enqueue(c.in0, s); }, [&](cudaStream_t t) { return c.result(t); }, c.d,
                  kRows * kCols, 2 * kSteps - 1, want);
  }
  CU_OK(cudaStreamDestroy(s));
}

namespace {

// A decode attention chain: q [2 batch, 8 heads, 1 row, 64] read from D (Chain's [2, 512]), the
// output written into P's padded rows, the strided copy P -> D; kSteps times. K and V caches
// [2, 8, 300, 64] that no kernel writes -- or, appending, the step's key and value taken from D
// and written into the caches' last row each step (the keys before it are still never written).
struct AttentionChain {
  static constexpr int64_t kHeads = 8, kKeys = 300, kD = 64;
  Chain c;
  uint16_t *k, *v;

  AttentionChain() {
    k = device_copy(half_bits(size_t{kRows} * kHeads * kKeys * kD, 1.0f, 6));
    v = device_copy(half_bits(size_t{kRows} * kHeads * kKeys * kD, 1.0f, 7));
  }
  ~AttentionChain() {
    cudaFree(k);
    cudaFree(v);
  }

  livefuse::AttentionArgs args(const uint16_t* q, bool early, bool append) const {
    livefuse::AttentionArgs a;
    a.q = q, a.k = k, a.v = v, a.out = c.p;
    a.dtype = DType::f16;
    a.batch = kRows, a.heads = kHeads, a.sq = 1, a.sk = kKeys, a.d = a.dv = kD;
    const int64_t qs[4] = {kCols, kD, kD, 1}, ks[4] = {kHeads * kKeys * kD, kKeys * kD, kD, 1},
                  os[4] = {kPadded, kD, kD, 1};
    for (int i = 0; i < 4; ++i) a.q_st[i] = qs[i], a.k_st[i] = a.v_st[i] = ks[i], a.out_st[i] = os[i];
    a.rows_t = 1;
    a.scale = 0.125f;
    if (append) {  // the last key is the step's: from q's rows, landed in place
      a.first_new = kKeys - 1;
      a.k_new = a.v_new = q;
      a.k_dst = k, a.v_dst = v;
      for (int i = 0; i < 4; ++i) a.k_new_st[i] = a.v_new_st[i] = qs[i], a.k_dst_st[i] = a.v_dst_st[i] = ks[i];
    }
    a.early_kv = early;
    return a;
  }

  void enqueue(bool early, bool append, cudaStream_t s) const {
    for (int i = 0; i < kSteps; ++i) {
      cu::launch_attention(args(i == 0 ? c.in0 : c.d, early, append), s);
      c.copy_back(s);
    }
  }
};

}  // namespace

// The decode attention that loads its first cached keys and values before its wait
// (AttentionArgs::early_kv), on the FMA and on the streaming kernel: the bits of the chain
// without PDL, eagerly and as a graph, with and without an append in place; the counter moves
// only with PDL (sm_90+).
LF_CUDA_TEST_CASE("pdl: a decode attention whose cached keys load before the wait gives the bits it gives without PDL") {
  cudaStream_t s;
  CU_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const AttentionChain a;
  const bool overlap = cu::current_device_info().cc_major >= 9;
  struct StreamForced {
    ~StreamForced() { cu::force_attention_decode_stream(-1); }
  } restore;
  for (const int form : {0, 1, 2, 3}) {
    const bool streaming = form / 2 == 1, append = form % 2 == 1;
    CAPTURE(streaming);
    CAPTURE(append);
    cu::force_attention_decode_stream(streaming ? 1 : 0);
    const auto launches = [&] {
      const cu::AttentionLaunchCounts n = cu::attention_launch_counts();
      return streaming ? n.decode_stream : n.decode_fma;
    };
    std::vector<uint16_t> want;
    {
      const lftest::ScopedConfig off(&livefuse::Config::pdl, false);
      const uint64_t e0 = cu::attention_launch_counts().early_kv;
      a.enqueue(true, append, s);  // no PDL: nothing early
      want = a.c.result(s);
      CHECK(cu::attention_launch_counts().early_kv == e0);
    }
    const lftest::ScopedConfig on(&livefuse::Config::pdl, true);
    const uint64_t n0 = launches(), e0 = cu::attention_launch_counts().early_kv;
    a.enqueue(true, append, s);
    CHECK(a.c.result(s) == want);
    CHECK(launches() - n0 == uint64_t{kSteps});  // the kernel meant
    CHECK(cu::attention_launch_counts().early_kv - e0 == (overlap ? uint64_t{kSteps} : 0));
    a.enqueue(false, append, s);
    CHECK(a.c.result(s) == want);
    check_replays(s, [&] { a.enqueue(true, append, s); }, [&](cudaStream_t t) { return a.c.result(t); }, a.c.d,
                  kRows * kCols, 2 * kSteps - 1, want);
  }
  CU_OK(cudaStreamDestroy(s));
}

#endif  // LIVEFUSE_HAS_CUDA
