// Which products the CUDA GEMV takes (kernels/cuda/gemv_host.cpp, gemv_args_for and
// gemv_supported) and which it leaves to cuBLASLt. Host logic over operand views: it runs on any
// machine the CUDA backend builds on, GPU or not (the products themselves: test_matmul.cpp).
#if LIVEFUSE_HAS_CUDA
#include "kernels/cuda/gemm_views.hpp"
#include "kernels/cuda/gemv.hpp"
#include "livefuse/config.hpp"
#include "tests/ops/ops_util.hpp"

using namespace opstest;
namespace cu = livefuse::cuda;
namespace cud = livefuse::cuda::detail;

namespace {

// linear(x, w)'s operands as gemm_nd sees them, and its dense output.
struct Linear {
  cud::MatView a, b;
  cud::OutView out;
};

Linear linear_of(const Tensor& x, const Tensor& w) {
  Linear l{};
  cud::linear_views(x, w, &l.a, &l.b);
  Shape os = x.shape();
  os[os.rank - 1] = w.shape()[0];
  l.out = cud::OutView{nullptr, os, x.dtype(), x.device()};
  return l;
}

bool takes(const Tensor& x, const Tensor& w, cu::GemvArgs* g = nullptr) {
  cu::GemvArgs local;
  const Linear l = linear_of(x, w);
  return cud::gemv_args_for(l.a, l.b, l.out, g ? g : &local);
}

}  // namespace

TEST_CASE("gemv routing: decode-step linears take the GEMV; other shapes go to cuBLASLt") {
  const Device cpu = Device::cpu();  // only addresses and strides matter here
  const Tensor w = rand_tensor({48, 64}, DType::f16, cpu, 1);
  cu::GemvArgs g;
  // One row: GPT-2's QKV-shaped product.
  REQUIRE(takes(rand_tensor({1, 64}, DType::f16, cpu, 2), w, &g));
  CHECK(g.rows == 1);
  CHECK(g.n == 48);
  CHECK(g.k == 64);
  CHECK(g.ldw == 64);
  // Up to kGemvMaxRows rows, folded over leading dims; one more is cuBLASLt's.
  CHECK(takes(rand_tensor({2, 4, 64}, DType::f16, cpu, 3), w, &g));
  CHECK(g.rows == 8);
  CHECK_FALSE(takes(rand_tensor({9, 64}, DType::f16, cpu, 4), w));
  // The last position of [2, 5, 64]: two rows 320 elements apart.
  const Tensor seq = rand_tensor({2, 5, 64}, DType::f16, cpu, 5);
  REQUIRE(takes(seq.slice(1, 4, 5, 1), w, &g));
  CHECK(g.rows == 2);
  CHECK(g.ldx == 320);
  // Rows that do not fold to one stride (permuted leading dims).
  CHECK_FALSE(takes(rand_tensor({5, 2, 64}, DType::f16, cpu, 6).permute({1, 0, 2}), w));
  // K not a whole number of 16-byte loads in f16 (36 x 2 bytes), but in f32.
  CHECK_FALSE(takes(rand_tensor({1, 36}, DType::f16, cpu, 7), rand_tensor({8, 36}, DType::f16, cpu, 8)));
  CHECK(takes(rand_tensor({1, 36}, DType::f32, cpu, 9), rand_tensor({8, 36}, DType::f32, cpu, 10)));
  // x starting off a 16-byte boundary (a slice one element in).
  CHECK_FALSE(takes(rand_tensor({1, 72}, DType::f16, cpu, 11).slice(1, 1, 65, 1), w));
  // A weight stored [K, N] (matmul's b, not linear's): its columns are not read along K.
  const Tensor kn = rand_tensor({64, 48}, DType::f16, cpu, 12);
  const cud::MatView b{kn.impl()->data(), kn.shape(), kn.strides()};
  const Tensor x1 = rand_tensor({1, 64}, DType::f16, cpu, 13);
  CHECK_FALSE(cud::gemv_args_for(cud::view_of(x1), b, cud::OutView{nullptr, Shape{1, 48}, DType::f16, cpu}, &g));
  // i32 is no dtype of it.
  CHECK_FALSE(takes(rand_tensor({1, 64}, DType::i32, cpu, 14, 0, 5), rand_tensor({48, 64}, DType::i32, cpu, 15, 0, 5)));
  // LIVEFUSE_GEMV=0: cuBLASLt for every product.
  const livefuse::Config saved = livefuse::config();
  livefuse::Config off = saved;
  off.gemv = false;
  livefuse::set_config_for_testing(off);
  CHECK_FALSE(takes(rand_tensor({1, 64}, DType::f16, cpu, 16), w));
  livefuse::set_config_for_testing(saved);
}

TEST_CASE("gemv routing: what the kernel's arguments may not combine") {
  const Device cpu = Device::cpu();
  const Tensor w = rand_tensor({48, 64}, DType::bf16, cpu, 21);
  cu::GemvArgs g;
  REQUIRE(takes(rand_tensor({1, 64}, DType::bf16, cpu, 22), w, &g));
  CHECK(cu::gemv_supported(g));
  cu::GemvArgs t = g;
  t.residual = g.w, t.act = cu::GemvAct::gelu_tanh;  // an activation after the residual: never
  CHECK_FALSE(cu::gemv_supported(t));
  t = g;
  t.norm = cu::GemvNorm::rms, t.norm_b = g.w;  // rms_norm has no shift
  CHECK_FALSE(cu::gemv_supported(t));
  t = g;
  t.norm = cu::GemvNorm::layer, t.norm_w = static_cast<const char*>(g.w) + 2;  // misaligned scale
  CHECK_FALSE(cu::gemv_supported(t));
  t = g;
  t.parts = 2, t.begin[1] = 16, t.begin[2] = 40;  // the parts must cover the 48 columns
  CHECK_FALSE(cu::gemv_supported(t));
  t.begin[2] = 48;
  CHECK(cu::gemv_supported(t));
  t.residual = g.w;  // split outputs take no residual
  CHECK_FALSE(cu::gemv_supported(t));
}

TEST_CASE("gemv routing: a norm's rows fit the block's shared memory beside its static arrays") {
  // The normalized rows live in dynamic shared memory, at most 48 KB a block by default together
  // with the kernel's own arrays: 8 rows of 3072 f16 (exactly 48 KB) once passed this check and
  // then failed to launch ("invalid argument"). Now they are refused (the norm runs as its own
  // kernel); 8 rows of 2048 and 2 rows of 3072 still fit.
  const Device cpu = Device::cpu();
  const auto with_norm = [&](int rows, int64_t k) {
    const Tensor w = rand_tensor({64, k}, DType::f16, cpu, 31);
    cu::GemvArgs g;
    REQUIRE(takes(rand_tensor({rows, k}, DType::f16, cpu, 32), w, &g));
    g.norm = cu::GemvNorm::layer;
    return cu::gemv_supported(g);
  };
  CHECK_FALSE(with_norm(8, 3072));
  CHECK(with_norm(8, 2048));
  CHECK(with_norm(2, 3072));
}
#endif
