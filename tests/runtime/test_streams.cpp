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
