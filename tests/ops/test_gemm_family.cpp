// Few-row batched products share their cuBLASLt algorithm across lengths
// (kernels/cuda/gemm_lt_family.hpp): which calls do, the representative the heuristic is asked
// about (host logic: runs wherever the CUDA backend builds), and on a GPU the products of a
// decode step's eager attention over many cache lengths -- right, one heuristic per power of two,
// and the same bits whatever shapes ran before.
#if LIVEFUSE_HAS_CUDA
#include "kernels/cuda/gemm_lt.hpp"
#include "kernels/cuda/gemm_lt_family.hpp"
#include "kernels/cuda/gemm_lt_operands.hpp"
#include "livefuse/config.hpp"
#include "tests/ops/ops_util.hpp"

using namespace opstest;
namespace cu = livefuse::cuda;
namespace cud = livefuse::cuda::detail;

namespace {

// q·kᵀ of one query row per head against L keys, as gemm_cublaslt.cpp hands it to cuBLASLt:
// D [L, 1] column-major per batch = Kᵀ-view (op T over stored [64, L]) times q [64, 1].
cu::LtCall scores_call(int64_t keys, int64_t cache_stride) {
  cu::LtCall c;
  c.dtype = DType::f16;
  c.a = {reinterpret_cast<const void*>(uintptr_t{0x7f0000100000}), CUBLAS_OP_T, 64, keys, 64};
  c.b = {reinterpret_cast<const void*>(uintptr_t{0x7f0000200000}), CUBLAS_OP_N, 64, 1, 64};
  c.d = reinterpret_cast<void*>(uintptr_t{0x7f0000300000});
  c.m = keys, c.n = 1, c.k = 64, c.ldd = keys;
  c.batch = 12, c.stride_a = cache_stride, c.stride_b = 64, c.stride_d = keys;
  return c;
}

int64_t align_a(const cu::LtCall& c) { return cud::operand_alignment(c.a.ptr, c.a.ld, c.stride_a, c.batch, c.dtype); }
int64_t align_d(const cu::LtCall& c) { return cud::operand_alignment(c.d, c.ldd, c.stride_d, c.batch, c.dtype); }

}  // namespace

TEST_CASE("gemm family: few-row batched products share a representative per power of two, alignment kept") {
  // A concat cache (batch stride = keys x 64) and a static one (stride fixed by its capacity).
  for (const bool concat : {true, false}) {
    CAPTURE(concat);
    const auto call = [&](int64_t keys) { return scores_call(keys, concat ? keys * 64 : 4096 * 64); };
    const cu::LtCall r33 = cu::family_representative(call(33));
    for (int64_t keys = 33; keys <= 64; ++keys) {
      CAPTURE(keys);
      const cu::LtCall c = call(keys);
      REQUIRE(cu::in_few_row_family(c));
      const cu::LtCall r = cu::family_representative(c);
      CHECK(r.m == 64);
      CHECK(r.n == 1);
      CHECK(r.k == 64);
      // Large enough for every matrix of the batch, never overlapping.
      CHECK(r.a.rows == 64);
      CHECK(r.a.cols == 64);
      CHECK(r.a.ld >= r.a.rows);
      CHECK(r.stride_a >= r.a.ld * r.a.cols);
      CHECK(r.ldd >= r.m);
      CHECK(r.stride_d >= r.ldd * r.n);
      // What cuBLASLt is told of alignment is the call's own.
      CHECK(align_a(r) == align_a(c));
      CHECK(align_d(r) == align_d(c));
      // One representative for a power of two and an alignment: the static cache's whole power
      // of two (here: odd lengths make the output 2-byte aligned, as at 33); for the concat
      // cache, whose batch stride moves with the length, the odd lengths.
      if (keys % 2 == 1) {
        CHECK(r.stride_a == r33.stride_a);
        CHECK(r.a.ld == r33.a.ld);
        CHECK(r.ldd == r33.ldd);
      }
    }
    CHECK(cu::family_representative(call(65)).m == 128);
  }
  // Not in a family: unbatched, more rows than kFamilyRows on both sides, a C input, f32 partials.
  cu::LtCall c = scores_call(40, 40 * 64);
  c.batch = 1;
  CHECK_FALSE(cu::in_few_row_family(c));
  c = scores_call(40, 40 * 64);
  c.n = cu::kFamilyRows + 1;
  CHECK_FALSE(cu::in_few_row_family(c));
  c.n = cu::kFamilyRows;
  CHECK(cu::in_few_row_family(c));
  c.c = c.d;
  CHECK_FALSE(cu::in_few_row_family(c));
  c = scores_call(40, 40 * 64);
  c.d_f32 = true;
  CHECK_FALSE(cu::in_few_row_family(c));
}

namespace {

// q [2, 12, rows, 64] against the first `keys` keys of a K and V cache (dense, as a concat cache
// leaves them): q·kᵀ and p·v on the GPU, checked against the CPU. Returns p·v.
Tensor attention_products(DType t, int64_t rows, int64_t keys, const Tensor& q, const Tensor& k_all,
                          const Tensor& v_all, const Tensor& p_all) {
  CAPTURE(keys);
  const Tensor k = k_all.slice(2, 0, keys, 1).contiguous();
  const Tensor v = v_all.slice(2, 0, keys, 1).contiguous();
  const Tensor p = p_all.slice(3, 0, keys, 1).contiguous();
  const Tensor s = lf::matmul(q, k.transpose(-1, -2));
  const Tensor o = lf::matmul(p, v);
  const Device cpu = Device::cpu();
  const Tensor s_ref = lf::matmul(q.to(cpu), k.to(cpu).transpose(-1, -2));
  const Tensor o_ref = lf::matmul(p.to(cpu), v.to(cpu));
  check_close(s, s_ref.to_doubles(), {2, 12, rows, keys}, t, lftest::tolerance(t), 2e-2, "q k^T");
  check_close(o, o_ref.to_doubles(), {2, 12, rows, 64}, t, lftest::tolerance(t), 2e-2, "p v");
  return o;
}

struct Caches {
  Tensor q, k, v, p;
  Caches(DType t, int64_t rows) {
    const Device gpu = Device::cuda(0);
    q = rand_tensor({2, 12, rows, 64}, t, gpu, 11, -1, 1);
    k = rand_tensor({2, 12, 160, 64}, t, gpu, 12, -1, 1);
    v = rand_tensor({2, 12, 160, 64}, t, gpu, 13, -1, 1);
    p = rand_tensor({2, 12, rows, 160}, t, gpu, 14, 0, 1);
  }
};

}  // namespace

LF_CUDA_TEST_CASE("gemm family: cuBLASLt's few-row batched products over 100 cache lengths") {
  // Four query rows a head (more than the GEMV kernels take batched) go to cuBLASLt.
  for (const DType t : {DType::f16, DType::bf16, DType::f32}) {
    CAPTURE(lf::dtype_name(t));
    cu::reset_gemm_tuning();
    const cu::GemmTuneCounters before = cu::gemm_tune_counters();
    const Caches c(t, 4);
    std::vector<double> at100;
    for (int64_t keys = 33; keys <= 132; ++keys) {
      const Tensor o = attention_products(t, 4, keys, c.q, c.k, c.v, c.p);
      if (keys == 100) at100 = o.to_doubles();
    }
    const cu::GemmTuneCounters after = cu::gemm_tune_counters();
    // 200 products of new shapes; the heuristic was asked about representatives only: per
    // product, power of two of the length (3) and alignment of a length-strided operand (the
    // length's factors of two: <= 8 classes), so at most 2 x 18 -- not about every shape.
    CHECK(after.family_algos - before.family_algos >= 150);
    CHECK(after.family_representatives - before.family_representatives <= 36);
    // The length-100 product alone, after everything was forgotten: the same bits.
    cu::reset_gemm_tuning();
    const Tensor o100 = lf::matmul(c.p.slice(3, 0, 100, 1).contiguous(), c.v.slice(2, 0, 100, 1).contiguous());
    CHECK(o100.to_doubles() == at100);
  }
}

LF_CUDA_TEST_CASE("few-row batched products: one and two query rows a head run as livefuse's GEMV kernels") {
  for (const DType t : {DType::f16, DType::bf16, DType::f32}) {
    for (const int64_t rows : {1, 2}) {
      CAPTURE(lf::dtype_name(t));
      CAPTURE(rows);
      const Caches c(t, rows);
      cu::reset_gemm_tuning();
      const cu::GemmTuneCounters before = cu::gemm_tune_counters();
      for (int64_t keys : {1, 7, 33, 64, 100, 131, 160}) attention_products(t, rows, keys, c.q, c.k, c.v, c.p);
      // Never cuBLASLt's: no family algorithm was taken. With LIVEFUSE_GEMV=0 the same products
      // are cuBLASLt's, through their families -- what this check would see if the kernels did
      // not take them.
      CHECK(cu::gemm_tune_counters().family_algos == before.family_algos);
      const lftest::ScopedConfig off(&livefuse::Config::gemv, false);
      attention_products(t, rows, 50, c.q, c.k, c.v, c.p);
      CHECK(cu::gemm_tune_counters().family_algos > before.family_algos);
    }
  }
}

#endif  // LIVEFUSE_HAS_CUDA
