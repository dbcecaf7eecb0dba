// Seeded random tensors. Values come from a counter-based generator (splitmix64 of seed and
// element index), computed on the host: the same seed gives the same tensor on every device
// and thread count, which the differential tests rely on. Being a function of the index, they
// are computed in parallel: one thread took a minute for a Llama-1B's random weights.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cmath>

#include "livefuse/config.hpp"
#include "livefuse/error.hpp"
#include "livefuse/tensor.hpp"
#include "runtime/host_values.hpp"

namespace livefuse {

namespace {
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline double unit(uint64_t seed, uint64_t i) {  // in [0, 1)
  return static_cast<double>(splitmix64(seed * 0x2545f4914f6cdd1dull + i) >> 11) * 0x1.0p-53;
}
// v[k] = f(k) for every k, in chunks over the TBB threads (as many as LIVEFUSE_CPU_THREADS
// allows: config() is read first, which sets that limit).
template <class F>
void fill_by_index(std::vector<double>& v, F&& f) {
  (void)config();
  tbb::parallel_for(tbb::blocked_range<size_t>(0, v.size(), size_t{1} << 16),
                    [&](const tbb::blocked_range<size_t>& r) {
                      for (size_t k = r.begin(); k < r.end(); ++k) v[k] = f(k);
                    });
}
}  // namespace

Tensor rand_uniform(const Shape& shape, uint64_t seed, double lo, double hi, DType dtype,
                    Device device) {
  LF_CHECK(hi >= lo, "rand_uniform", "hi (", hi, ") must be >= lo (", lo, ")");
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  const bool integral = is_integral(dtype);
  fill_by_index(v, [&](size_t k) {
    const double x = lo + (hi - lo) * unit(seed, k);
    return integral ? std::floor(x) : x;
  });
  return from_doubles_impl(v, shape, dtype, device);
}

Tensor rand_normal(const Shape& shape, uint64_t seed, double mean, double stddev, DType dtype,
                   Device device) {
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  fill_by_index(v, [&](size_t k) {  // Box-Muller, one value per pair of uniforms
    const double u1 = 1.0 - unit(seed, 2 * k), u2 = unit(seed, 2 * k + 1);
    return mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  });
  return from_doubles_impl(v, shape, dtype, device);
}

}  // namespace livefuse
