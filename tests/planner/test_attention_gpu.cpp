// The fused attention template on CUDA (kernels/cuda/attention.cu): the same cases as the CPU
// suite (test_attention_cpu.cpp), against the CPU eager backend. Skipped without a GPU.
#include <algorithm>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>

#include "tests/planner/attention_cases.hpp"
#if LIVEFUSE_HAS_CUDA
#include "kernels/cuda/attention_kernels.hpp"
#include "kernels/cuda/device_info.hpp"
#endif

using namespace plantest;

namespace {

std::vector<Tensor> to_cuda(const std::vector<Tensor>& xs) {
  std::vector<Tensor> g;
  for (const Tensor& t : xs) g.push_back(t.to(Device::cuda(0)));
  return g;
}

// Plans `seg` for CUDA, runs it on `xs` (CPU tensors, copied over) and compares its outputs with
// CPU eager execution.
void check_cuda(const Segment& seg, const std::vector<Tensor>& xs, double tol) {
  PlannerOptions opts = default_planner_options(Device::cuda(0));
  // LIVEFUSE_ATTENTION=auto plans it on CUDA only where a fast kernel applies: every kernel is
  // tested here, the general one too.
  opts.attention = true;
  opts.attention_fast_only = false;
  PlannedSegment p = plan_segment(seg, opts);
  INFO(p.describe());
  REQUIRE(attention_step_of(p) != nullptr);
  CHECK(compile_plan(p, jit::KernelCompiler::global(), jit::default_compile_options()) == 0);
  CHECK(p.num_kernels() == 1);
  const std::vector<Tensor> want = eager_values(seg, xs);
  const std::vector<Tensor> got = poisoned_values(p, to_cuda(xs));
  run_plan(p, got, Stream::current(Device::cuda(0)).handle());
  synchronize(Device::cuda(0));
  for (const ValueRef& r : seg.outputs) {
    const int v = seg.value_id(r);
    const auto g = got[v].to_doubles(), w = want[v].to_doubles();
    size_t bad = 0;
    CHECK_MESSAGE(lftest::allclose(g, w, tol, tol, &bad),
                  "first mismatch at " << bad << ": got " << (bad < g.size() ? g[bad] : 0)
                                       << " want " << (bad < w.size() ? w[bad] : 0));
  }
}

// The plan of `seg` run on CUDA over `xs` (CPU tensors, copied over): its first output's values.
std::vector<double> cuda_output(const Segment& seg, const std::vector<Tensor>& xs) {
  PlannerOptions opts = default_planner_options(Device::cuda(0));
  opts.attention = true;
  opts.attention_fast_only = false;
  PlannedSegment p = plan_segment(seg, opts);
  REQUIRE(attention_step_of(p) != nullptr);
  CHECK(compile_plan(p, jit::KernelCompiler::global(), jit::default_compile_options()) == 0);
  const std::vector<Tensor> got = poisoned_values(p, to_cuda(xs));
  run_plan(p, got, Stream::current(Device::cuda(0)).handle());
  synchronize(Device::cuda(0));
  return got[seg.value_id(seg.outputs[0])].to_doubles();
}

// Runs `body` once for each of `values` set through `set` (a kernel's test switch, `what` it
// forces), the last value the default; back to 0 (the default) after.
template <class F>
void for_each_setting(void (*set)(int), std::initializer_list<int> values, const char* what, F&& body) {
  struct Reset {
    void (*set)(int);
    ~Reset() { set(0); }
  } reset{set};
  for (int v : values) {
    set(v);
    INFO(what << " forced to " << v << " (0: chosen by the grid)");
    body();
  }
}

// Runs `body` with the tensor-core kernel's keys in one group, split in two wherever it can
// (kernels/cuda/attention_mma.cu), and chosen by the grid; back to the default after.
template <class F>
void for_each_key_split(F&& body) {
#if LIVEFUSE_HAS_CUDA
  for_each_setting(livefuse::cuda::force_attention_key_groups, {1, 2, 0}, "key groups", body);
#else
  body();
#endif
}

// Runs `body` with the decode shapes on the tensor-core split-KV kernel (attention_mma_decode.cu),
// then on the streaming one (attention_decode_stream.cu, at every length; its splits meeting in a
// cluster where it takes one, then in the workspace only) and then on the FMA one
// (attention_decode.cu); back to the defaults after.
template <class F>
void for_each_decode_kernel(F&& body) {
#if LIVEFUSE_HAS_CUDA
  struct Reset {
    ~Reset() {
      livefuse::cuda::force_attention_decode_tc(-1);
      livefuse::cuda::force_attention_decode_stream(-1);
      livefuse::cuda::set_attention_decode_stream_cluster(-1);
    }
  } reset;
  enum Kernel { tc, stream, stream_workspace, fma };
  for (Kernel k : {tc, stream, stream_workspace, fma}) {
    const bool streaming = k == stream || k == stream_workspace;
    livefuse::cuda::force_attention_decode_tc(k == tc ? 1 : 0);
    livefuse::cuda::force_attention_decode_stream(streaming ? 1 : 0);
    livefuse::cuda::set_attention_decode_stream_cluster(k == stream_workspace ? 0 : -1);
    INFO((k == tc                 ? "decode on tensor cores"
          : k == stream           ? "decode on the streaming kernel"
          : k == stream_workspace ? "decode on the streaming kernel, splits meeting in the workspace"
                                  : "decode on the FMA kernel"));
    const auto before = livefuse::cuda::attention_launch_counts();
    body();
    // The plans' attention steps took the kernel asked for (the report's cuda.attention).
    const auto after = livefuse::cuda::attention_launch_counts();
    CHECK((after.decode_tc > before.decode_tc) == (k == tc));
    CHECK((after.decode_stream > before.decode_stream) == streaming);
  }
#else
  body();
#endif
}

// `s`'s attention on random inputs with its mask [sq, sk] (the same for every batch) set by
// `fill` from all zeros, against eager on the CPU -- rows of -inf, NaN scores.
void check_masked(const AttentionShape& s, uint64_t seed, const std::function<void(std::vector<float>&)>& fill) {
  const AttentionSegment a = attention_segment(s);
  std::vector<Tensor> xs = random_externals(a.seg, seed);
  std::vector<float> m(static_cast<size_t>(s.sq * s.sk), 0.0f);
  fill(m);
  xs.back() = from_floats(m, mask_shape(s.mask, s.b, s.sq, s.sk), s.dtype, Device::cpu());
  check_cuda(a.seg, xs, attention_tol(s.dtype));
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace

LF_CUDA_TEST_CASE("attention gpu: the BERT pattern is one attention kernel and equals eager") {
  for (MaskForm mask : {MaskForm::none, MaskForm::per_key}) {
    for (bool negative : {false, true}) {
      AttentionShape s;
      s.mask = mask;
      s.negative_dims = negative;
      INFO(s.str());
      const AttentionSegment a = attention_segment(s);
      check_cuda(a.seg, random_externals(a.seg, 7), 2e-5);
    }
  }
}

LF_CUDA_TEST_CASE("attention gpu: step equals eager over shapes, dtypes, masks and strided views") {
  std::vector<AttentionShape> cases = attention_numeric_cases();
  cases.push_back(
      {1, 2, 1, 1000, 128, DType::f16, MaskForm::per_key, false, false, true});  // long decode
  cases.push_back({2, 12, 128, 128, 64, DType::bf16, MaskForm::per_key, true, false, false});
  // BERT-base at batch 1 (12 heads: the grid chooses the split), and s 384 (32 rows a block).
  cases.push_back({1, 12, 128, 128, 64, DType::f16, MaskForm::per_key, true, false, false});
  cases.push_back({1, 12, 384, 384, 64, DType::bf16, MaskForm::per_key, true, false, false});
  for_each_key_split([&] {
    for (const AttentionShape& s : cases) {
      INFO(s.str());
      const AttentionSegment a = attention_segment(s);
      check_cuda(a.seg, random_externals(a.seg, 11), attention_tol(s.dtype));
    }
  });
}

// Split keys: each group keeps its own max and sum and group 0 merges them. Rows whose keys
// are all -inf in one group (or in all but one), in the other, everywhere (NaN), and one NaN
// score, in f16 at d = 64 over 3 key tiles (group 0: tiles 0 and 2, group 1: tile 1).
LF_CUDA_TEST_CASE("attention gpu: split key groups merge masked, NaN and all -inf rows as eager") {
  const AttentionShape s{1, 2, 6, 150, 64, DType::f16, MaskForm::per_batch, true, false, false};
  const int64_t sk = s.sk;
  for_each_key_split([&] {
    check_masked(s, 23, [sk](std::vector<float>& m) {
      for (int64_t j = 64; j < 128; ++j) m[j] = -kInf;                            // row 0: group 1 all -inf
      for (int64_t j = 0; j < sk; ++j) m[sk + j] = j < 64 || j >= 128 ? -kInf : 0.0f;  // row 1: only group 1
      for (int64_t j = 0; j < sk; ++j) m[2 * sk + j] = -kInf;                     // row 2: all -inf: NaN
      m[3 * sk + 100] = kNaN;                                                     // row 3: NaN in group 1
      for (int64_t j = 0; j < 140; ++j) m[4 * sk + j] = -kInf;                    // row 4: only group 0's last tile
      m[5 * sk + 70] = 8.0f;                                                      // row 5: group 1 dominates
    });
  });
}

LF_CUDA_TEST_CASE("attention gpu: the grouped-query form of the decoders equals eager") {
  for (const GroupedShape& s : grouped_numeric_cases()) {
    INFO(s.str());
    const AttentionSegment a = grouped_attention_segment(s);
    check_cuda(a.seg, random_externals(a.seg, 13), attention_tol(s.dtype));
  }
}

LF_CUDA_TEST_CASE("attention gpu: rows of all -inf and NaN scores give eager's NaN rows") {
  const AttentionShape s{1, 2, 5, 70, 8, DType::f32, MaskForm::per_batch, true, false, false};
  const int64_t sk = s.sk;
  check_masked(s, 21, [sk](std::vector<float>& m) {
    for (int64_t j = 0; j < sk; ++j) m[j] = -kInf;
    for (int64_t j = 0; j + 1 < sk; ++j) m[sk + j] = -kInf;
    for (int64_t j = 0; j < 66; ++j) m[2 * sk + j] = -kInf;  // past the first two key tiles
    m[3 * sk + 2] = kNaN;
  });
}

// f32 prefill (attention_f32.cu) with 2 and 4 rows a warp, then the grid's choice: BERT-base at
// batch 1 and 2, head dim 128, tiles cut short, K/V as slices of a longer cache, a mask shared by
// the batch; then rows of all -inf, NaN and finite scores found only in a later tile, with rows
// past sq in the last block.
LF_CUDA_TEST_CASE("attention gpu: f32 prefill runs on its FMA kernel and equals eager") {
  const std::vector<AttentionShape> cases = {
      {1, 12, 128, 128, 64, DType::f32, MaskForm::per_key, true, false, false},
      {2, 12, 128, 128, 64, DType::f32, MaskForm::per_key, true, false, false},
      {2, 3, 100, 77, 128, DType::f32, MaskForm::per_batch, true, false, false},
      {1, 2, 40, 200, 64, DType::f32, MaskForm::plain2d, false, true, false},
      {2, 2, 29, 13, 64, DType::f32, MaskForm::shared, false, false, false},
  };
  const AttentionShape masked{1, 2, 20, 150, 64, DType::f32, MaskForm::per_batch, true, false, false};
  const int64_t sk = masked.sk;
  const auto body = [&] {
#if LIVEFUSE_HAS_CUDA
    const auto before = livefuse::cuda::attention_launch_counts();
#endif
    for (const AttentionShape& s : cases) {
      INFO(s.str());
      const AttentionSegment a = attention_segment(s);
      check_cuda(a.seg, random_externals(a.seg, 31), attention_tol(s.dtype));
    }
    check_masked(masked, 37, [sk](std::vector<float>& m) {
      for (int64_t j = 0; j < sk; ++j) m[j] = -kInf;            // row 0: NaN
      for (int64_t j = 0; j + 1 < sk; ++j) m[sk + j] = -kInf;   // row 1: its last key only
      for (int64_t j = 0; j < 128; ++j) m[2 * sk + j] = -kInf;  // row 2: the third tile only
      m[3 * sk + 100] = kNaN;                                   // row 3: NaN in tile 1
      m[17 * sk + 70] = 30.0f;                                  // row 17: one key dominates
    });
#if LIVEFUSE_HAS_CUDA
    CHECK(livefuse::cuda::attention_launch_counts().prefill_f32 - before.prefill_f32 == cases.size() + 1);
#endif
  };
#if LIVEFUSE_HAS_CUDA
  for_each_setting(livefuse::cuda::set_attention_f32_rows, {2, 4, 0}, "rows a warp", body);
#else
  body();
#endif
}

#if LIVEFUSE_HAS_CUDA
// Which cut of the tensor-core kernel a shape gets (attention_kernels.hpp): the keys split in two
// only where 64-row blocks fit the SMs at once, only at head dim 64 and two key tiles or more.
// HF's padding mask -- the dtype's lowest finite value, not -inf -- on a batch row padded
// throughout: eager averages its keys (every score rounds to that value); the tensor-core kernel
// once took max * log2(e), which overflowed to -inf, and gave NaN. BERT's shape on tensor cores,
// f32 on the general kernel, a decode shape on the decode kernel.
LF_CUDA_TEST_CASE("attention gpu: HF's padding mask averages a fully padded row as eager does") {
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    const double lowest = dt == DType::f16    ? -65504.0
                          : dt == DType::bf16 ? -3.3895313892515355e38
                                              : static_cast<double>(std::numeric_limits<float>::lowest());
    for (const AttentionShape& s : {AttentionShape{2, 4, 128, 128, 64, dt, MaskForm::per_key, true, false, false},
                                    AttentionShape{2, 4, 1, 300, 64, dt, MaskForm::per_key, false, true, false}}) {
      INFO(s.str());
      const AttentionSegment a = attention_segment(s);
      std::vector<Tensor> xs = random_externals(a.seg, 53);
      std::vector<float> m(static_cast<size_t>(s.b * s.sk), 0.0f);
      for (int64_t j = 0; j < s.sk; ++j) {
        if (j >= 40) m[static_cast<size_t>(j)] = static_cast<float>(lowest);  // batch 0: padded from 40
        m[static_cast<size_t>(s.sk + j)] = static_cast<float>(lowest);       // batch 1: throughout
      }
      xs.back() = from_floats(m, mask_shape(s.mask, s.b, s.sq, s.sk), s.dtype, Device::cpu());
      // (f16: x * scale + -65504 in f32 rounds x by ~0.002 -- eager's rounding as much as ours.)
      check_cuda(a.seg, xs, dt == DType::f16 ? 2e-2 : attention_tol(s.dtype));
    }
  }
}

LF_CUDA_TEST_CASE("attention gpu: the tensor-core kernel splits the keys only where blocks are too few") {
  const int64_t sms = livefuse::cuda::current_device_info().sm_count;
  auto config = [](int64_t b, int64_t h, int64_t sq, int64_t sk, int64_t d) {
    AttentionArgs a;
    a.dtype = DType::f16, a.batch = b, a.heads = h, a.sq = sq, a.sk = sk, a.d = d, a.dv = d;
    const livefuse::cuda::AttentionMmaConfig c = livefuse::cuda::attention_mma_config(a);
    return std::pair<int, int>{c.row_warps, c.key_groups};
  };
  using P = std::pair<int, int>;
  const auto split = [&](int64_t heads, int64_t sq) {
    return heads * ((sq + 63) / 64) > 3 * sms ? P{4, 1}
                                                : P{heads * ((sq + 31) / 32) >= 2 * sms ? 2 : 1, 2};
  };
  CHECK(config(1, 12, 128, 128, 64) == split(12, 128));  // BERT-base b1: {1, 2} on an H200
  CHECK(config(1, 12, 384, 384, 64) == split(12, 384));
  CHECK(config(8, 12, 128, 128, 64) == split(96, 128));  // {2, 2} on 132 SMs
  CHECK(config(64, 12, 128, 128, 64) == P{4, 1});          // more blocks than the SMs hold at once
  CHECK(config(1, 12, 128, 128, 128) == P{4, 1});          // d = 128: no room for two groups
  CHECK(config(1, 2, 64, 64, 64) == P{4, 1});              // one key tile
  livefuse::cuda::force_attention_key_groups(2);
  CHECK(config(64, 12, 128, 128, 64).second == 2);
  livefuse::cuda::force_attention_row_warps(1);  // the benchmark's variants
  CHECK(config(64, 12, 128, 128, 64) == P{1, 2});
  livefuse::cuda::force_attention_row_warps(2);
  CHECK(config(1, 12, 128, 128, 64) == P{2, 2});
  livefuse::cuda::force_attention_row_warps(0);
  livefuse::cuda::force_attention_key_groups(0);
}
#endif

// The decode kernel (attention_decode.cu) over long caches, against eager on the CPU: the shapes
// reach the paths its key cursors and its workspace fold take -- many steps a split, a split's
// last step short of the block's keys, a GQA group as two-row blocks, one-row MHA heads, f32's
// 16 lanes a key, d 128 over two tokens, a mask with a run of -inf keys across steps, and 8 K/V
// heads x 4096 keys, whose splits (16 a head on an H200) meet in the stream's workspace. The same
// shapes again on the tensor-core decode kernel (f32 stays on the FMA one).
LF_CUDA_TEST_CASE("attention gpu: decode steps over long caches equal eager, splits meeting in the workspace") {
  std::vector<GroupedShape> shapes;
  shapes.push_back({1, 8, 4, 1, 4096, 64, DType::bf16, true});   // Llama-1B decode
  shapes.push_back({1, 12, 1, 1, 4099, 64, DType::f16, false});  // GPT-2 decode, a short last step
  shapes.push_back({2, 2, 3, 1, 1500, 64, DType::f32, false});   // f32: 16 lanes a key
  shapes.push_back({1, 2, 2, 2, 777, 128, DType::f16, true});    // d 128, two tokens
  for_each_decode_kernel([&] {
    for (const GroupedShape& s : shapes) {
      INFO(s.str());
      const AttentionSegment a = grouped_attention_segment(s);
      std::vector<Tensor> xs = random_externals(a.seg, 31);
      std::vector<float> m(static_cast<size_t>((s.per_key_mask ? s.b : s.t) * s.sk), 0.0f);
      for (size_t i = 0; i < m.size(); ++i)
        if (i % s.sk >= 100 && i % s.sk < 300) m[i] = -kInf;
      xs.back() = from_floats(m, s.per_key_mask ? Shape{s.b, 1, 1, 1, s.sk} : Shape{s.t, s.sk}, s.dtype,
                              Device::cpu());
      const std::vector<double> want = eager_values(a.seg, xs)[a.seg.value_id(a.seg.outputs[0])].to_doubles();
      const std::vector<double> got = cuda_output(a.seg, xs);
      size_t bad = 0;
      CHECK_MESSAGE(lftest::allclose(got, want, attention_tol(s.dtype), attention_tol(s.dtype), &bad),
                    "first mismatch at " << bad << ": got " << (bad < got.size() ? got[bad] : 0)
                                         << " want " << (bad < want.size() ? want[bad] : 0));
    }
  });
}

// Splits of the tensor-core decode kernel (1500 keys, 2 heads: 12 splits of two 64-key tiles,
// one a warp) meeting in the workspace, with rows whose finite keys sit in one split only, in
// none (NaN), a NaN score in one split, only the last (partial) tile's last key, one key that
// dominates -- and the same on the FMA kernel.
LF_CUDA_TEST_CASE("attention gpu: decode splits merge masked, NaN and all -inf rows as eager") {
  for (DType dt : {DType::f16, DType::bf16}) {
    const AttentionShape s{1, 2, 6, 1500, 64, dt, MaskForm::per_batch, true, false, false};
    const int64_t sk = s.sk;
    for_each_decode_kernel([&] {
      check_masked(s, 29, [sk](std::vector<float>& m) {
        for (int64_t j = 384; j < 512; ++j) m[j] = -kInf;                                // row 0: one split all -inf
        for (int64_t j = 0; j < sk; ++j) m[sk + j] = j >= 640 && j < 768 ? 0.0f : -kInf;  // row 1: one split only
        for (int64_t j = 0; j < sk; ++j) m[2 * sk + j] = -kInf;                          // row 2: all -inf: NaN
        m[3 * sk + 1000] = kNaN;                                                         // row 3: NaN in one split
        for (int64_t j = 0; j + 1 < sk; ++j) m[4 * sk + j] = -kInf;                      // row 4: the last key only
        m[5 * sk + 70] = 8.0f;                                                           // row 5: one key dominates
      });
    });
  }
}

#if LIVEFUSE_HAS_CUDA
// The decoders' shapes take the tensor-core decode kernel (it declines f32, head dims other than
// 64 / 128 and more than 16 rows) and the streaming one (also more than 8 rows, and more keys than
// 64 splits of its widest blocks), and their results equal the CPU kernel's: Llama-1B's GQA head (4 rows, d 64)
// at 300 and 4096 keys, an 8B-shaped head (d 128), GPT-2's one row, three rows (a GQA group of 3).
static void check_decode_kernel(const char* name, bool (*launch)(const AttentionArgs&, void*), bool stream) {
  struct Case {
    int64_t heads, rows, sk, d;
    DType dt;
    bool tc_takes, stream_takes;
  };
  const Case cases[] = {{8, 4, 300, 64, DType::bf16, true, true},
                        {8, 4, 4096, 64, DType::bf16, true, true},
                        {8, 4, 777, 128, DType::bf16, true, true},
                        {12, 1, 4099, 64, DType::f16, true, true},
                        {2, 3, 200, 64, DType::f16, true, true},
                        {2, 3, 200, 64, DType::f32, false, false},
                        {2, 12, 200, 64, DType::f16, true, false},
                        {2, 17, 200, 64, DType::f16, false, false},
                        {2, 4, 200, 96, DType::f16, false, false},
                        {1, 1, 64 * 512 + 1, 64, DType::f16, true, false}};  // 65 512-key splits
  for (const Case& c : cases) {
    INFO(name << ": heads " << c.heads << " rows " << c.rows << " sk " << c.sk << " d " << c.d << " "
              << dtype_name(c.dt));
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const auto random = [&](Shape shape) {
      std::vector<float> x(static_cast<size_t>(shape.numel()));
      for (float& e : x) e = u(rng);
      return from_floats(x, shape, c.dt, Device::cpu());
    };
    const Tensor q = random({1, c.heads, c.rows, c.d}), k = random({1, c.heads, c.sk, c.d}),
                 v = random({1, c.heads, c.sk, c.d});
    Tensor want = from_floats(std::vector<float>(static_cast<size_t>(c.heads * c.rows * c.d), 0.0f),
                              {1, c.heads, c.rows, c.d}, c.dt, Device::cpu());
    const auto args = [&](const Tensor& tq, const Tensor& tk, const Tensor& tv, Tensor& out) {
      AttentionArgs a;
      a.q = tq.data_ptr(), a.k = tk.data_ptr(), a.v = tv.data_ptr(), a.out = out.data_ptr();
      a.dtype = c.dt, a.batch = 1, a.heads = c.heads, a.sq = c.rows, a.sk = c.sk, a.d = c.d, a.dv = c.d;
      const int64_t qs[4] = {c.heads * c.rows * c.d, c.rows * c.d, c.d, 1},
                    ks[4] = {c.heads * c.sk * c.d, c.sk * c.d, c.d, 1};
      std::copy(qs, qs + 4, a.q_st), std::copy(qs, qs + 4, a.out_st);
      std::copy(ks, ks + 4, a.k_st), std::copy(ks, ks + 4, a.v_st);
      a.rows_t = c.rows, a.scale = 0.125f;
      return a;
    };
    livefuse::cpu::run_attention(args(q, k, v, want));
    const Tensor gq = q.to(Device::cuda(0)), gk = k.to(Device::cuda(0)), gv = v.to(Device::cuda(0));
    Tensor got = want.to(Device::cuda(0));
    const bool taken = launch(args(gq, gk, gv, got), Stream::current(Device::cuda(0)).handle());
    CHECK(taken == (stream ? c.stream_takes : c.tc_takes));
    if (!taken) continue;
    synchronize(Device::cuda(0));
    const auto g = got.to(Device::cpu()).to_doubles(), w = want.to_doubles();
    size_t bad = 0;
    CHECK_MESSAGE(lftest::allclose(g, w, attention_tol(c.dt), attention_tol(c.dt), &bad),
                  "first mismatch at " << bad << ": got " << (bad < g.size() ? g[bad] : 0)
                                       << " want " << (bad < w.size() ? w[bad] : 0));
  }
}

LF_CUDA_TEST_CASE("attention gpu: decode shapes run on tensor cores and equal the CPU kernel") {
  struct Reset {
    ~Reset() { livefuse::cuda::force_attention_decode_tc(-1); }
  } reset;
  livefuse::cuda::force_attention_decode_tc(1);  // whatever LIVEFUSE_DECODE_TC says
  check_decode_kernel("tensor cores", livefuse::cuda::launch_attention_decode_tc, false);
}

LF_CUDA_TEST_CASE("attention gpu: decode shapes run on the streaming kernel and equal the CPU kernel") {
  struct Reset {
    ~Reset() {
      livefuse::cuda::force_attention_decode_stream(-1);
      livefuse::cuda::set_attention_decode_stream_warps(0);
      livefuse::cuda::set_attention_decode_stream_cluster(-1);
    }
  } reset;
  livefuse::cuda::force_attention_decode_stream(1);  // at any length
  // Splits meeting in a cluster where the kernel's rule takes one, then in the workspace only.
  for (int cluster : {-1, 0}) {
    livefuse::cuda::set_attention_decode_stream_cluster(cluster);
    for (int warps : {4, 8, 12, 16, 0}) {  // 128- to 512-key splits, then the grid's choice
      livefuse::cuda::set_attention_decode_stream_warps(warps);
      INFO("largest cluster " << cluster);
      const std::string name = warps ? "streaming, " + std::to_string(warps) + " warps" : "streaming";
      check_decode_kernel(name.c_str(), livefuse::cuda::launch_attention_decode_stream, true);
    }
  }
}
#endif

// A decode step's KV caches grown by concat and joined to the attention step (pass_attention):
// planned and run on CUDA, the decode kernel writes the step's rows (and, the storage being
// fresh here, the old ones) while it reads them; every result equals eager, the grown caches too.
// The GQA form one and two tokens, GPT-2's one row over a cache long enough to meet in the
// workspace, and 17 rows (past the decode kernel: the copies land first, then the general kernel).
LF_CUDA_TEST_CASE("attention gpu: a decode step's cache concats joined to the attention equal eager") {
  const GroupedShape shapes[] = {{1, 8, 4, 1, 300, 64, DType::bf16, true},  {1, 12, 1, 1, 4099, 64, DType::f16, false},
                                 {2, 2, 3, 2, 777, 16, DType::f32, false},  {1, 2, 2, 2, 95, 128, DType::f16, true},
                                 {1, 2, 17, 1, 40, 32, DType::f16, false}};
  for (const GroupedShape& s : shapes) {
    INFO(s.str());
    const AppendingSegment a = appending_attention_segment(s);
    PlannerOptions opts = default_planner_options(Device::cuda(0));
    opts.attention_fast_only = false;
    PlannedSegment p = plan_segment(a.a.seg, opts);
    INFO(p.describe());
    const AttentionStep* st = attention_step_of(p);
    REQUIRE(st != nullptr);
    CHECK(st->operands.k_append == a.k_cat);
    CHECK(compile_plan(p, jit::KernelCompiler::global(), jit::default_compile_options()) == 0);
    const std::vector<Tensor> xs = random_externals(a.a.seg, 41);
    const std::vector<Tensor> want = eager_values(a.a.seg, xs);
    const std::vector<Tensor> got = poisoned_values(p, to_cuda(xs));
    run_plan(p, got, Stream::current(Device::cuda(0)).handle());
    synchronize(Device::cuda(0));
    for (const ValueRef& r : a.a.seg.outputs) {
      const int v = a.a.seg.value_id(r);
      INFO("output value " << v);
      const auto g = got[v].to_doubles(), w = want[v].to_doubles();
      size_t bad = 0;
      CHECK_MESSAGE(lftest::allclose(g, w, attention_tol(s.dtype), attention_tol(s.dtype), &bad),
                    "first mismatch at " << bad << ": got " << (bad < g.size() ? g[bad] : 0)
                                         << " want " << (bad < w.size() ? w[bad] : 0));
    }
  }
}

#if LIVEFUSE_HAS_CUDA
// The decode kernel's append (AttentionArgs::first_new) against the CPU kernel's on the same
// operands: the cache grown in place (k_dst is the old cache's block, with room) or into another
// block (the old rows copied), the step's rows read through a head-major view (16-byte loads) or
// through a column stride of 2 (the strided path), one to four rows a K/V head and 9 (eight-row
// blocks), splits in a cluster and meeting in the workspace, a per-key mask. Rows past the grown
// caches stay as they were.
LF_CUDA_TEST_CASE("attention gpu: the decode kernel appends the step's rows as the CPU kernel does") {
  struct Case {
    int64_t batch, heads, rows, old, added, d;
    DType dt;
    bool in_place, strided_new, mask;
  };
  const Case cases[] = {
      {1, 12, 1, 4099, 1, 64, DType::f16, true, false, false},  {1, 12, 1, 4099, 1, 64, DType::f16, false, false, true},
      {1, 8, 4, 300, 1, 64, DType::bf16, true, false, true},    {1, 8, 4, 300, 1, 64, DType::bf16, false, true, false},
      {2, 2, 2, 77, 2, 128, DType::f16, true, true, true},       {2, 3, 9, 600, 3, 32, DType::f32, false, false, true},
      {1, 2, 1, 16, 4, 16, DType::f32, true, false, false},     {1, 4, 2, 1500, 1, 64, DType::bf16, false, false, false}};
  struct Reset {
    ~Reset() { livefuse::cuda::force_attention_decode_stream(-1); }
  } reset;
  // On the FMA kernel, then with the streaming one switched on at every length: it takes the f16
  // / bf16 caches grown in place with 16-byte rows; the FMA kernel the rest.
  for (bool stream : {false, true})
  for (const Case& c : cases) {
    livefuse::cuda::force_attention_decode_stream(stream ? 1 : 0);
    const bool streamed = stream && c.in_place && !c.strided_new && c.rows <= 8 &&
                          c.dt != DType::f32 && (c.d == 64 || c.d == 128);
    INFO((stream ? "streaming kernel on: " : "") << "batch " << c.batch << " heads " << c.heads
                  << " rows " << c.rows << " old " << c.old << " added " << c.added << " d " << c.d << " " << dtype_name(c.dt) << (c.in_place ? " in place" : " moved")
                  << (c.strided_new ? " strided new rows" : "") << (c.mask ? " masked" : ""));
    const int64_t sk = c.old + c.added, cap = sk + 5, b = c.batch, h = c.heads, d = c.d;
    std::mt19937_64 rng(static_cast<uint64_t>(c.old * 31 + c.rows));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const auto random = [&](int64_t n, Shape shape) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& e : x) e = u(rng);
      return from_floats(x, shape, c.dt, Device::cpu());
    };
    // The caches' blocks [b, h, cap, d] (rows past `old` hold noise the kernel must not read);
    // the step's rows [b, added, h, d] (seen head-major) or [b, h, added, 2d] (every other column).
    const Tensor kc = random(b * h * cap * d, {b, h, cap, d}), vc = random(b * h * cap * d, {b, h, cap, d});
    const int64_t new_cols = c.strided_new ? 2 * d : d;
    const Tensor kn = random(b * c.added * h * new_cols, {b, c.added, h, new_cols}),
                 vn = random(b * c.added * h * new_cols, {b, c.added, h, new_cols});
    const Tensor kd = random(b * h * cap * d, {b, h, cap, d}), vd = random(b * h * cap * d, {b, h, cap, d});
    const Tensor q = random(b * h * c.rows * d, {b, h, c.rows, d});
    std::vector<float> mv(static_cast<size_t>(b * sk), 0.0f);
    for (size_t i = 0; i < mv.size(); ++i)
      if (c.mask && i % static_cast<size_t>(sk) % 7 == 3) mv[i] = -kInf;
    const Tensor mask = from_floats(mv, {b, 1, 1, sk}, c.dt, Device::cpu());
    const Tensor out0 = from_floats(std::vector<float>(static_cast<size_t>(b * h * c.rows * d), 0.0f),
                                    {b, h, c.rows, d}, c.dt, Device::cpu());
    struct Ops {
      Tensor q, kc, vc, kn, vn, kd, vd, mask, out;
    };
    const auto args = [&](Ops& o) {
      AttentionArgs a;
      a.dtype = c.dt, a.batch = b, a.heads = h, a.sq = c.rows, a.sk = sk, a.d = d, a.dv = d;
      a.rows_t = c.rows, a.scale = 0.125f;
      a.q = o.q.data_ptr(), a.out = o.out.data_ptr();
      const int64_t qs[4] = {h * c.rows * d, c.rows * d, d, 1}, cs[4] = {h * cap * d, cap * d, d, 1};
      const int64_t ns[4] = {c.added * h * new_cols, c.strided_new ? new_cols : d,
                             c.strided_new ? h * new_cols : h * d, c.strided_new ? 2 : 1};
      std::copy(qs, qs + 4, a.q_st), std::copy(qs, qs + 4, a.out_st);
      std::copy(cs, cs + 4, a.k_st), std::copy(cs, cs + 4, a.v_st);
      a.k = o.kc.data_ptr(), a.v = o.vc.data_ptr();
      a.first_new = c.old;
      a.k_new = o.kn.data_ptr(), a.v_new = o.vn.data_ptr();
      std::copy(ns, ns + 4, a.k_new_st), std::copy(ns, ns + 4, a.v_new_st);
      a.k_dst = c.in_place ? o.kc.data_ptr() : o.kd.data_ptr();
      a.v_dst = c.in_place ? o.vc.data_ptr() : o.vd.data_ptr();
      std::copy(cs, cs + 4, a.k_dst_st), std::copy(cs, cs + 4, a.v_dst_st);
      a.copy_old_k = a.copy_old_v = !c.in_place;
      if (c.mask) {
        a.mask = o.mask.data_ptr();
        const int64_t ms[4] = {sk, 0, 0, 1};
        std::copy(ms, ms + 4, a.mask_st);
      }
      return a;
    };
    Ops gpu{q.to(Device::cuda(0)),  kc.to(Device::cuda(0)), vc.to(Device::cuda(0)),   kn.to(Device::cuda(0)),
            vn.to(Device::cuda(0)), kd.to(Device::cuda(0)), vd.to(Device::cuda(0)),   mask.to(Device::cuda(0)),
            out0.to(Device::cuda(0))};
    Ops cpu{q, kc, vc, kn, vn, kd, vd, mask, out0};  // (the GPU's copies are taken)
    livefuse::cpu::run_attention(args(cpu));
    const auto before = livefuse::cuda::attention_launch_counts();
    livefuse::cuda::launch_attention(args(gpu), Stream::current(Device::cuda(0)).handle());
    synchronize(Device::cuda(0));
    const auto after = livefuse::cuda::attention_launch_counts();
    CHECK(after.decode_fma == before.decode_fma + (streamed ? 0 : 1));
    CHECK(after.decode_stream == before.decode_stream + (streamed ? 1 : 0));
    const auto same = [&](const Tensor& g, const Tensor& w, double tol, const char* what) {
      INFO(what);
      const auto gv = g.to(Device::cpu()).to_doubles(), wv = w.to_doubles();
      size_t bad = 0;
      CHECK_MESSAGE(lftest::allclose(gv, wv, tol, tol, &bad),
                    "first mismatch at " << bad << ": got " << (bad < gv.size() ? gv[bad] : 0) << " want "
                                         << (bad < wv.size() ? wv[bad] : 0));
    };
    same(gpu.out, cpu.out, attention_tol(c.dt), "the result");
    same(gpu.kc, cpu.kc, 0.0, "the K cache's old block");
    same(gpu.vc, cpu.vc, 0.0, "the V cache's old block");
    same(gpu.kd, cpu.kd, 0.0, "the other K block");
    same(gpu.vd, cpu.vd, 0.0, "the other V block");
  }
}
#endif
