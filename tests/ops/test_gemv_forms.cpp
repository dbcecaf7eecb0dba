// The GEMV's two forms (kernels/cuda/gemv.cu): the streaming form, the default, must give the
// bits the rounds form gives at the same split -- both add a row's products in one order -- for
// every row count, split, epilogue, norm, merged-output and batch case, with shapes whose row
// groups do not fill the last wave and rows whose chunks leave lanes idle. The rounds form is
// the one the op and planner suites checked against references before the streaming form; the
// linear suite (test_matmul.cpp) checks the default against a float64 reference. Needs a GPU.
#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/gemv.hpp"
#include "livefuse/config.hpp"
#include "tests/ops/ops_util.hpp"

namespace cu = livefuse::cuda;
using namespace opstest;

namespace {

struct Shape3 {
  int rows;
  int64_t n, k;
};

struct Extras {
  bool bias = false, residual = false, parts = false, round_first = false;
  cu::GemvAct act = cu::GemvAct::none;
  cu::GemvNorm norm = cu::GemvNorm::none;
  int64_t batch = 1;
  const char* name = "plain";
};

std::vector<uint8_t> host_bytes(const Tensor& t) {
  std::vector<uint8_t> b(static_cast<size_t>(t.numel()) * lf::dtype_size(t.dtype()));
  t.copy_to_host(b.data(), b.size());
  return b;
}

struct Inputs {
  Tensor x, w, bias, resid, gamma, beta;
  Inputs(const Shape3& s, DType t, int64_t batch, uint64_t seed) {
    const Device dev = Device::cuda(0);
    x = rand_tensor({batch, s.rows, s.k}, t, dev, seed, -1, 1);
    w = rand_tensor({batch, s.n, s.k}, t, dev, seed + 1, -0.5, 0.5);
    bias = rand_tensor({s.n}, t, dev, seed + 2, -1, 1);
    resid = rand_tensor({s.rows, s.n}, t, dev, seed + 3, -1, 1);
    gamma = rand_tensor({s.k}, t, dev, seed + 4, 0.5, 1.5);
    beta = rand_tensor({s.k}, t, dev, seed + 5, -0.5, 0.5);
  }
};

// Runs the product with the given form and split; returns every output's bytes.
std::vector<std::vector<uint8_t>> run(const Shape3& s, DType t, const Extras& e, const Inputs& in, bool stream,
                                      int split) {
  const Device dev = Device::cuda(0);
  const Tensor &x = in.x, &w = in.w, &bias = in.bias, &resid = in.resid, &gamma = in.gamma, &beta = in.beta;
  std::vector<Tensor> outs;
  cu::GemvArgs a;
  a.dtype = t;
  a.rows = s.rows;
  a.n = s.n;
  a.k = s.k;
  a.x = x.data_ptr();
  a.ldx = s.k;
  a.w = w.data_ptr();
  a.ldw = s.k;
  a.ldo = s.n;
  if (e.bias) a.bias = bias.data_ptr();
  if (e.residual) a.residual = resid.data_ptr();
  a.act = e.act;
  a.norm = e.norm;
  if (e.norm != cu::GemvNorm::none) {
    a.norm_w = gamma.data_ptr();
    if (e.norm == cu::GemvNorm::layer) a.norm_b = beta.data_ptr();
    a.eps = 1e-5f;
    a.norm_round_first = e.round_first;
  }
  if (e.parts) {  // three siblings of uneven widths
    const int64_t cut[4] = {0, s.n / 3, s.n / 3 + s.n / 4, s.n};
    a.parts = 3;
    for (int p = 0; p < 3; ++p) {
      outs.push_back(lf::full(Shape{s.rows, cut[p + 1] - cut[p]}, -1.0, t, dev));
      a.part_out[p] = outs.back().data_ptr();
      a.begin[p] = cut[p];
    }
    a.begin[3] = s.n;
  } else {
    outs.push_back(lf::full(Shape{e.batch, s.rows, s.n}, -1.0, t, dev));
    a.out = outs.back().data_ptr();
  }
  if (e.batch > 1) {
    a.batch = e.batch;
    a.x_bstride = s.rows * s.k;
    a.w_bstride = s.n * s.k;
    a.o_bstride = s.rows * s.n;
  }
  REQUIRE(cu::gemv_supported(a));
  lf::synchronize(dev);
  const lf::Config saved = lf::config();
  lf::Config c = saved;
  c.gemv_stream = stream;
  lf::set_config_for_testing(c);
  cu::set_gemv_split(split);
  cu::launch_gemv(a, nullptr);
  const cudaError_t err = cudaDeviceSynchronize();
  lf::set_config_for_testing(saved);
  cu::set_gemv_split(0);
  REQUIRE(err == cudaSuccess);
  std::vector<std::vector<uint8_t>> bytes;
  for (const Tensor& o : outs) bytes.push_back(host_bytes(o));
  return bytes;
}

}  // namespace

LF_CUDA_TEST_CASE("gemv forms: the streaming form gives the rounds form's bits at every split") {
  const std::vector<Shape3> shapes = {
      {1, 2304, 768},  // GPT-2's QKV: three rounds a row
      {1, 96, 3072},   // a short, wide weight: twelve rounds a row
      {2, 5, 1032},    // 129 chunks of 8 (f16): one lane's extra chunk, the rest idle
      {3, 1, 256},     // one output column: three of four warps without a row
      {4, 33, 24},     // K below one round
      {8, 300, 512},   // every lane of the epilogue busy
      {5, 9000, 64},   // tall: several row groups a block
      {1, 4100, 2048}, // more row groups than one wave of blocks, not a multiple of it
  };
  std::vector<Extras> extras(8);
  extras[1].bias = true;
  extras[1].act = cu::GemvAct::gelu_tanh;
  extras[1].name = "bias + gelu_tanh";
  extras[2].bias = true;
  extras[2].residual = true;
  extras[2].name = "bias + residual";
  extras[3].norm = cu::GemvNorm::layer;
  extras[3].bias = true;
  extras[3].name = "layer_norm first";
  extras[4].norm = cu::GemvNorm::rms;
  extras[4].act = cu::GemvAct::relu;
  extras[4].name = "rms_norm first + relu";
  extras[5].parts = true;
  extras[5].bias = true;
  extras[5].name = "three outputs";
  extras[6].batch = 3;
  extras[6].name = "batch of 3";
  extras[7].norm = cu::GemvNorm::rms;
  extras[7].round_first = true;
  extras[7].parts = true;
  extras[7].name = "Llama's norm chain first, three outputs";
  uint64_t seed = 7000;
  for (DType t : float_dtypes())
    for (const Shape3& s : shapes) {
      seed += 10;
      const Inputs one(s, t, 1, seed), three(s, t, 3, seed + 100);
      for (const Extras& e : extras) {
        if (e.parts && s.n < 4) continue;
        const Inputs& in = e.batch > 1 ? three : one;
        for (int split : {1, 2, 4}) {
          const auto want = run(s, t, e, in, false, split);
          const auto got = run(s, t, e, in, true, split);
          INFO(lf::dtype_name(t) << " rows " << s.rows << " n " << s.n << " k " << s.k << ", " << e.name << ", split "
                                 << split);
          REQUIRE(got.size() == want.size());
          for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == want[i]);
        }
      }
    }
  // The default split of each form, too: the streaming form's own choice, same bits run twice.
  const Shape3 s{1, 2048, 8192};
  const Inputs in(s, DType::bf16, 1, 1);
  CHECK(run(s, DType::bf16, extras[2], in, true, 0) == run(s, DType::bf16, extras[2], in, true, 0));
}
#endif  // LIVEFUSE_HAS_CUDA
