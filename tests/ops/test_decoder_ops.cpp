// The ops a decoder needs beyond an encoder's: comparisons (bool results, for causal masks),
// sin/cos of large angles (rotary embeddings), expand (grouped-query attention), the in-place
// writes of a static KV cache (copy_into / index_copy) and topk (sampling), against float64
// references.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "livefuse/config.hpp"
#include "livefuse/inspect.hpp"
#include "livefuse/livefuse.hpp"
#include "tests/ops/ops_util.hpp"

using namespace opstest;

namespace {

uint64_t g_seed = 5000;

struct Cmp {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> fn;
  std::function<Tensor(const Tensor&, double)> fn_scalar;
  std::function<bool(double, double)> ref;
};

const std::vector<Cmp>& comparisons() {
  static const std::vector<Cmp> ops = {
      {"lt", [](auto& a, auto& b) { return lf::lt(a, b); },
       [](auto& a, double b) { return lf::lt(a, b); }, [](double a, double b) { return a < b; }},
      {"le", [](auto& a, auto& b) { return lf::le(a, b); },
       [](auto& a, double b) { return lf::le(a, b); }, [](double a, double b) { return a <= b; }},
      {"gt", [](auto& a, auto& b) { return lf::gt(a, b); },
       [](auto& a, double b) { return lf::gt(a, b); }, [](double a, double b) { return a > b; }},
      {"ge", [](auto& a, auto& b) { return lf::ge(a, b); },
       [](auto& a, double b) { return lf::ge(a, b); }, [](double a, double b) { return a >= b; }},
      {"eq", [](auto& a, auto& b) { return lf::eq(a, b); },
       [](auto& a, double b) { return lf::eq(a, b); }, [](double a, double b) { return a == b; }},
  };
  return ops;
}

// Values on a coarse grid, so equal pairs occur and eq / le / ge are exercised at equality.
Tensor grid_tensor(const Shape& s, DType t, Device dev, uint64_t seed) {
  Tensor r = rand_tensor(s, DType::f32, dev, seed, -3, 3);
  std::vector<double> v = r.to_doubles();
  std::vector<float> f;
  for (double x : v) f.push_back(static_cast<float>(std::round(x * 2) / 2));
  if (lf::is_floating(t)) return lf::from_floats(f, s, t, dev);
  std::vector<int64_t> iv;
  for (float x : f) iv.push_back(static_cast<int64_t>(std::round(x)));
  return lf::from_int64s(iv, s, t, dev);
}

}  // namespace

TEST_CASE("comparisons: bool results for every dtype, broadcast, scalars, fractional values") {
  const std::pair<Shape, Shape> shapes[] = {{{7}, {7}}, {{3, 1, 5}, {4, 5}}, {{64, 129}, {129}}};
  for (Device dev : lftest::devices())
    for (const Cmp& op : comparisons())
      for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64}) {
        for (const auto& [sa, sb] : shapes) {
          const Tensor a = grid_tensor(sa, t, dev, ++g_seed), b = grid_tensor(sb, t, dev, ++g_seed);
          const Shape out = broadcast(sa, sb);
          const std::vector<double> av = a.to_doubles(), bv = b.to_doubles();
          std::vector<double> want(static_cast<size_t>(out.numel()));
          for (int64_t i = 0; i < out.numel(); ++i) {
            const auto idx = unravel(i, out);
            want[i] = op.ref(av[ravel_bcast(idx, sa)], bv[ravel_bcast(idx, sb)]);
          }
          check_equal(op.fn(a, b), want, out, DType::boolean,
                      case_name(op.name, t, dev, sa.str() + " vs " + sb.str()));
        }
        if (!lf::is_floating(t)) continue;
        // 0.25 vs 0.75 must not be compared as integers (the output dtype is bool).
        const Tensor a = lf::from_floats({0.25f, 0.75f, -0.5f, 0.5f}, {4}, t, dev);
        std::vector<double> want;
        for (double x : a.to_doubles()) want.push_back(op.ref(x, 0.5));
        check_equal(op.fn_scalar(a, 0.5), want, {4}, DType::boolean,
                    case_name(op.name, t, dev, "scalar 0.5"));
        check_equal(op.fn(a, lf::full({1}, 0.5, t, dev)), want, {4}, DType::boolean,
                    case_name(op.name, t, dev, "broadcast 0.5"));
      }
}

TEST_CASE("a causal mask from comparisons and where, as a decoder builds it") {
  for (Device dev : lftest::devices()) {
    const int64_t T = 5, S = 8, past = 3;  // 5 new positions after 3 cached ones
    const Tensor i = lf::reshape(lf::add(lf::arange(T, DType::i64, dev), double(past)), {T, 1});
    const Tensor j = lf::reshape(lf::arange(S, DType::i64, dev), {1, S});
    const double ninf = -std::numeric_limits<double>::infinity();
    const Tensor mask = lf::where(lf::le(j, i), lf::full({}, 0.0, DType::f32, dev),
                                  lf::full({}, ninf, DType::f32, dev));
    std::vector<double> want;
    for (int64_t r = 0; r < T; ++r)
      for (int64_t c = 0; c < S; ++c) want.push_back(c <= r + past ? 0.0 : ninf);
    check_equal(mask, want, {T, S}, DType::f32, "causal mask on " + dev.str());
  }
}

TEST_CASE("sin and cos keep their accuracy at rotary angles (hundreds of radians)") {
  for (Device dev : lftest::devices()) {
    std::vector<float> x;
    for (int k = 0; k < 4096; ++k) x.push_back(static_cast<float>(k) * 0.37f);
    const Tensor t = lf::from_floats(x, {4096}, DType::f32, dev);
    std::vector<double> ws, wc;
    for (float v : x) ws.push_back(std::sin(double(v))), wc.push_back(std::cos(double(v)));
    check_close(lf::sin(t), ws, {4096}, DType::f32, 0, 2e-6, "sin on " + dev.str());
    check_close(lf::cos(t), wc, {4096}, DType::f32, 0, 2e-6, "cos on " + dev.str());
  }
}

TEST_CASE("expand: a stride-0 view that elementwise ops, copies and matmul read") {
  for (Device dev : lftest::devices())
    for (DType t : {DType::f32, DType::f16, DType::i64}) {
      const Tensor x = rand_tensor({2, 1, 3}, t, dev, ++g_seed);
      const Tensor e = lf::expand(x, {4, 2, 5, -1});
      CHECK(e.shape() == Shape{4, 2, 5, 3});
      CHECK(e.strides()[0] == 0);
      CHECK(e.strides()[2] == 0);
      CHECK(e.impl()->storage == x.impl()->storage);  // a view, no copy
      const std::vector<double> xv = x.to_doubles();
      std::vector<double> want;
      for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 2; ++b)
          for (int c = 0; c < 5; ++c)
            for (int d = 0; d < 3; ++d) want.push_back(xv[b * 3 + d]);
      check_equal(e, want, {4, 2, 5, 3}, t, case_name("expand", t, dev));
      check_equal(lf::contiguous(e), want, {4, 2, 5, 3}, t, case_name("expand+contiguous", t, dev));
      std::vector<double> twice = want;
      for (double& v : twice) v *= 2;
      check_equal(lf::add(e, e), twice, {4, 2, 5, 3}, t, case_name("expand+add", t, dev));
    }
  for (Device dev : lftest::devices()) {
    // Grouped-query attention: 2 K heads serve 4 query heads each.
    const Tensor q = rand_tensor({2, 4, 3, 8}, DType::f32, dev, ++g_seed);
    const Tensor k = rand_tensor({2, 1, 6, 8}, DType::f32, dev, ++g_seed);
    const Tensor s = lf::matmul(q, lf::expand(k, {2, 4, 6, 8}).transpose(2, 3));
    const std::vector<double> qv = q.to_doubles(), kv = k.to_doubles();
    std::vector<double> want;
    for (int b = 0; b < 2; ++b)
      for (int h = 0; h < 4; ++h)
        for (int i = 0; i < 3; ++i)
          for (int j = 0; j < 6; ++j) {
            double acc = 0;
            for (int d = 0; d < 8; ++d)
              acc += qv[((b * 4 + h) * 3 + i) * 8 + d] * kv[(b * 6 + j) * 8 + d];
            want.push_back(acc);
          }
    check_close(s, want, {2, 4, 3, 6}, DType::f32, 1e-5, 1e-5,
                "expand into matmul on " + dev.str());
  }
}

TEST_CASE("expand: bad target shapes are errors naming the op and the shapes") {
  const Tensor x = lf::zeros({2, 3});
  CHECK(contains(error_of([&] { lf::expand(x, {3}); }), "expand"));
  CHECK(contains(error_of([&] { lf::expand(x, {4, 3}); }), "cannot expand to 4"));
  CHECK(error_of([&] { lf::expand(x, {2, 3}); }).empty());
  CHECK(lf::expand(x, {5, 2, 3}).shape() == Shape{5, 2, 3});
}

TEST_CASE("index_copy / copy_into write a cache slice in place, in eager order") {
  for (Device dev : lftest::devices())
    for (DType t : {DType::f32, DType::bf16}) {
      // A static cache [B=2, H=3, S=6, D=4], written at positions 1..2 and then 5.
      Tensor cache = lf::zeros({2, 3, 6, 4}, t, dev);
      const uint64_t v0 = cache.impl()->storage->version.load();
      const Tensor before = lf::mul(cache, 1.0);  // read before the write: sees zeros
      const Tensor kv = rand_tensor({2, 3, 2, 4}, t, dev, ++g_seed);
      lf::index_copy(cache, 2, 1, kv);
      const Tensor one = rand_tensor({2, 3, 1, 4}, t, dev, ++g_seed);
      lf::index_copy(cache, -2, 5, one);
      CHECK(cache.impl()->storage->version.load() == v0 + 2);
      const std::vector<double> a = kv.to_doubles(), b = one.to_doubles();
      std::vector<double> want(2 * 3 * 6 * 4, 0.0);
      for (int bh = 0; bh < 6; ++bh)
        for (int d = 0; d < 4; ++d) {
          for (int p = 0; p < 2; ++p) want[(bh * 6 + 1 + p) * 4 + d] = a[(bh * 2 + p) * 4 + d];
          want[(bh * 6 + 5) * 4 + d] = b[bh * 4 + d];
        }
      check_equal(cache, want, {2, 3, 6, 4}, t, case_name("index_copy", t, dev));
      check_equal(before, std::vector<double>(want.size(), 0.0), {2, 3, 6, 4}, t,
                  case_name("read before the write", t, dev));
      // A write from a transposed source into a permuted view of the cache.
      const Tensor src = rand_tensor({4, 6}, t, dev, ++g_seed);
      lf::copy_into(lf::slice(lf::slice(cache, 0, 1, 2), 1, 2, 3).reshape({6, 4}).transpose(0, 1),
                    src);
      const std::vector<double> sv = src.to_doubles();
      for (int p = 0; p < 6; ++p)
        for (int d = 0; d < 4; ++d) want[((1 * 3 + 2) * 6 + p) * 4 + d] = sv[d * 6 + p];
      check_equal(cache, want, {2, 3, 6, 4}, t, case_name("copy_into a transposed view", t, dev));
      // A source that overlaps its destination is read before it is written.
      lf::copy_into(lf::slice(cache, 2, 0, 5), lf::slice(cache, 2, 1, 6));
      std::vector<double> shifted = want;
      for (int bh = 0; bh < 6; ++bh)
        for (int p = 0; p < 5; ++p)
          for (int d = 0; d < 4; ++d)
            shifted[(bh * 6 + p) * 4 + d] = want[(bh * 6 + p + 1) * 4 + d];
      check_equal(cache, shifted, {2, 3, 6, 4}, t, case_name("overlapping copy_into", t, dev));
    }
}

TEST_CASE("index_copy / copy_into: bad positions, shapes and dtypes throw and change nothing") {
  Tensor cache = lf::zeros({1, 2, 4, 3});
  const Tensor kv = lf::full({1, 2, 1, 3}, 1.0);
  std::string e = error_of([&] { lf::index_copy(cache, 2, 4, kv); });
  CHECK(contains(e, "index_copy"));
  CHECK(contains(e, "out of range"));
  CHECK(contains(e, "[1, 2, 4, 3]"));
  CHECK(contains(error_of([&] { lf::index_copy(cache, 2, -1, kv); }), "out of range"));
  CHECK(contains(error_of([&] {
                   lf::index_copy(cache, 2, 2, lf::full({1, 2, 3, 3}, 1.0));
                 }),
                 "out of range"));
  CHECK(contains(error_of([&] {
                   lf::index_copy(cache, 2, 0, lf::full({1, 2, 1, 4}, 1.0));
                 }),
                 "must equal"));
  CHECK(contains(error_of([&] {
                   lf::index_copy(cache, 2, 0, lf::full({1, 2, 1, 3}, 1.0, DType::f16));
                 }),
                 "dtype"));
  CHECK(contains(error_of([&] { lf::index_copy(cache, 2, 0, lf::full({2, 3}, 1.0)); }), "rank"));
  CHECK(contains(error_of([&] {
                   lf::copy_into(lf::expand(lf::zeros({1, 3}), {4, 3}), lf::zeros({4, 3}));
                 }),
                 "broadcast"));
  const Tensor w = lf::zeros({4, 3});
  w.mark_immutable();
  CHECK(contains(error_of([&] { lf::copy_into(w, lf::zeros({4, 3})); }), "immutable"));
  for (double v : cache.to_doubles()) CHECK(v == 0.0);
  lf::index_copy(cache, 2, 3, kv);  // still usable afterwards
  CHECK(cache.to_doubles()[3 * 3] == 1.0);
}

namespace {
struct FusionOn {
  lf::Config saved = lf::config();
  FusionOn() {
    lf::Config c = saved;
    c.mode = lf::Mode::on;
    c.sample = 0;  // plans serve as soon as they are installed
    lf::set_config_for_testing(c);
  }
  ~FusionOn() { lf::set_config_for_testing(saved); }
};
uint64_t served_calls() {
  for (const lf::CounterGroup& g : lf::inspect().counters)
    if (g.name == "matcher")
      for (const auto& [k, v] : g.values)
        if (k == "served") return v;
  return 0;
}
}  // namespace

TEST_CASE(
    "with fusion on, reads before an in-place write see the old values, reads after the new") {
  FusionOn on;
  const uint64_t served0 = served_calls();
  // On the CPU throughout (the default device is a GPU where there is one).
  Tensor cache = lf::zeros({4, 8}, DType::f32, Device::cpu());
  std::vector<double> host(32, 0.0);
  const Tensor x = rand_tensor({1, 8}, DType::f32, Device::cpu(), ++g_seed);
  const std::vector<double> xv = x.to_doubles();
  // Plans are made in the background: go on until they have served for a while (bounded).
  int served_for = 0;
  for (int it = 0; it < 20000 && served_for < 40; ++it) {
    CAPTURE(it);
    if (served_calls() > served0) ++served_for;
    // A hot chain over the cache and an expanded row: deferred by a plan once one exists.
    const Tensor before = lf::mul(lf::add(cache, lf::expand(x, {4, 8})), 2.0);
    lf::index_copy(cache, 0, it % 4, lf::full({1, 8}, double(it), DType::f32, Device::cpu()));
    const Tensor after = lf::mul(lf::add(cache, lf::expand(x, {4, 8})), 2.0);
    std::vector<double> want_before(32), want_after(32);
    for (int i = 0; i < 32; ++i) want_before[i] = (host[i] + xv[i % 8]) * 2;
    for (int j = 0; j < 8; ++j) host[(it % 4) * 8 + j] = it;
    for (int i = 0; i < 32; ++i) want_after[i] = (host[i] + xv[i % 8]) * 2;
    check_close(before, want_before, {4, 8}, DType::f32, 1e-6, 1e-6, "before the write");
    check_close(after, want_after, {4, 8}, DType::f32, 1e-6, 1e-6, "after the write");
  }
  CHECK(served_calls() > served0);  // the chain was served by a plan, not only run eagerly
}

TEST_CASE("topk: the k largest of each row, largest first, ties by index, NaN first, any layout") {
  for (Device dev : lftest::devices())
    for (DType t : float_dtypes())
      for (const auto& [shape, k] :
           {std::pair{Shape{5, 37}, int64_t{4}}, std::pair{Shape{2, 3, 1000}, int64_t{50}},
            std::pair{Shape{1, 70000}, int64_t{8}}, std::pair{Shape{3, 6}, int64_t{6}}}) {
        // Values on a grid (ties) with one NaN in the first row.
        const Tensor g = grid_tensor(shape, DType::f32, dev, ++g_seed);
        std::vector<double> xv = g.to_doubles();
        xv[3] = std::nan("");
        std::vector<float> xf(xv.begin(), xv.end());
        const Tensor x = lf::from_floats(xf, shape, t, dev);
        xv = x.to_doubles();  // as rounded to t
        const int64_t n = shape[shape.rank - 1], rows = shape.numel() / n;
        std::vector<double> want_v, want_i;
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<int64_t> o(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) o[i] = i;
          const double* row = xv.data() + r * n;
          std::stable_sort(o.begin(), o.end(), [&](int64_t a, int64_t b) {
            const bool na = std::isnan(row[a]), nb = std::isnan(row[b]);
            if (na != nb) return na;
            return !na && row[a] > row[b];
          });
          for (int64_t j = 0; j < k; ++j)
            want_v.push_back(row[o[j]]), want_i.push_back(double(o[j]));
        }
        Shape out = shape;
        out[out.rank - 1] = k;
        auto [v, i] = lf::topk(x, k);
        check_equal(v, want_v, out, t, case_name("topk values", t, dev, shape.str()));
        check_equal(i, want_i, out, DType::i64, case_name("topk indices", t, dev, shape.str()));
      }
  for (Device dev : lftest::devices()) {
    // A transposed input: rows are columns of the stored matrix.
    const Tensor base = rand_tensor({40, 3}, DType::f32, dev, ++g_seed);
    auto [v, i] = lf::topk(base.transpose(0, 1), 2);
    const std::vector<double> b = base.to_doubles();
    std::vector<double> want_v, want_i;
    for (int c = 0; c < 3; ++c) {
      std::vector<int> o(40);
      for (int r = 0; r < 40; ++r) o[r] = r;
      std::stable_sort(o.begin(), o.end(),
                       [&](int p, int q) { return b[p * 3 + c] > b[q * 3 + c]; });
      for (int j = 0; j < 2; ++j) want_v.push_back(b[o[j] * 3 + c]), want_i.push_back(o[j]);
    }
    check_equal(v, want_v, {3, 2}, DType::f32, "topk of a transposed view on " + dev.str());
    check_equal(i, want_i, {3, 2}, DType::i64, "topk indices of a transposed view on " + dev.str());
  }
  const Tensor x = lf::zeros({2, 5});
  CHECK(contains(error_of([&] { lf::topk(x, 6); }), "k must be in [1, 5]"));
  CHECK(contains(error_of([&] { lf::topk(x, 0); }), "topk"));
  CHECK(contains(error_of([&] { lf::topk(lf::zeros({4}, DType::i64), 1); }), "floating"));
}
