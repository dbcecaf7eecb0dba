#include <thread>

#include "test_util.hpp"

namespace lf = livefuse;

TEST_CASE("streams: per-thread current stream, guard restores, ids are distinct") {
  const lf::Device cpu = lf::Device::cpu();
  const lf::Stream def = lf::Stream::current(cpu);
  const lf::Stream s1 = lf::Stream::create(cpu);
  CHECK_FALSE(s1 == def);
  {
    lf::StreamGuard g(s1);
    CHECK(lf::Stream::current(cpu) == s1);
    std::thread t([&] { CHECK(lf::Stream::current(cpu) == def); });  // per thread
    t.join();
  }
  CHECK(lf::Stream::current(cpu) == def);
  lf::synchronize(cpu);
}

TEST_CASE("streams: wrapping one handle again gives the same stream, others a new one") {
  // Only the registry is involved: the handles are never used, so no GPU is needed.
  const lf::Device gpu = lf::Device::cuda(0);
  int a = 0, b = 0;
  const lf::Stream w1 = lf::Stream::wrap(&a, gpu);
  const lf::Stream w2 = lf::Stream::wrap(&a, gpu);
  const lf::Stream w3 = lf::Stream::wrap(&b, gpu);
  CHECK(w1 == w2);
  CHECK(w1.id() == w2.id());
  CHECK_FALSE(w1 == w3);
  for (int i = 0; i < 1000; ++i) (void)lf::Stream::wrap(&a, gpu);
  CHECK(lf::Stream::wrap(&b, gpu).id() == w3.id());  // the registry did not grow
  CHECK(lf::Stream::create(lf::Device::cpu()).id() == w3.id() + 1);
  CHECK_THROWS_WITH_AS(lf::Stream::wrap(&a, lf::Device::cpu()),
                       doctest::Contains("only CUDA streams can be wrapped"), lf::Error);
}

LF_CUDA_TEST_CASE("streams: CUDA work on a side stream is ordered and synchronised") {
  const lf::Device gpu = lf::Device::cuda(0);
  lf::Stream s = lf::Stream::create(gpu);
  lf::Tensor a = lf::rand_uniform({1 << 16}, 3, -1, 1, lf::DType::f32, gpu);
  lf::Tensor y;
  {
    lf::StreamGuard g(s);
    y = lf::mul(lf::add(a, 1.0), 2.0);
    s.synchronize();
  }
  std::vector<float> av = a.to_floats(), yv = y.to_floats();
  for (size_t i = 0; i < av.size(); i += 97) CHECK(yv[i] == doctest::Approx((av[i] + 1) * 2));
}
