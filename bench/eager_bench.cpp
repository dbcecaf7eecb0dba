// livefuse-bench-eager: what one eager op costs.
//   eager_op_overhead     host time per lf::add on a small tensor, against a bare launch of the
//                         very kernel lf::add runs (CUDA) or a plain loop (CPU); the difference
//                         is what the runtime adds per op.
//   eager_elementwise_bw  large elementwise ops as achieved bandwidth (bytes read + written per
//                         second), and as a fraction of a measured device-to-device copy
//                         (cudaMemcpyAsync / memcpy, also counted read + write).
//   eager_row_bw          softmax / layer_norm / rms_norm, bytes read + written per second
//   linear                BERT-like shapes, f16 / bf16 / f32 (and f32 with TF32): median time
//                         and TFLOP/s.
// Device times come from CUDA events around batches of calls; every figure is a median.
// Usage: livefuse-bench-eager [--device cpu|cuda] [--json PATH] [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench/eager_bench_util.hpp"
#include "livefuse/livefuse.hpp"
#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime_api.h>

#include "kernels/backend.hpp"
#include "kernels/cuda/elementwise.hpp"
#endif

namespace {

using namespace eager_bench;

struct Bench {
  lf::Device dev;
  bool quick = false;
  std::vector<Record> out;
  std::string mode;

  void add(Record r) {
    r.tags.push_back({"device", dev.str()});
    r.tags.push_back({"mode", mode});
    print_record(r);
    out.push_back(std::move(r));
  }

  // ---- eager_op_overhead -----------------------------------------------------------------
  void op_overhead() {
    const int64_t n = 4096;
    lf::Tensor a = lf::rand_uniform({n}, 1, -1, 1, lf::DType::f32, dev);
    lf::Tensor b = lf::rand_uniform({n}, 2, -1, 1, lf::DType::f32, dev);
    const int reps = quick ? 10 : 50, batch = 200;
    const std::function<void()> eager_fn = [&] { lf::Tensor c = lf::add(a, b); };
    double eager = 0, bare = 0, backend_us = -1;
    std::string bare_name;
#if LIVEFUSE_HAS_CUDA
    if (dev.is_cuda()) {
      lf::Tensor c = lf::empty({n}, lf::DType::f32, dev);
      livefuse::cuda::BareLaunch bl;
      livefuse::cuda::make_bare_add_f32(bl, static_cast<const float*>(a.data_ptr()),
                                        static_cast<const float*>(b.data_ptr()),
                                        static_cast<float*>(c.data_ptr()), n);
      cudaStream_t s = static_cast<cudaStream_t>(lf::Stream::current(dev).handle());
      // The CUDA backend alone (plan + launch, output preallocated) splits the eager overhead
      // into the backend's share and the runtime's (validation, allocation, bookkeeping).
      livefuse::OpCall call;
      call.op = livefuse::OpId::add;
      call.inputs = {a, b};
      const std::vector<double> t = host_us_interleaved(
          dev, reps, batch,
          {eager_fn, [&] { BENCH_CUDA(cudaLaunchKernel(bl.fn, bl.grid, bl.block, bl.argv, 0, s)); },
           [&] { livefuse::cuda::run(call, std::span<const lf::Tensor>(&c, 1), s); }});
      eager = t[0], bare = t[1], backend_us = t[2];
      bare_name = "bare_launch";
      add({"eager_op_overhead",
           "cuda_backend_only",
           std::to_string(n),
           backend_us,
           {{"over_bare_us", backend_us - bare}},
           {}});
    }
#endif
    if (dev.is_cpu()) {
      std::vector<float> x(n, 1.0f), y(n, 2.0f), z(n);
      const std::vector<double> t = host_us_interleaved(dev, reps, batch, {eager_fn, [&] {
        for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
        asm volatile("" : : "r"(z.data()) : "memory");
      }});
      eager = t[0], bare = t[1];
      bare_name = "plain_loop";
    }
    const std::string size = std::to_string(n);
    add({"eager_op_overhead", "lf_add_f32", size, eager, {}, {}});
    add({"eager_op_overhead", bare_name, size, bare, {}, {}});
    Record ov{"eager_op_overhead",
              "overhead",
              size,
              eager - bare,
              {{"eager_us", eager}, {"bare_us", bare}},
              {}};
    if (backend_us >= 0) {
      ov.derived.push_back({"backend_share_us", backend_us - bare});
      ov.derived.push_back({"runtime_share_us", eager - backend_us});
    }
    add(ov);
  }

  // ---- eager_elementwise_bw ----------------------------------------------------------------
  double copy_bw_gbs(int64_t bytes) {
    double us = 0;
#if LIVEFUSE_HAS_CUDA
    if (dev.is_cuda()) {
      lf::Tensor src = lf::rand_uniform({bytes / 4}, 3, -1, 1, lf::DType::f32, dev);
      lf::Tensor dst = lf::empty({bytes / 4}, lf::DType::f32, dev);
      void* d = dst.data_ptr();
      const void* sp = src.data_ptr();
      cudaStream_t s = static_cast<cudaStream_t>(lf::Stream::current(dev).handle());
      us = device_us_per_call(dev, quick ? 5 : 15, 5, [&] {
        BENCH_CUDA(cudaMemcpyAsync(d, sp, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, s));
      });
    }
#endif
    if (dev.is_cpu()) {
      std::vector<char> src(bytes, 1), dst(bytes);
      us = host_us_per_call(dev, quick ? 3 : 9, 1, [&] {
        std::memcpy(dst.data(), src.data(), bytes);
        asm volatile("" : : "r"(dst.data()) : "memory");
      });
    }
    const double gbs = 2.0 * static_cast<double>(bytes) / (us * 1e3);
    add({"copy_bw",
         dev.is_cuda() ? "cudaMemcpyAsync_d2d" : "memcpy",
         std::to_string(bytes),
         us,
         {{"gbytes_per_s", gbs}},
         {}});
    return gbs;
  }

  double elementwise_bw() {
    const int64_t n = dev.is_cuda() ? (int64_t{1} << 26) : (int64_t{1} << 24);
    const double copy = copy_bw_gbs(n * 4);
    struct Case {
      const char* variant;
      lf::DType dt;
      int reads, writes;  // full-size tensors read and written
      std::function<lf::Tensor(const lf::Tensor&, const lf::Tensor&)> fn;
    };
    const std::vector<Case> cases = {
        {"add_f32", lf::DType::f32, 2, 1, [](auto& a, auto& b) { return lf::add(a, b); }},
        {"add_f16", lf::DType::f16, 2, 1, [](auto& a, auto& b) { return lf::add(a, b); }},
        {"add_bf16", lf::DType::bf16, 2, 1, [](auto& a, auto& b) { return lf::add(a, b); }},
        {"mul_scalar_f32", lf::DType::f32, 1, 1, [](auto& a, auto&) { return lf::mul(a, 0.5); }},
        {"gelu_f32", lf::DType::f32, 1, 1, [](auto& a, auto&) { return lf::gelu(a); }},
        {"gelu_f16", lf::DType::f16, 1, 1, [](auto& a, auto&) { return lf::gelu(a); }},
        {"silu_bf16", lf::DType::bf16, 1, 1, [](auto& a, auto&) { return lf::silu(a); }},
        {"where_f16", lf::DType::f16, 2, 1, [](auto& a, auto& b) { return lf::where(a, a, b); }},
    };
    for (const Case& c : cases) {
      // Every tensor holds as many bytes as the copy's: bandwidth grows with transfer size (on
      // the H200 a 128 MB copy runs ~9% below a 256 MB one), so a 2-byte op measured at the
      // f32 element count would be held against a copy of twice its bytes.
      const int64_t ne = n * 4 / static_cast<int64_t>(lf::dtype_size(c.dt));
      lf::Tensor a = lf::rand_uniform({ne}, 11, -2, 2, c.dt, dev);
      lf::Tensor b = lf::rand_uniform({ne}, 12, -2, 2, c.dt, dev);
      const double us = time_per_call(dev, quick ? 5 : 15, dev.is_cuda() ? 10 : 1,
                                      [&] { lf::Tensor y = c.fn(a, b); });
      const double bytes = static_cast<double>(ne) * lf::dtype_size(c.dt) * (c.reads + c.writes);
      const double gbs = bytes / (us * 1e3);
      add({"eager_elementwise_bw",
           c.variant,
           std::to_string(ne),
           us,
           {{"gbytes_per_s", gbs}, {"fraction_of_copy_bw", gbs / copy}},
           {}});
    }
    // A broadcast (bias-add) and a strided view take the general kernel: reported for contrast.
    {
      const int64_t cols = 1024, rows = n / cols;
      lf::Tensor x = lf::rand_uniform({rows, cols}, 13, -1, 1, lf::DType::f16, dev);
      lf::Tensor bias = lf::rand_uniform({cols}, 14, -1, 1, lf::DType::f16, dev);
      const double us = time_per_call(dev, quick ? 5 : 15, dev.is_cuda() ? 10 : 1,
                                      [&] { lf::Tensor y = lf::add(x, bias); });
      const double gbs = static_cast<double>(n) * 2 * 2 / (us * 1e3);
      add({"eager_elementwise_bw",
           "bias_add_f16_broadcast",
           std::to_string(n),
           us,
           {{"gbytes_per_s", gbs}, {"fraction_of_copy_bw", gbs / copy}},
           {}});
      lf::Tensor xt = lf::transpose(x, 0, 1);
      const double us2 = time_per_call(dev, quick ? 5 : 15, dev.is_cuda() ? 10 : 1,
                                       [&] { lf::Tensor y = lf::contiguous(xt); });
      const double gbs2 = static_cast<double>(n) * 2 * 2 / (us2 * 1e3);
      add({"eager_elementwise_bw",
           "transpose_copy_f16",
           std::to_string(n),
           us2,
           {{"gbytes_per_s", gbs2}, {"fraction_of_copy_bw", gbs2 / copy}},
           {}});
    }
    return copy;
  }

  // ---- row-wise ops (softmax, norms): bytes read + written per second -----------------------
  void row_bw(double copy) {
    const int64_t total = dev.is_cuda() ? (int64_t{1} << 26) : (int64_t{1} << 22);
    struct Case {
      const char* variant;
      int64_t n;  // row length
      bool mask;
      int op;  // 0 softmax, 1 layer_norm, 2 rms_norm
    };
    const std::vector<Case> cases = {{"softmax_f16_n512_mask", 512, true, 0},
                                     {"softmax_f16_n4096", 4096, false, 0},
                                     {"softmax_f16_n32768", 32768, false, 0},
                                     {"layer_norm_f16_n768", 768, false, 1},
                                     {"rms_norm_f16_n4096", 4096, false, 2}};
    for (const Case& c : cases) {
      const int64_t rows = total / c.n;
      lf::Tensor x = lf::rand_uniform({rows, c.n}, 31, -4, 4, lf::DType::f16, dev);
      lf::Tensor m = lf::rand_uniform({c.n}, 32, -1, 0, lf::DType::f16, dev);
      lf::Tensor w = lf::rand_uniform({c.n}, 33, 0.5, 1.5, lf::DType::f16, dev);
      lf::Tensor bias = lf::rand_uniform({c.n}, 34, -1, 1, lf::DType::f16, dev);
      const double us = time_per_call(dev, quick ? 5 : 15, dev.is_cuda() ? 10 : 1, [&] {
        lf::Tensor y = c.op == 0   ? lf::softmax(x, 0.125, c.mask ? m : lf::Tensor{})
                         : c.op == 1 ? lf::layer_norm(x, w, bias, 1e-5)
                                   : lf::rms_norm(x, w, 1e-6);
      });
      const double gbs = static_cast<double>(total) * 2 * 2 / (us * 1e3);
      add({"eager_row_bw",
           c.variant,
           std::to_string(rows) + "x" + std::to_string(c.n),
           us,
           {{"gbytes_per_s", gbs}, {"fraction_of_copy_bw", gbs / copy}},
           {}});
    }
  }

  // ---- linear ---------------------------------------------------------------------------
  void linear() {
    struct Shape3 {
      int64_t m, k, n;
    };
    // BERT-base at batch 32 x seq 128 (4096 tokens): QKV, attention out, FFN up, FFN down; and
    // one latency-bound shape (128 tokens).
    std::vector<Shape3> shapes = {{4096, 768, 2304},
                                  {4096, 768, 768},
                                  {4096, 768, 3072},
                                  {4096, 3072, 768},
                                  {128, 768, 3072}};
    if (dev.is_cpu()) shapes = {{128, 768, 768}, {128, 768, 3072}};
    struct V {
      const char* name;
      lf::DType dt;
      bool tf32;
    };
    std::vector<V> variants = {{"f16", lf::DType::f16, false},
                               {"bf16", lf::DType::bf16, false},
                               {"f32", lf::DType::f32, false},
                               {"f32_tf32", lf::DType::f32, true}};
    if (dev.is_cpu()) variants = {{"f32", lf::DType::f32, false}};
    for (const V& v : variants) {
      lf::set_allow_tf32(v.tf32);
      for (const Shape3& s : shapes) {
        lf::Tensor x = lf::rand_uniform({s.m, s.k}, 21, -1, 1, v.dt, dev);
        lf::Tensor w = lf::rand_uniform({s.n, s.k}, 22, -0.05, 0.05, v.dt, dev);
        lf::Tensor b = lf::rand_uniform({s.n}, 23, -1, 1, v.dt, dev);
        const double us = time_per_call(dev, quick ? 5 : 20, dev.is_cuda() ? 10 : 1,
                                        [&] { lf::Tensor y = lf::linear(x, w, b); });
        const double flop = 2.0 * s.m * s.k * s.n;
        const std::string size =
            std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n);
        add({"linear",
             v.name,
             size,
             us,
             {{"tflops", flop / (us * 1e6)},
              {"m", double(s.m)},
              {"k", double(s.k)},
              {"n", double(s.n)}},
             {}});
      }
    }
    lf::set_allow_tf32(false);
  }
};

void usage() {
  std::puts("usage: livefuse-bench-eager [--device cpu|cuda] [--json PATH] [--quick]");
}

}  // namespace

int main(int argc, char** argv) {
  std::string json, device;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--json" || a == "--device") && i + 1 < argc) {
      (a == "--json" ? json : device) = argv[++i];
    } else if (a == "--quick") {
      quick = true;
    } else {
      usage();
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  try {
    Bench b;
    b.dev = device.empty() ? lf::default_device() : lf::parse_device(device);
    b.quick = quick;
    b.mode = std::string(lf::mode_name(lf::config().mode));
    if (b.dev.is_cuda() && !lf::cuda_available())
      throw lf::Error("[bench] --device cuda but no GPU is available");
    std::printf("livefuse-bench-eager on %s (LIVEFUSE=%s)\n", b.dev.str().c_str(), b.mode.c_str());
    std::printf("%-22s %-22s %-22s %12s\n", "name", "variant", "size", "median_us");
    b.op_overhead();
    const double copy = b.elementwise_bw();
    b.row_bw(copy);
    b.linear();
    if (!json.empty()) {
      write_json(json, b.out);
      std::printf("wrote %zu records to %s\n", b.out.size(), json.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "livefuse-bench-eager: %s\n", e.what());
    return 1;
  }
  return 0;
}
