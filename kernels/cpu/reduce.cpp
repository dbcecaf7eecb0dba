// Reductions over one dim: sum, mean, max, argmax (keepdim only changes the output's shape, not
// its dense row-major order, so it does not matter here).
//
// Two loop shapes. Row mode (the reduced dim has unit stride, or no other dim has): each output
// walks its R inputs with the reduced dim's stride. Column mode (another dim c has unit stride,
// e.g. sum over dim 0 of a row-major matrix, or over dim 1 of a transposed one): a block of
// outputs along c is accumulated together while the reduced dim streams through, which keeps
// reads sequential instead of striding.
//
// Floating sums accumulate in double and integer sums in int64; max/argmax propagate NaN like
// PyTorch (argmax returns the first NaN's index).
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"

namespace livefuse::cpu {
namespace {

enum class Kind { sum, mean, max, argmax };

Kind kind_of(OpId op) {
  switch (op) {
    case OpId::sum:
      return Kind::sum;
    case OpId::mean:
      return Kind::mean;
    case OpId::max:
      return Kind::max;
    case OpId::argmax:
      return Kind::argmax;
    default:
      break;
  }
  LF_ASSERT(false, op_name(op), " is not a reduction");
  return Kind::sum;
}

// Result of one reduction before it is stored: double for floating inputs, int64 otherwise
// (and always int64 for argmax, which yields an index).
template <Kind K, class V>
using Res = std::conditional_t<K == Kind::argmax || !std::is_floating_point_v<V>, int64_t, double>;

template <Kind K, class V>
struct Acc {
  using A = std::conditional_t<std::is_floating_point_v<V>, double, int64_t>;
  A acc{};
  V best{};
  int64_t idx = 0;

  void first(V v) {
    if constexpr (K == Kind::sum || K == Kind::mean)
      acc = static_cast<A>(v);
    else
      best = v;
  }
  void add(V v, int64_t r) {
    if constexpr (K == Kind::sum || K == Kind::mean) {
      acc += static_cast<A>(v);
    } else if constexpr (K == Kind::max) {
      best = lf_max(best, v);
    } else {
      if (v > best || (v != v && best == best)) {
        best = v;
        idx = r;
      }
    }
  }
  Res<K, V> result(int64_t R) const {
    if constexpr (K == Kind::sum)
      return static_cast<Res<K, V>>(acc);
    else if constexpr (K == Kind::mean)
      return static_cast<double>(acc) / static_cast<double>(R);
    else if constexpr (K == Kind::max)
      return static_cast<Res<K, V>>(best);
    else
      return idx;
  }
};

struct Geometry {
  int64_t R = 0, sd = 0;  // reduced extent and stride
  StridedIndex rest;      // all other dims (output order) -> input offset
  int64_t n_out = 0;
  // Column mode: a non-reduced dim `c` with unit input stride is walked I elements at a time;
  // `others` maps the remaining dims to input offsets and output indices.
  bool column = false;
  int64_t I = 1, out_step = 1;
  StridedIndex others_in, others_out;
};

Geometry geometry(const View& x, int d) {
  Geometry g;
  g.R = x.shape.v[d];
  g.sd = x.strides.v[d];
  Shape rs;
  Strides rst;
  for (int k = 0; k < x.shape.rank; ++k) {
    if (k == d) continue;
    rs.push_back(x.shape.v[k]);
    rst.push_back(x.strides.v[k]);
  }
  g.rest = StridedIndex(rs, rst);
  g.n_out = rs.numel();
  if (g.sd == 1 || g.n_out <= 1 || g.R <= 1) return g;  // rows are contiguous (or trivial)
  // Input and output strides of the rest dims, collapsed together so that a contiguous run
  // of several dims becomes one long column dim.
  Shape cs = rs;
  Strides sets[2] = {rst, contiguous_strides(rs)};
  collapse_dims(cs, sets, 2);
  int c = -1;
  for (int k = 0; k < cs.rank; ++k)
    if (sets[0].v[k] == 1 && cs.v[k] > 1) c = k;
  if (c < 0) return g;
  g.column = true;
  g.I = cs.v[c];
  g.out_step = sets[1].v[c];
  Shape os;
  Strides ois, oos;
  for (int k = 0; k < cs.rank; ++k) {
    if (k == c) continue;
    os.push_back(cs.v[k]);
    ois.push_back(sets[0].v[k]);
    oos.push_back(sets[1].v[k]);
  }
  g.others_in = StridedIndex(os, ois);
  g.others_out = StridedIndex(os, oos);
  return g;
}

// Stores one result into output element j, converting to the output dtype (chosen once per
// call, so the kernels are instantiated per input dtype only).
template <class R>
using StoreFn = void (*)(std::byte* out, int64_t j, R v);

template <class R>
StoreFn<R> store_fn(DType o) {
  return visit_dtype(o, [](auto ot) -> StoreFn<R> {
    constexpr DType O = decltype(ot)::value;
    return [](std::byte* out, int64_t j, R v) {
      store_as<O>(reinterpret_cast<typename DT<O>::T*>(out) + j, v);
    };
  });
}

template <Kind K, DType D>
void reduce_typed(const View& x, const Geometry& g, const View& out) {
  using T = typename DT<D>::T;
  using V = std::conditional_t<std::is_floating_point_v<typename DT<D>::C>, float,
                               std::conditional_t<D == DType::i64, int64_t, int32_t>>;
  const StoreFn<Res<K, V>> store = store_fn<Res<K, V>>(out.dtype);
  const T* xp = x.ptr<const T>();
  std::byte* op = out.base;
  const int64_t R = g.R, sd = g.sd;
  if (!g.column) {
    parallel_range(g.n_out, g.n_out * R, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        const T* p = xp + g.rest.offset(j);
        Acc<K, V> a;
        if (R > 0) a.first(load_as<D, V>(p));
        for (int64_t r = 1; r < R; ++r) a.add(load_as<D, V>(p + r * sd), r);
        store(op, j, a.result(R));
      }
    });
    return;
  }
  constexpr int64_t kCols = 256;
  const int64_t I = g.I, n_outer = g.n_out / I, chunks = (I + kCols - 1) / kCols;
  parallel_range(n_outer * chunks, g.n_out * R, [&](int64_t u0, int64_t u1) {
    Acc<K, V> acc[kCols];
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t o = u / chunks, i0 = (u % chunks) * kCols, n = std::min(kCols, I - i0);
      const T* p = xp + g.others_in.offset(o) + i0;
      for (int64_t i = 0; i < n; ++i) acc[i] = Acc<K, V>{};
      if (R > 0)
        for (int64_t i = 0; i < n; ++i) acc[i].first(load_as<D, V>(p + i));
      for (int64_t r = 1; r < R; ++r) {
        const T* row = p + r * sd;
        for (int64_t i = 0; i < n; ++i) acc[i].add(load_as<D, V>(row + i), r);
      }
      const int64_t out0 = g.others_out.offset(o) + i0 * g.out_step;
      for (int64_t i = 0; i < n; ++i) store(op, out0 + i * g.out_step, acc[i].result(R));
    }
  });
}

template <Kind K>
void reduce_kind(const View& x, const Geometry& g, const View& out) {
  visit_dtype(x.dtype, [&](auto dt) { reduce_typed<K, decltype(dt)::value>(x, g, out); });
}

}  // namespace

void run_reduction(const OpCall& call, const Tensor& out) {
  const Kind kind = kind_of(call.op);
  const View x = view_of(call.inputs[0]);
  const View o = out_view(out);
  const int d = x.shape.rank == 0 ? -1 : static_cast<int>(call.attrs.i[0]);
  if (o.shape.numel() == 0) return;
  if (d < 0) {  // a 0-d input reduces to itself
    Geometry g;
    g.R = 1;
    g.n_out = 1;
    switch (kind) {
      case Kind::sum:
        return reduce_kind<Kind::sum>(x, g, o);
      case Kind::mean:
        return reduce_kind<Kind::mean>(x, g, o);
      case Kind::max:
        return reduce_kind<Kind::max>(x, g, o);
      case Kind::argmax:
        return reduce_kind<Kind::argmax>(x, g, o);
    }
  }
  LF_ASSERT(d < x.shape.rank, describe_call(call), " dim ", d, " not normalised");
  const Geometry g = geometry(x, d);
  LF_CHECK(g.R > 0 || kind == Kind::sum || kind == Kind::mean, op_name(call.op),
           "cannot reduce over dim ", d, " of size 0 of ", dtype_name(x.dtype), x.shape.str(),
           " (the result has no identity)");
  switch (kind) {
    case Kind::sum:
      return reduce_kind<Kind::sum>(x, g, o);
    case Kind::mean:
      return reduce_kind<Kind::mean>(x, g, o);
    case Kind::max:
      return reduce_kind<Kind::max>(x, g, o);
    case Kind::argmax:
      return reduce_kind<Kind::argmax>(x, g, o);
  }
}

}  // namespace livefuse::cpu
