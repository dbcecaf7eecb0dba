#pragma once
// Walking a strided view in row-major order, shared by the eager CPU kernels and the fused-group
// interpreter: elements [lo, lo + n) are visited one run along the innermost dim at a time, the
// outer indices advanced like an odometer (no division per element).
#include <algorithm>
#include <cstdint>

#include "livefuse/shape.hpp"

namespace livefuse::cpu {

// f(done, off, m, s): positions done .. done+m-1 of the walk are the elements at offsets off,
// off + s, ..., off + (m-1)*s. `st` holds one stride (in elements) per dim of `shape`.
template <class F>
inline void for_each_run(const Shape& shape, const int64_t* st, int64_t lo, int64_t n, F&& f) {
  const int r = shape.rank;
  if (r == 0) {  // a 0-d view: its one element, n times
    if (n > 0) f(int64_t{0}, int64_t{0}, n, int64_t{0});
    return;
  }
  int64_t idx[kMaxDims];
  int64_t off = 0, rem = lo;
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = rem % shape.v[d];
    rem /= shape.v[d];
    off += idx[d] * st[d];
  }
  const int64_t inner = shape.v[r - 1], s = st[r - 1];
  int64_t done = 0;
  while (done < n) {
    const int64_t m = std::min(inner - idx[r - 1], n - done);
    f(done, off, m, s);
    done += m;
    idx[r - 1] += m;
    off += m * s;
    if (idx[r - 1] < inner) continue;
    off -= inner * s;
    idx[r - 1] = 0;
    for (int d = r - 2; d >= 0; --d) {
      off += st[d];
      if (++idx[d] < shape.v[d]) break;
      off -= shape.v[d] * st[d];
      idx[d] = 0;
    }
  }
}

}  // namespace livefuse::cpu
