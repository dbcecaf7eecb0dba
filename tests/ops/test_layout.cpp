// Layout ops (views and the copies behind contiguous / concat / reshape of a view) and
// embedding: exact values for every dtype, checked with index arithmetic on the source.
#include "tests/ops/ops_util.hpp"

using namespace opstest;

namespace {
uint64_t g_seed = 17000;

Tensor source(const Shape& s, DType t, Device dev) {
  return lf::is_floating(t) ? rand_tensor(s, t, dev, ++g_seed, -8, 8)
                            : rand_tensor(s, t, dev, ++g_seed, -1000, 1000);
}
}  // namespace

TEST_CASE("views and contiguous copies: transpose, permute, slice, reshape of a view") {
  for (Device dev : lftest::devices())
    for (DType t : all_dtypes()) {
      const Tensor x = source({4, 5, 6}, t, dev);
      const std::vector<double> xv = x.to_doubles();
      auto at = [&](int64_t i, int64_t j, int64_t k) { return xv[(i * 5 + j) * 6 + k]; };

      // permute {2, 0, 1}: y[k, i, j] = x[i, j, k]
      const Tensor p = lf::permute(x, {2, 0, 1});
      std::vector<double> want;
      for (int k = 0; k < 6; ++k)
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 5; ++j) want.push_back(at(i, j, k));
      poison(x.nbytes(), t, dev);
      const Tensor pc = lf::contiguous(p);
      CHECK(pc.is_contiguous());
      check_equal(pc, want, {6, 4, 5}, t, case_name("contiguous(permute)", t, dev));

      // slice dim 2, start -5 (= 1), step 2: k = 1, 3, 5; then transpose(0, 1).
      const Tensor s = lf::transpose(lf::slice(x, 2, -5, 6, 2), 0, 1);
      want.clear();
      for (int j = 0; j < 5; ++j)
        for (int i = 0; i < 4; ++i)
          for (int k = 1; k < 6; k += 2) want.push_back(at(i, j, k));
      check_equal(lf::contiguous(s), want, {5, 4, 3}, t, case_name("contiguous(slice)", t, dev));

      // reshape of a non-contiguous view keeps the logical order.
      const Tensor r = lf::reshape(lf::transpose(x, 0, 2), {-1, 4});
      want.clear();
      for (int k = 0; k < 6; ++k)
        for (int j = 0; j < 5; ++j)
          for (int i = 0; i < 4; ++i) want.push_back(at(i, j, k));
      check_equal(r, want, {30, 4}, t, case_name("reshape(transpose)", t, dev));
    }
}

TEST_CASE("concat: every dim, every dtype, views among the inputs") {
  for (Device dev : lftest::devices())
    for (DType t : all_dtypes())
      for (int dim : {0, 1, -1}) {
        const Tensor a = source({3, 4}, t, dev);
        const Tensor b = source({4, 3}, t, dev).transpose(0, 1);    // [3, 4], strided
        const Tensor c = source({3, 8}, t, dev).slice(1, 0, 8, 2);  // [3, 4], strided
        const Tensor e = dim == 0 ? source({0, 4}, t, dev) : source({3, 0}, t, dev);  // empty input
        const std::vector<Tensor> parts = {a, e, b, c};
        const Tensor y = lf::concat(parts, dim);
        const int d = dim < 0 ? dim + 2 : dim;
        Shape os{3, 4};
        os[d] = d == 0 ? 9 : 12;
        std::vector<double> want(static_cast<size_t>(os.numel()));
        for (int k = 0, off = 0; k < 4; ++k) {
          const std::vector<double> v = parts[k].to_doubles();
          const Shape ps = parts[k].shape();
          for (int64_t i = 0; i < ps[0]; ++i)
            for (int64_t j = 0; j < ps[1]; ++j) {
              const int64_t oi = d == 0 ? i + off : i, oj = d == 1 ? j + off : j;
              want[oi * os[1] + oj] = v[i * ps[1] + j];
            }
          off += static_cast<int>(ps[d]);
        }
        check_equal(y, want, os, t, case_name("concat", t, dev, "dim " + std::to_string(dim)));
      }
}

TEST_CASE("embedding: float weights, i32/i64 ids, views") {
  for (Device dev : lftest::devices())
    for (DType t : float_dtypes())
      for (DType it : {DType::i32, DType::i64}) {
        const Tensor w = source({11, 7}, t, dev);
        const Tensor ids = lf::from_int64s({3, 0, 10, 3, 7, 1, 9, 2, 5, 10}, {2, 5}, it, dev);
        const std::vector<double> wv = w.to_doubles();
        const std::vector<int64_t> iv = ids.to_int64s();
        std::vector<double> want;
        for (int64_t id : iv)
          for (int j = 0; j < 7; ++j) want.push_back(wv[id * 7 + j]);
        poison(want.size() * lf::dtype_size(t), t, dev);
        check_equal(lf::embedding(w, ids), want, {2, 5, 7}, t, case_name("embedding", t, dev));

        // Weight with strided columns, ids transposed.
        const Tensor ws = source({11, 14}, t, dev).slice(1, 0, 14, 2);
        const Tensor idt = ids.transpose(0, 1);  // [5, 2]
        const std::vector<double> wsv = ws.to_doubles();
        want.clear();
        for (int64_t id : idt.to_int64s())
          for (int j = 0; j < 7; ++j) want.push_back(wsv[id * 7 + j]);
        check_equal(lf::embedding(ws, idt), want, {5, 2, 7}, t,
                    case_name("embedding", t, dev, "views"));
      }
}
