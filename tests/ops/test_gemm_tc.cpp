// livefuse's tensor-core GEMM (kernels/cuda/gemm_tc.hpp, cuda::run_linear_tc; LIVEFUSE_GEMM_TC=1
// and, for f32's three TF32 products, LIVEFUSE_GEMM_F32X3=1, set here): a linear with its bias
// and an activation, or sibling linears written as their own dense outputs, against eager's
// linear (cuBLASLt) then activation kernel -- to the dtype's tolerance, since the two sum in
// different orders -- and the same bits on every run (f32's K splits included). Which
// calls it refuses (the caller then runs cuBLASLt) is host logic and runs on any machine the
// CUDA backend builds on.
#if LIVEFUSE_HAS_CUDA
#include <optional>
#include <string>
#include <vector>

#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/gemv.hpp"
#include "livefuse/config.hpp"
#include "livefuse/ops.hpp"
#include "livefuse/stream.hpp"
#include "tests/ops/ops_util.hpp"

using namespace opstest;
namespace cu = livefuse::cuda;
using livefuse::OpCall;
using livefuse::OpId;

namespace {

OpCall linear_call(const Tensor& x, const Tensor& w, const Tensor& b) {
  OpCall c;
  c.op = OpId::linear;
  c.inputs = {x, w};
  if (b.defined()) c.inputs.push_back(b);
  c.attrs.push_int(b.defined() ? 1 : 0);
  c.attrs.push_int(0);  // no tf32
  return c;
}

Tensor activated(const Tensor& y, cu::TcAct act) {
  switch (act) {
    case cu::TcAct::relu: return lf::relu(y);
    case cu::TcAct::gelu: return lf::gelu(y);
    case cu::TcAct::gelu_tanh: return lf::gelu_tanh(y);
    case cu::TcAct::silu: return lf::silu(y);
    default: return y;
  }
}

void check_near(const Tensor& got, const Tensor& want, DType dt, const std::string& what) {
  INFO(what);
  size_t at = 0;
  double scale = 0;
  const std::vector<double> g = got.to_doubles(), w = want.to_doubles();
  const bool ok = lftest::close_to_scale(g, w, 2 * lftest::tolerance(dt), &at, &scale);
  INFO("worst at " << at << ": got " << g[at] << ", want " << w[at] << " (largest |want| " << scale << ")");
  CHECK(ok);
}

}  // namespace

LF_CUDA_TEST_CASE("gemm_tc: a linear with its bias and activation gives eager's values, the same bits every run") {
  const lftest::ScopedConfig tc_on(&livefuse::Config::gemm_tc, true);
  const lftest::ScopedConfig f32_on(&livefuse::Config::gemm_f32x3, true);
  const Device d = Device::cuda(0);
  // Eager's stream: the inputs are written there, and the outputs read back after it.
  void* const st = livefuse::Stream::current(d).handle();
  struct Case {
    int64_t m, k, n;
    cu::TcAct act;
    bool bias;
  };
  // BERT's FFN1 at batch 1 (128 rows: 32-row tiles) and 8 (1024: 64-row tiles), rows that are no
  // multiple of a tile, one row, K over many ring slots, no bias; f32: BERT's output projection
  // and FFN2 at 128 rows (48 tiles: K split 2 ways and more, partials summed by the last split).
  const Case cases[] = {{128, 768, 3072, cu::TcAct::gelu, true}, {1024, 768, 3072, cu::TcAct::gelu, true},
                        {77, 128, 192, cu::TcAct::silu, true},   {1, 64, 64, cu::TcAct::none, true},
                        {300, 1024, 128, cu::TcAct::relu, false}, {65, 192, 256, cu::TcAct::gelu_tanh, true},
                        {128, 768, 768, cu::TcAct::none, true},   {128, 3072, 768, cu::TcAct::none, true}};
  for (DType dt : {DType::f16, DType::bf16, DType::f32})
    for (const Case& c : cases) {
      const std::string what = std::string(lf::dtype_name(dt)) + " " + std::to_string(c.m) + "x" +
                               std::to_string(c.k) + "->" + std::to_string(c.n) + " act " +
                               std::to_string(static_cast<int>(c.act));
      const Tensor x = rand_tensor({c.m, c.k}, dt, d, 1, -1, 1);
      const Tensor w = rand_tensor({c.n, c.k}, dt, d, 2, -0.1, 0.1);
      const Tensor b = c.bias ? rand_tensor({c.n}, dt, d, 3, -0.5, 0.5) : Tensor{};
      const Tensor want = activated(lf::linear(x, w, b), c.act);
      Tensor got = lf::empty({c.m, c.n}, dt, d);
      REQUIRE_MESSAGE(cu::run_linear_tc(linear_call(x, w, b), c.act, std::span<const Tensor>(&got, 1), st), what);
      check_near(got, want, dt, what);
      Tensor again = lf::empty({c.m, c.n}, dt, d);
      REQUIRE(cu::run_linear_tc(linear_call(x, w, b), c.act, std::span<const Tensor>(&again, 1), st));
      CHECK_MESSAGE(got.to_doubles() == again.to_doubles(), what);
    }
}

LF_CUDA_TEST_CASE("gemm_tc: merged siblings each get their dense output, wherever it lives") {
  const lftest::ScopedConfig tc_on(&livefuse::Config::gemm_tc, true);
  const lftest::ScopedConfig f32_on(&livefuse::Config::gemm_f32x3, true);
  const Device d = Device::cuda(0);
  void* const st = livefuse::Stream::current(d).handle();
  for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
    // Q / K / V of a 128-token BERT-shaped layer, narrowed: 3 siblings of 192 columns over K 256.
    const int64_t m = 128, k = 256, width = 192;
    const Tensor x = rand_tensor({2, m / 2, k}, dt, d, 4, -1, 1);  // leading dims fold into rows
    const Tensor w = rand_tensor({3 * width, k}, dt, d, 5, -0.1, 0.1);
    const Tensor b = rand_tensor({3 * width}, dt, d, 6, -0.5, 0.5);
    // Separate allocations, not evenly spaced: the batched cuBLASLt call could not take them.
    std::vector<Tensor> outs = {lf::empty({2, m / 2, width}, dt, d), lf::empty({2, m / 2, width}, dt, d),
                                lf::empty({2, m / 2, width}, dt, d)};
    REQUIRE(cu::run_linear_tc(linear_call(x, w, b), cu::TcAct::none, outs, st));
    for (int i = 0; i < 3; ++i) {
      const Tensor want = lf::linear(x, w.slice(0, i * width, (i + 1) * width).contiguous(),
                                     b.slice(0, i * width, (i + 1) * width).contiguous());
      check_near(outs[static_cast<size_t>(i)], want, dt, std::string(lf::dtype_name(dt)) + " sibling " + std::to_string(i));
    }
  }
}

LF_CUDA_TEST_CASE("gemm_tc: weights loaded before the PDL wait give the same bits as after it") {
  // What a plan's GEMM step does inside an EarlyWeightsScope (planner/early_reads.cpp): the first
  // weight tiles are on their way before griddepcontrol.wait, while the kernel before it (here
  // the eager add that writes x) may still run.
  const lftest::ScopedConfig tc_on(&livefuse::Config::gemm_tc, true);
  const Device d = Device::cuda(0);
  void* const st = livefuse::Stream::current(d).handle();
  for (DType dt : {DType::f16, DType::bf16})
    for (const int64_t k : {768, 3072}) {  // unsplit, and K split four ways
      const Tensor x0 = rand_tensor({128, k}, dt, d, 21, -1, 1);
      const Tensor w = rand_tensor({768, k}, dt, d, 22, -0.1, 0.1);
      const Tensor b = rand_tensor({768}, dt, d, 23, -0.5, 0.5);
      Tensor late = lf::empty({128, 768}, dt, d), early = lf::empty({128, 768}, dt, d);
      const Tensor x = lf::add(x0, x0);  // written by the kernel just before
      REQUIRE(cu::run_linear_tc(linear_call(x, w, b), cu::TcAct::gelu, std::span<const Tensor>(&late, 1), st));
      {
        const cu::EarlyWeightsScope scope(true);
        const Tensor x2 = lf::add(x0, x0);
        REQUIRE(cu::run_linear_tc(linear_call(x2, w, b), cu::TcAct::gelu, std::span<const Tensor>(&early, 1), st));
      }
      const std::string what = std::string(lf::dtype_name(dt)) + " K " + std::to_string(k);
      CHECK_MESSAGE(late.to_doubles() == early.to_doubles(), what);
      check_near(early, lf::gelu(lf::linear(x, w, b)), dt, what);
    }
}

TEST_CASE("gemm_tc: how many ways K is split") {
  // BERT-base at 128 rows (32-row tiles, f16 steps of 64), room for 5 partial products.
  const auto splits = [](DType dt, int64_t tiles, int64_t steps) {
    return cu::gemm_tc_splits(dt, tiles, steps, 5, 4096);
  };
  CHECK(splits(DType::f16, 144, 12) == 1);  // Q/K/V
  CHECK(splits(DType::f16, 192, 12) == 1);  // FFN1
  CHECK(splits(DType::f16, 48, 12) == 1);   // output projection: few tiles, but a short K
  CHECK(splits(DType::f16, 48, 48) == 4);   // FFN2: K of 48 steps -> 4 x 12
  CHECK(splits(DType::f16, 4, 31) == 1);
  CHECK(splits(DType::f16, 4, 32) == 3);
  CHECK(splits(DType::f16, 2000, 200) == 5);  // long K, as far as the space holds partials
  CHECK(splits(DType::bf16, 1, 400) == 5);
  // f32 (3xTF32, steps of 32): about 24 steps a split, whatever the tiles.
  CHECK(splits(DType::f32, 48, 24) == 1);
  CHECK(splits(DType::f32, 48, 96) == 4);
  // Never past 8, the split space or the counters; one step cannot split.
  CHECK(cu::gemm_tc_splits(DType::f16, 1, 1000, 100, 4096) == 8);
  CHECK(cu::gemm_tc_splits(DType::f16, 48, 48, 1, 4096) == 1);
  CHECK(cu::gemm_tc_splits(DType::f16, 5000, 48, 8, 4096) == 1);
  CHECK(cu::gemm_tc_splits(DType::f16, 1, 1, 8, 4096) == 1);
}

TEST_CASE("gemm_tc: calls it does not take are left to cuBLASLt, nothing launched") {
  // Refused before any device is asked: host tensors stand in (only shapes, dtypes, addresses).
  // Each for its own reason, so with the kernel switched on.
  std::optional<lftest::ScopedConfig> tc_on(std::in_place, &livefuse::Config::gemm_tc, true);
  const Device cpu = Device::cpu();
  const auto refuses = [&](const Tensor& x, const Tensor& w, const Tensor& b, Shape out_shape, cu::TcAct act) {
    const Tensor out = lf::empty(out_shape, x.dtype(), cpu);
    return !cu::run_linear_tc(linear_call(x, w, b), act, std::span<const Tensor>(&out, 1), nullptr);
  };
  const Tensor x = rand_tensor({32, 128}, DType::f16, cpu, 7), w = rand_tensor({64, 128}, DType::f16, cpu, 8);
  // f32 with LIVEFUSE_GEMM_F32X3=0 (f16's switch says nothing for f32).
  CHECK(refuses(rand_tensor({32, 128}, DType::f32, cpu, 9), rand_tensor({64, 128}, DType::f32, cpu, 10), {}, {32, 64},
                cu::TcAct::gelu));
  // N not a whole number of 64-column tiles; K not of 64-element steps.
  CHECK(refuses(x, rand_tensor({96, 128}, DType::f16, cpu, 11), {}, {32, 96}, cu::TcAct::none));
  CHECK(refuses(rand_tensor({32, 96}, DType::f16, cpu, 12), rand_tensor({64, 96}, DType::f16, cpu, 13), {}, {32, 64},
                cu::TcAct::none));
  // x one element off a 16-byte boundary; a weight that is a view with strides.
  CHECK(refuses(rand_tensor({32, 136}, DType::f16, cpu, 14).slice(1, 1, 129, 1), w, {}, {32, 64}, cu::TcAct::none));
  CHECK(refuses(x, rand_tensor({128, 128}, DType::f16, cpu, 15).slice(0, 0, 128, 2), {}, {32, 64}, cu::TcAct::none));
  // Mixed dtypes; a bias of another dtype.
  CHECK(refuses(x, rand_tensor({64, 128}, DType::bf16, cpu, 16), {}, {32, 64}, cu::TcAct::none));
  CHECK(refuses(x, w, rand_tensor({64}, DType::f32, cpu, 17), {32, 64}, cu::TcAct::none));
  // Siblings whose widths do not add up to N.
  {
    std::vector<Tensor> outs = {lf::empty({32, 16}, DType::f16, cpu), lf::empty({32, 16}, DType::f16, cpu)};
    CHECK_FALSE(cu::run_linear_tc(linear_call(x, w, {}), cu::TcAct::none, outs, nullptr));
  }
  // f32 with LIVEFUSE_GEMM_F32X3=1: K not of 32-element steps.
  {
    const lftest::ScopedConfig f32_on(&livefuse::Config::gemm_f32x3, true);
    CHECK(refuses(rand_tensor({32, 48}, DType::f32, cpu, 18), rand_tensor({64, 48}, DType::f32, cpu, 19), {}, {32, 64},
                  cu::TcAct::none));
  }
  // LIVEFUSE_GEMM_TC=0 (the default).
  tc_on.reset();
  CHECK_FALSE(livefuse::config().gemm_tc);
  CHECK(refuses(x, w, {}, {32, 64}, cu::TcAct::none));
}

TEST_CASE("gemm_tc: the activation of an op") {
  CHECK(cu::tc_act_of(OpId::gelu) == cu::TcAct::gelu);
  CHECK(cu::tc_act_of(OpId::gelu_tanh) == cu::TcAct::gelu_tanh);
  CHECK(cu::tc_act_of(OpId::silu) == cu::TcAct::silu);
  CHECK(cu::tc_act_of(OpId::relu) == cu::TcAct::relu);
  CHECK(cu::tc_act_of(OpId::sigmoid) == cu::TcAct::none);
}
#endif
