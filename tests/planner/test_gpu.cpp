// Fused kernels on the GPU against eager CUDA execution: every strategy and dtype, shapes other
// than the planned ones (the same kernel; a missing variant compiled on the arena), and eager
// custom ops through NVRTC. Skipped without a GPU.
#if LIVEFUSE_HAS_CUDA
#include <cuda_runtime.h>
#endif

#include <chrono>
#include <thread>

#include "kernels/jit/kernel_compiler.hpp"
#include "tests/planner/planner_util.hpp"

using namespace plantest;

namespace {

float gpu_cubic(float a, float b, float) { return a * a * a - b; }

struct Case {
  std::string name;
  Segment seg;
  int kernels;
  int norm_fold = -1;  // PlannerOptions::gemv_norm_fold to plan with (-1: the default options')
  // The dtype's tolerance times this: wide products over K 2048 whose outputs are sums of
  // sums (a gated pair's silu(gate) * up) meet f32's summation order in thousands of outputs.
  double tol_scale = 1;
};

std::vector<Case> cases(DType dt) {
  std::vector<Case> out;
  {
    SegmentBuilder b;
    const ValueRef x = b.input({100003}, dt), y = b.input({100003}, dt);
    ValueRef v = b.add(OpId::add, {x, y});
    for (OpId op : {OpId::sigmoid, OpId::tanh, OpId::silu, OpId::gelu, OpId::relu, OpId::exp, OpId::neg, OpId::abs, OpId::sqrt})
      v = b.add(op, {v});
    b.output(v);
    out.push_back({"chain", b.build(), 1});
  }
  {
    SegmentBuilder b;
    const ValueRef x = b.input({33, 65}, dt), bias = b.input({65}, dt), col = b.input({33, 1}, dt);
    const ValueRef a = b.add(OpId::add, {x, bias});
    const ValueRef c = b.add(OpId::maximum, {b.add(OpId::mul, {a, col}), x});
    const ValueRef w = b.add(OpId::where, {b.add(OpId::cast, {b.add(OpId::relu, {x})}, cast_attrs(DType::boolean)), c, a});
    b.output(w);
    b.output(b.add(OpId::cast, {b.scalar_op(OpId::mul, w, 10.0)}, cast_attrs(DType::i32)));
    out.push_back({"broadcast dag", b.build(), 1});
  }
  {
    SegmentBuilder b;
    const ValueRef x = b.input({7, 768}, dt), r = b.input({7, 768}, dt), w = b.input({768}, dt), bb = b.input({768}, dt);
    const ValueRef h = b.add(OpId::add, {x, r});
    b.output(h);
    b.output(b.add(OpId::gelu, {b.add(OpId::layer_norm, {h, w, bb}, norm_attrs(1e-5, 1, 1))}));
    out.push_back({"residual layer_norm gelu", b.build(), 1});
  }
  // Rows held in registers up to their capacity (8192 columns at 512 threads), with pack counts
  // that do not divide evenly among the threads; 4100 f16 columns take the one-column path.
  for (int64_t cols : {1032, 4100, 8192}) {
    SegmentBuilder b;
    const ValueRef x = b.input({3, cols}, dt), w = b.input({cols}, dt), bb = b.input({cols}, dt);
    b.output(b.add(OpId::layer_norm, {x, w, bb}, norm_attrs(1e-5, 1, 1)));
    out.push_back({"layer_norm " + std::to_string(cols), b.build(), 1});
  }
  for (int64_t cols : {5, 1000, 20000}) {
    SegmentBuilder b;
    const ValueRef s = b.input({2, 3, cols}, dt), m = b.input({1, 1, cols}, dt);
    b.output(b.add(OpId::softmax, {s, m}, softmax_attrs(0.125, true)));
    out.push_back({"softmax " + std::to_string(cols), b.build(), 1});
  }
  {
    SegmentBuilder b;
    const ValueRef x = b.input({9, 300}, dt), w = b.input({300}, dt);
    b.output(b.add(OpId::rms_norm, {x, w}, norm_attrs(1e-6, 1, 0)));
    const ValueRef s = b.add(OpId::sum, {x}, dim_attrs(-1, true));
    const ValueRef mx = b.add(OpId::max, {x}, dim_attrs(-1, true));
    b.output(b.add(OpId::div, {b.add(OpId::exp, {b.add(OpId::sub, {x, mx})}), s}));
    b.output(b.add(OpId::mean, {x}, dim_attrs(-1, false)));
    out.push_back({"rms_norm + reductions", b.build(), 3});
  }
  {
    SegmentBuilder b;
    const ValueRef x = b.input({40, 12}, dt);
    Attrs perm;
    perm.push_int(1);
    perm.push_int(0);
    const ValueRef t = b.add(OpId::permute, {x}, perm);
    b.output(b.add(OpId::add, {b.add(OpId::layer_norm, {t}, norm_attrs(1e-5, 0, 0)), b.add(OpId::mean, {t}, dim_attrs(-1, true))}));
    out.push_back({"strided rows", b.build(), 1});
  }
  {
    SegmentBuilder b;
    const ValueRef x = b.input({16, 32}, dt), w = b.input({24, 32}, dt), bias = b.input({24}, dt), z = b.input({1000}, dt);
    b.output(b.add(OpId::gelu_tanh, {b.add(OpId::linear, {x, w, bias}, linear_attrs(true))}));
    b.output(b.add(OpId::exp, {z}));
    b.output(b.add(OpId::tanh, {x}));
    out.push_back({"gemm tail + horizontal", b.build(), 2});  // GELU_BIAS epilogue + one horizontal launch
  }
  {
    // A batched matmul + bias add + relu: the RELU_BIAS epilogue on the folded GEMM.
    SegmentBuilder b;
    const ValueRef x = b.input({3, 16, 40}, dt), w = b.input({40, 24}, dt), bias = b.input({24}, dt);
    b.output(b.add(OpId::relu, {b.add(OpId::add, {b.add(OpId::matmul, {x, w}), bias})}));
    out.push_back({"matmul + bias + relu epilogue", b.build(), 1});
  }
  {
    // A layer's FFN2: linear + bias + the residual (read as cuBLASLt's C) in one launch; and a
    // batched matmul + residual.
    SegmentBuilder b;
    const ValueRef x = b.input({2, 16, 40}, dt), w = b.input({24, 40}, dt), bias = b.input({24}, dt);
    const ValueRef r = b.input({2, 16, 24}, dt);
    b.output(b.add(OpId::add, {r, b.add(OpId::linear, {x, w, bias}, linear_attrs(true))}));
    // 32 rows: f32 only; in f16/bf16 the add stays a tail kernel (pass_gemm_epilogue.cpp).
    const int launches = dt == DType::f32 ? 1 : 2;
    out.push_back({"linear + bias + residual epilogue", b.build(), launches});
    SegmentBuilder b2;
    const ValueRef x2 = b2.input({3, 16, 40}, dt), w2 = b2.input({40, 24}, dt), r2 = b2.input({3, 16, 24}, dt);
    b2.output(b2.add(OpId::add, {b2.add(OpId::matmul, {x2, w2}), r2}));
    out.push_back({"matmul + residual epilogue", b2.build(), launches});
  }
  {
    // A decode step's FFN2 (2 rows): the GEMV takes the residual in every dtype, one launch.
    SegmentBuilder b;
    const ValueRef x = b.input({2, 1, 64}, dt), w = b.input({40, 64}, dt), bias = b.input({40}, dt);
    const ValueRef r = b.input({2, 1, 40}, dt);
    b.output(b.add(OpId::add, {r, b.add(OpId::linear, {x, w, bias}, linear_attrs(true))}));
    out.push_back({"few-row linear + bias + residual (GEMV)", b.build(), 1});
  }
  {
    // A decode layer's MLP half, two rows: the residual adds on the GEMVs' epilogues, each
    // layer_norm in the prologue of the GEMV that reads it -- four launches for nine ops.
    SegmentBuilder b;
    const int64_t C = 64, F = 256;
    const ValueRef h = b.input({2, 1, C}, dt), a = b.input({2, 1, C}, dt);
    const ValueRef ow = b.input({C, C}, dt), ob = b.input({C}, dt), l2w = b.input({C}, dt), l2b = b.input({C}, dt);
    const ValueRef fw = b.input({F, C}, dt), fb = b.input({F}, dt), pw = b.input({C, F}, dt), pb = b.input({C}, dt);
    const ValueRef l1w = b.input({C}, dt), l1b = b.input({C}, dt), qw = b.input({3 * C, C}, dt), qb = b.input({3 * C}, dt);
    const ValueRef x = b.add(OpId::add, {h, b.add(OpId::linear, {a, ow, ob}, linear_attrs(true))});
    const ValueRef n2 = b.add(OpId::layer_norm, {x, l2w, l2b}, norm_attrs(1e-5, true, true));
    const ValueRef g = b.add(OpId::gelu_tanh, {b.add(OpId::linear, {n2, fw, fb}, linear_attrs(true))});
    const ValueRef y = b.add(OpId::add, {x, b.add(OpId::linear, {g, pw, pb}, linear_attrs(true))});
    b.output(y);
    b.output(b.add(OpId::linear, {b.add(OpId::layer_norm, {y, l1w, l1b}, norm_attrs(1e-5, true, true)), qw, qb},
                   linear_attrs(true)));
    out.push_back({"decode MLP half: GEMV prologues and epilogues", b.build(), 4});
    // rms_norm -> linear over 36 columns: planned with the norm in the GEMV; in f16/bf16 the GEMV
    // declines (36 is not a whole number of 16-byte loads) and the norm runs first.
    SegmentBuilder b2;
    const ValueRef x2 = b2.input({1, 36}, dt), w2 = b2.input({20, 36}, dt), lw2 = b2.input({36}, dt);
    b2.output(b2.add(OpId::linear, {b2.add(OpId::rms_norm, {x2, lw2}, norm_attrs(1e-6, true, false)), w2},
                     linear_attrs(false)));
    out.push_back({"rms_norm in a GEMV's prologue, or before it", b2.build(), 1});
  }
  {
    // Llama's norm chain (cast -> rms_norm -> cast -> mul by the weight; in f32 rms_norm -> mul)
    // in the prologue of merged Q/K/V's GEMV: one launch; and the same before one linear.
    for (bool merged : {true, false}) {
      SegmentBuilder b;
      const ValueRef x = b.input({1, 1, 256}, dt), lw = b.input({256}, dt);
      ValueRef n = b.add(OpId::rms_norm, {dt == DType::f32 ? x : b.add(OpId::cast, {x}, cast_attrs(DType::f32))},
                         norm_attrs(1e-6, false, false));
      if (dt != DType::f32) n = b.add(OpId::cast, {n}, cast_attrs(dt));
      n = b.add(OpId::mul, {n, lw});
      for (int64_t cols : merged ? std::vector<int64_t>{256, 64, 64} : std::vector<int64_t>{96})
        b.output(b.add(OpId::linear, {n, b.input({cols, 256}, dt)}, linear_attrs(false)));
      out.push_back({std::string("Llama norm chain in the GEMV's prologue") + (merged ? ", merged Q/K/V" : ""),
                     b.build(), 1, 2});
    }
  }
  {
    // A gated MLP's gate and up over few rows: one gated GEMV writes silu(gate) * up (operands
    // either way round, with and without the Llama norm chain in its prologue, biases or not);
    // gelu_tanh as the gate too. 3 rows: the GEMV's 4-row form with a row idle. Forms 4 and 5:
    // K long enough that two and four warps share a weight row (their sums meet in shared memory).
    // Form 6: the norm inside and more weight rows than a wave of blocks holds (the GEMV's
    // registers allow at most 12 blocks a SM), so each block takes several groups of rows, the
    // last one short. (The planner folds a norm while the outputs are at most 8 a column.)
    for (int form = 0; form < 7; ++form) {
      SegmentBuilder b;
      const int64_t C = form == 4 || form == 6 ? 2048 : form == 5 ? 4096 : 256;
      const int64_t F = form == 6 ? 8001 : form >= 4 ? 40 : 320;
      const bool norm = form == 1 || form == 3 || form == 6, bias = form == 2, swap = form == 3;
      const ValueRef x = b.input({3, 1, C}, dt);
      ValueRef in = x;
      if (norm) {
        const ValueRef lw = b.input({C}, dt);
        in = b.add(OpId::rms_norm, {dt == DType::f32 ? x : b.add(OpId::cast, {x}, cast_attrs(DType::f32))},
                   norm_attrs(1e-6, false, false));
        if (dt != DType::f32) in = b.add(OpId::cast, {in}, cast_attrs(dt));
        in = b.add(OpId::mul, {in, lw});
      }
      const auto linear = [&](const ValueRef& v) {
        std::vector<ValueRef> ins{v, b.input({F, C}, dt)};
        if (bias) ins.push_back(b.input({F}, dt));
        return b.add(OpId::linear, ins, linear_attrs(bias));
      };
      const ValueRef up0 = swap ? linear(in) : ValueRef{};  // up first: the gate is the second sibling
      const ValueRef gate = linear(in);
      const ValueRef up = swap ? up0 : linear(in);
      const ValueRef act = b.add(form == 2 ? OpId::gelu_tanh : OpId::silu, {gate});
      b.output(swap ? b.add(OpId::mul, {up, act}) : b.add(OpId::mul, {act, up}));
      out.push_back({"gated MLP as one GEMV (form " + std::to_string(form) + ")", b.build(), 1, norm ? 2 : -1,
                     form == 6 ? 10.0 : 1.0});
    }
  }
  // A norm inside the GEMV over row counts and widths that split a weight row over 1, 2 and 4
  // warps (the norm's sums then meet in shared memory).
  // 12002 weight rows at K 2048: more groups of rows than a wave of blocks can hold (at most 16
  // blocks of 4 warps a SM), as Llama's merged Q/K/V: each block normalizes once and takes
  // several groups, the last one short.
  for (int64_t rows : {1, 5})
    for (int64_t k : {64, 768, 2048, 4096}) {
      for (bool rms : {false, true}) {
        SegmentBuilder b;
        const int64_t cols = k == 2048 ? 12002 : 72;
        const ValueRef x = b.input({rows, k}, dt), w = b.input({cols, k}, dt), bias = b.input({cols}, dt);
        const ValueRef g = b.input({k}, dt), sh = b.input({k}, dt);
        const ValueRef n = rms ? b.add(OpId::rms_norm, {x, g}, norm_attrs(1e-6, true, false))
                               : b.add(OpId::layer_norm, {x, g, sh}, norm_attrs(1e-5, true, true));
        b.output(b.add(OpId::linear, {n, w, bias}, linear_attrs(true)));
        out.push_back({std::string(rms ? "rms_norm" : "layer_norm") + " -> linear " + std::to_string(rows) +
                           "x" + std::to_string(k) + " to " + std::to_string(cols),
                       b.build(), 1, -1, cols > 72 ? 10.0 : 1.0});
      }
    }
  return out;
}

std::vector<Tensor> to_gpu(const std::vector<Tensor>& xs) {
  std::vector<Tensor> g;
  for (const Tensor& t : xs) g.push_back(t.to(Device::cuda(0)));
  return g;
}

void check_gpu(const Segment& seg, const std::vector<Tensor>& xs_cpu, double tol, int kernels = -1,
               int norm_fold = -1) {
  PlannerOptions o = default_planner_options(Device::cuda(0));
  if (norm_fold >= 0) o.gemv_norm_fold = norm_fold;
  PlannedSegment p = plan_segment(seg, o);
  INFO(p.describe());
  CHECK(compile_plan(p, jit::KernelCompiler::global(), jit::default_compile_options()) == 0);
  if (kernels >= 0) CHECK(p.num_kernels() == kernels);
  const std::vector<Tensor> xs = to_gpu(xs_cpu);
  const std::vector<Tensor> want = eager_values(seg, xs);
  const std::vector<Tensor> want_cpu = eager_values(seg, xs_cpu);
  const std::vector<Tensor> got = poisoned_values(p, xs);
  run_plan(p, got, Stream::current(Device::cuda(0)).handle());
  synchronize(Device::cuda(0));
  for (const ValueRef& r : seg.outputs) {
    const int v = seg.value_id(r);
    size_t bad = 0;
    const auto g = got[v].to_doubles(), w = want[v].to_doubles();
    INFO("output " << v << " " << dtype_name(seg.dtype(r)) << seg.shape(r).str());
    // The reference is the CPU eager backend (checked against float64 by the ops suite); the
    // CUDA eager result is compared too and a disagreement reported, not failed on.
    const auto wc = want_cpu[v].to_doubles();
    size_t bad_cpu = 0, bad_eager = 0;
    const bool ok_cpu = lftest::allclose(g, wc, tol, tol, &bad_cpu);
    CHECK_MESSAGE(ok_cpu, "fused CUDA vs CPU eager: first mismatch at " << bad_cpu << ": got "
                                                                     << (bad_cpu < g.size() ? g[bad_cpu] : 0) << " want "
                                                                     << (bad_cpu < wc.size() ? wc[bad_cpu] : 0));
    if (!lftest::allclose(g, w, tol, tol, &bad)) {
      const bool eager_agree = lftest::allclose(w, wc, tol, tol, &bad_eager);
      WARN_MESSAGE(eager_agree, "CUDA eager disagrees with CPU eager at " << bad_eager << " (" << w[bad_eager] << " vs "
                                                                         << wc[bad_eager] << "); fused CUDA got "
                                                                         << g[bad_eager]);
    }
  }
}

}  // namespace

LF_CUDA_TEST_CASE("gpu: every strategy and dtype matches eager CUDA") {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (const Case& c : cases(dt)) {
      INFO(c.name << " " << dtype_name(dt));
      const double tol = (dt == DType::f32 ? 1e-4 : lftest::tolerance(dt) * 4) * c.tol_scale;
      check_gpu(c.seg, random_externals(c.seg, 9), tol, c.kernels, c.norm_fold);
    }
  }
}

// A few-row product's fused epilogue (the GEMV's) rounds as eager's ops do one after another, so
// a decode step gives eager's bits with fusion on -- in f16 and bf16 too, where cuBLASLt's one
// rounding would differ (gemv.hpp). Each case plans one launch and is compared bit for bit.
LF_CUDA_TEST_CASE("gpu: few-row GEMM epilogues give eager's bits") {
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int64_t rows : {1, 3, 8}) {
      SegmentBuilder b;
      const ValueRef x = b.input({rows, 128}, dt), w = b.input({72, 128}, dt), bias = b.input({72}, dt);
      const ValueRef r = b.input({rows, 72}, dt);
      const ValueRef y = b.add(OpId::linear, {x, w, bias}, linear_attrs(true));
      b.output(b.add(OpId::add, {y, r}));
      SegmentBuilder b2;
      const ValueRef x2 = b2.input({rows, 128}, dt), w2 = b2.input({72, 128}, dt), bias2 = b2.input({72}, dt);
      b2.output(b2.add(OpId::gelu_tanh, {b2.add(OpId::linear, {x2, w2, bias2}, linear_attrs(true))}));
      for (const Segment& seg : {b.build(), b2.build()}) {
        PlannedSegment p = plan_segment(seg, default_planner_options(Device::cuda(0)));
        INFO(dtype_name(dt) << " rows " << rows << "\n" << p.describe());
        REQUIRE(compile_plan(p, jit::KernelCompiler::global(), jit::default_compile_options()) == 0);
        CHECK(p.num_kernels() == 1);
        const std::vector<Tensor> xs = to_gpu(random_externals(seg, 11));
        const std::vector<Tensor> want = eager_values(seg, xs);
        const std::vector<Tensor> got = poisoned_values(p, xs);
        run_plan(p, got, Stream::current(Device::cuda(0)).handle());
        synchronize(Device::cuda(0));
        const int v = seg.value_id(seg.outputs[0]);
        const auto g = got[v].to_doubles(), e = want[v].to_doubles();
        size_t differ = 0;
        for (size_t i = 0; i < g.size(); ++i) differ += g[i] != e[i];
        CHECK_MESSAGE(differ == 0, differ << " of " << g.size() << " values differ from eager's");
      }
    }
}

LF_CUDA_TEST_CASE("gpu: integer chains, casts and custom ops") {
  const CustomOp op = register_elementwise("gpu_cubic", 2, "a * a * a - b", gpu_cubic);
  SegmentBuilder b;
  const ValueRef i = b.input({5, 37}, DType::i32), j = b.input({37}, DType::i32), k = b.input({5, 37}, DType::i64);
  const ValueRef x = b.input({5, 37});
  const ValueRef q = b.add(OpId::div, {b.scalar_op(OpId::mul, b.add(OpId::add, {i, j}), 3), j});
  const ValueRef s64 = b.add(OpId::add, {b.add(OpId::cast, {q}, cast_attrs(DType::i64)), k});
  Attrs ca;
  ca.custom_id = op.id();
  const ValueRef c = b.add(OpId::custom, {x, b.add(OpId::cast, {s64}, cast_attrs(DType::f32))}, ca);
  b.output(s64);
  b.output(b.add(OpId::cast, {c}, cast_attrs(DType::i32)));
  b.output(c);
  check_gpu(b.build(), random_externals(b.segment(), 4), 1e-5, 1);
  // Eager CUDA execution of the custom op alone (NVRTC through launch_custom_eager).
  const Tensor xc = rand_uniform({1000}, 1, -2, 2, DType::f32, Device::cpu());
  const Tensor yc = rand_uniform({1000}, 2, -2, 2, DType::f32, Device::cpu());
  const Tensor want = op(xc, yc);
  const Tensor got = op(xc.to(Device::cuda(0)), yc.to(Device::cuda(0)));
  CHECK(lftest::allclose(got.to_doubles(), want.to_doubles(), 1e-6, 1e-6));
}

LF_CUDA_TEST_CASE("gpu: one kernel serves other shapes; a missing variant is compiled off the caller's thread") {
  SegmentBuilder b;
  const ValueRef x = b.input({1000}), y = b.input({1000});
  b.output(b.add(OpId::tanh, {b.add(OpId::mul, {x, y})}));
  const Segment seg = b.build();
  PlannedSegment p = plan_segment(seg, default_planner_options(Device::cuda(0)));
  REQUIRE(compile_plan(p, jit::KernelCompiler::global(), jit::default_compile_options()) == 0);
  const auto& fk = std::get<FusedKernelStep>(p.steps.at(0).body);
  const auto first = fk.compiled;
  int declined = 0;  // launches that found their variant compiling (the window then runs eagerly)
  for (auto [nx, ny] : {std::pair<int64_t, int64_t>{777, 777}, {5000, 5000}, {4096, 1}}) {
    const Tensor xs = rand_uniform({nx}, 1, -1, 1, DType::f32, Device::cuda(0));
    const Tensor ys = rand_uniform({ny}, 2, -1, 1, DType::f32, Device::cuda(0));
    const std::vector<Tensor> vals = bind_values(p, {xs, ys});
    for (int tries = 0;; ++tries) {
      try {
        run_plan(p, vals, Stream::current(Device::cuda(0)).handle());
        break;
      } catch (const KernelNotReady&) {
        ++declined;
        REQUIRE(tries < 3000);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    const Tensor want = lf::tanh(lf::mul(xs, ys));
    INFO(nx << " x " << ny);
    CHECK(lftest::allclose(vals[seg.value_id(seg.outputs[0])].to_doubles(), want.to_doubles(), 1e-6, 1e-6));
  }
  // 777 leaves a tail after the packs of 4: the vec variant with tail code was compiled; [4096] *
  // [1] broadcasts: the strided variant was compiled and swapped in.
  CHECK(fk.compiled != first);
  CHECK(fk.spec->variants == (jit::variant_bit(jit::Variant::VecExactI32) | jit::variant_bit(jit::Variant::VecI32) |
                              jit::variant_bit(jit::Variant::StridedI32)));
  CHECK(declined >= 2);  // never compiled on the caller's thread: each new variant declined first
}

#if LIVEFUSE_HAS_CUDA
LF_CUDA_TEST_CASE("gpu: a row launch shape times both bodies at its first launches and keeps the faster") {
  // layer_norm bf16 rows held in registers: both bodies rendered. Every launch must give the same
  // bits whichever body runs; after the timed launches the shape is decided, with both bodies'
  // medians, and the decision follows them (row_tuner.hpp).
  SegmentBuilder b;
  const ValueRef x = b.input({4096, 1024}, DType::bf16), w = b.input({1024}, DType::bf16), bb = b.input({1024}, DType::bf16);
  b.output(b.add(OpId::layer_norm, {x, w, bb}, norm_attrs(1e-5, 1, 1)));
  const Segment seg = b.build();
  PlannedSegment p = plan_segment(seg, default_planner_options(Device::cuda(0)));
  REQUIRE(compile_plan(p, jit::KernelCompiler::global(), jit::default_compile_options()) == 0);
  const auto& fk = std::get<FusedKernelStep>(p.steps.at(0).body);
  const size_t shapes_before = fk.compiled->row_body_choices().size();
  const Device dev = Device::cuda(0);
  const std::vector<Tensor> xs = {rand_uniform({4096, 1024}, 1, -2, 2, DType::bf16, dev),
                                  rand_uniform({1024}, 2, 0.5, 1.5, DType::bf16, dev),
                                  rand_uniform({1024}, 3, -0.5, 0.5, DType::bf16, dev)};
  const std::vector<Tensor> vals = bind_values(p, xs);
  const int out = seg.value_id(seg.outputs[0]);
  std::vector<double> first;
  for (int run = 0; run < 16; ++run) {
    run_plan(p, vals, Stream::current(dev).handle());
    synchronize(dev);
    const std::vector<double> got = vals[out].to_doubles();
    if (run == 0) first = got;
    INFO("run " << run);
    CHECK(got == first);
  }
  CHECK(lftest::allclose(first, eager_values(seg, xs)[out].to_doubles(), 2e-2, 2e-2));
  const auto choices = fk.compiled->row_body_choices();
  REQUIRE(choices.size() == shapes_before + 1);
  const auto& c = choices.back();
  CHECK(c.decided);
  CHECK(c.plain_us > 0);
  CHECK(c.pipelined_us > 0);
  const bool other_faster = (c.guess ? c.plain_us : c.pipelined_us) < 0.98 * (c.guess ? c.pipelined_us : c.plain_us);
  CHECK(c.pipelined == (other_faster ? !c.guess : c.guess));
  CHECK(c.describe().find(", timed ") != std::string::npos);  // the inspection report's line
  const std::string guessed = c.guess ? "pipelined" : "plain", kept = c.pipelined ? "pipelined" : "plain";
  MESSAGE("layer_norm bf16 4096x1024: plain " << c.plain_us << " us, pipelined " << c.pipelined_us << " us, guess "
                                              << guessed << ", kept " << kept);

  // A launch captured into a graph is not timed (its shape stays undecided: 4x the rows is
  // another shape), and the graph gives the same values. Captures here are in global mode, the
  // strictest: reading an earlier launch's timing while this thread captures must not break it.
  const std::vector<Tensor> big = {rand_uniform({16384, 1024}, 4, -2, 2, DType::bf16, dev), xs[1], xs[2]};
  const std::vector<Tensor> bvals = poisoned_values(p, big);  // allocated now, not in the capture
  const std::vector<double> want_big = eager_values(seg, big)[out].to_doubles();
  synchronize(dev);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  struct EndCapture {  // a throw inside the capture must not leave this thread capturing
    cudaStream_t s;
    cudaGraph_t* g;
    ~EndCapture() {
      cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(s, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) {
        if (cudaStreamEndCapture(s, g) != cudaSuccess) *g = nullptr;
      }
    }
  };
  auto captured_run = [&] {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    {
      EndCapture end{s, &g};
      run_plan(p, bvals, s);
    }
    REQUIRE(g != nullptr);
    REQUIRE(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(ge, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    CHECK(lftest::allclose(bvals[out].to_doubles(), want_big, 2e-2, 2e-2));
  };
  captured_run();
  auto after = fk.compiled->row_body_choices();
  REQUIRE(after.size() == choices.size() + 1);
  CHECK_FALSE(after.back().decided);
  CHECK(after.back().plain_us == 0);
  CHECK(after.back().pipelined_us == 0);
  // Two launches outside a capture (the cold one, then a timed one, not waited for), then a
  // capture whose launch reads that timing.
  run_plan(p, bvals, s);
  run_plan(p, bvals, s);
  captured_run();
  after = fk.compiled->row_body_choices();
  CHECK_FALSE(after.back().decided);
  CHECK((after.back().plain_us > 0) + (after.back().pipelined_us > 0) <= 1);
  cudaStreamDestroy(s);
}
#endif
