// Seeded random tensors. Values come from a counter-based generator (splitmix64 of seed and
// element index), computed on the host: the same seed gives the same tensor on every device
// and thread count, which the differential tests rely on. Being a function of the index, they
// are computed in parallel (from_index_fn): one thread took a minute for a Llama-1B's weights.
#include <cmath>

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
}  // namespace

Tensor rand_uniform(const Shape& shape, uint64_t seed, double lo, double hi, DType dtype,
                    Device device) {
  LF_CHECK(hi >= lo, "rand_uniform", "hi (", hi, ") must be >= lo (", lo, ")");
  const bool integral = is_integral(dtype);
  return from_index_fn(shape, dtype, device, [&](int64_t k) {
    const double x = lo + (hi - lo) * unit(seed, static_cast<uint64_t>(k));
    return integral ? std::floor(x) : x;
  });
}

Tensor rand_normal(const Shape& shape, uint64_t seed, double mean, double stddev, DType dtype,
                   Device device) {
  return from_index_fn(shape, dtype, device, [&](int64_t k) {  // Box-Muller, a pair a value
    const uint64_t i = static_cast<uint64_t>(k);
    const double u1 = 1.0 - unit(seed, 2 * i), u2 = unit(seed, 2 * i + 1);
    return mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  });
}

}  // namespace livefuse
