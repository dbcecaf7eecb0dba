#include <dlpack/dlpack.h>

#include <algorithm>
#include <cstring>

#include "livefuse/dlpack.hpp"
#include "test_util.hpp"

namespace lf = livefuse;

TEST_CASE("tensor creation, dtypes and host round trip") {
  for (lf::Device dev : lftest::devices()) {
    CAPTURE(dev.str());
    for (lf::DType t :
         {lf::DType::f32, lf::DType::f16, lf::DType::bf16, lf::DType::i32, lf::DType::i64}) {
      CAPTURE(lf::dtype_name(t));
      lf::Tensor a = lf::arange(7, t, dev);
      CHECK(a.shape() == lf::Shape{7});
      CHECK(a.dtype() == t);
      CHECK(a.device() == dev);
      std::vector<double> v = a.to_doubles();
      for (int i = 0; i < 7; ++i) CHECK(v[i] == i);
      lf::Tensor f = lf::full({2, 3}, 1.5, t, dev);
      for (double x : f.to_doubles()) CHECK(x == (lf::is_floating(t) ? 1.5 : 1.0));
    }
  }
}

TEST_CASE("f16 and bf16 conversions round to nearest even and keep specials") {
  const std::vector<float> vals = {0.0f,     -0.0f,     1.0f,           -2.5f,
                                   65504.0f, 1e-7f,     6.1035156e-05f, 3.14159265f,
                                   INFINITY, -INFINITY, 70000.0f};
  lf::Tensor h = lf::from_floats(vals, {11}, lf::DType::f16, lf::Device::cpu());
  std::vector<float> back = h.to_floats();
  CHECK(back[2] == 1.0f);
  CHECK(back[3] == -2.5f);
  CHECK(back[4] == 65504.0f);
  CHECK(back[6] == 6.1035156e-05f);
  CHECK(std::abs(back[7] - 3.140625f) < 1e-6);  // nearest f16 to pi
  CHECK(std::isinf(back[8]));
  CHECK(std::isinf(back[10]));                       // overflow rounds to inf
  CHECK(std::abs(back[5] - 1.1920929e-07f) < 1e-9);  // subnormal
  lf::Tensor b = lf::from_floats({3.14159265f, NAN, 1.0f}, {3}, lf::DType::bf16, lf::Device::cpu());
  std::vector<float> bb = b.to_floats();
  CHECK(bb[0] == 3.140625f);
  CHECK(std::isnan(bb[1]));
  CHECK(bb[2] == 1.0f);
}

TEST_CASE("random tensors: each value is a function of its index, however the work is split") {
  // Values are made in parallel chunks (of 65536): a tensor's prefix is a shorter tensor of the
  // same seed, to the bit, across chunk boundaries and for both distributions and dtypes.
  const lf::Device cpu = lf::Device::cpu();
  for (lf::DType t : {lf::DType::f32, lf::DType::bf16}) {
    const std::vector<float> u = lf::rand_uniform({200003}, 9, -1, 1, t, cpu).to_floats();
    const std::vector<float> v = lf::rand_uniform({131073}, 9, -1, 1, t, cpu).to_floats();
    CHECK(std::equal(v.begin(), v.end(), u.begin()));
    const std::vector<float> n = lf::rand_normal({140000}, 5, 0, 1, t, cpu).to_floats();
    const std::vector<float> m = lf::rand_normal({65537}, 5, 0, 1, t, cpu).to_floats();
    CHECK(std::equal(m.begin(), m.end(), n.begin()));
  }
}

TEST_CASE("random tensors are seeded, device independent and not constant") {
  lf::Tensor a = lf::rand_uniform({1000}, 42, -1, 1, lf::DType::f32, lf::Device::cpu());
  lf::Tensor b = lf::rand_uniform({1000}, 42, -1, 1, lf::DType::f32, lf::Device::cpu());
  lf::Tensor c = lf::rand_uniform({1000}, 43, -1, 1, lf::DType::f32, lf::Device::cpu());
  CHECK(a.to_floats() == b.to_floats());
  CHECK(a.to_floats() != c.to_floats());
  double mn = 1, mx = -1;
  for (float x : a.to_floats()) mn = std::min<double>(mn, x), mx = std::max<double>(mx, x);
  CHECK(mn >= -1.0);
  CHECK(mx < 1.0);
  CHECK(mx - mn > 1.5);
  lf::Tensor n = lf::rand_normal({4000}, 7, 0.0, 2.0, lf::DType::f32, lf::Device::cpu());
  double s = 0, s2 = 0;
  for (float x : n.to_floats()) s += x, s2 += double(x) * x;
  CHECK(std::abs(s / 4000) < 0.15);
  CHECK(std::abs(std::sqrt(s2 / 4000) - 2.0) < 0.15);
}

TEST_CASE("views share storage and read correctly") {
  lf::Tensor a = lf::arange(24, lf::DType::f32, lf::Device::cpu()).reshape({2, 3, 4});
  lf::Tensor t = a.transpose(0, 2);  // [4, 3, 2]
  CHECK(t.shape() == lf::Shape{4, 3, 2});
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.impl()->storage == a.impl()->storage);
  std::vector<double> v = t.to_doubles();
  // t[i][j][k] = a[k][j][i] = k*12 + j*4 + i
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) CHECK(v[i * 6 + j * 2 + k] == k * 12 + j * 4 + i);
  lf::Tensor s = a.slice(2, 1, 4, 2);  // [2, 3, 2]: columns 1 and 3
  std::vector<double> sv = s.to_doubles();
  CHECK(sv[0] == 1);
  CHECK(sv[1] == 3);
  CHECK(sv[11] == 23);
  lf::Tensor r = t.reshape({24});  // needs a copy: not contiguous
  CHECK(r.is_contiguous());
  CHECK(r.to_doubles() == v);
}

TEST_CASE("wrap: non-owning views of host memory, deleter runs once") {
  static int deleted = 0;
  std::vector<float> host = {1, 2, 3, 4, 5, 6};
  {
    lf::Tensor w = lf::Tensor::wrap(host.data(), {2, 3}, lf::DType::f32, lf::Device::cpu(),
                                    [](void*) { ++deleted; });
    lf::Tensor y = lf::add(w, 1.0);
    CHECK(y.to_floats() == std::vector<float>{2, 3, 4, 5, 6, 7});
    host[0] = 10;  // shared, not copied
    CHECK(w.to_floats()[0] == 10);
  }
  CHECK(deleted == 1);
  CHECK_THROWS_AS(lf::Tensor::wrap(nullptr, {2}, lf::DType::f32, lf::Device::cpu()), lf::Error);
}

TEST_CASE("dlpack export and import round trip without copies") {
  lf::Tensor a = lf::rand_uniform({3, 5}, 1, -1, 1, lf::DType::f32, lf::Device::cpu());
  DLManagedTensor* m = lf::to_dlpack(a);
  REQUIRE(m != nullptr);
  CHECK(m->dl_tensor.ndim == 2);
  CHECK(m->dl_tensor.shape[1] == 5);
  lf::Tensor b = lf::from_dlpack(m);
  CHECK(b.data_ptr() == a.data_ptr());
  CHECK(b.to_floats() == a.to_floats());
  lf::Tensor bt = lf::from_dlpack(lf::to_dlpack(a.transpose(0, 1)));
  CHECK(bt.to_floats() == a.transpose(0, 1).to_floats());
}

TEST_CASE("memory pool counters track use, reuse and peak") {
  const lf::MemoryStats before = lf::memory_stats(lf::Device::cpu());
  {
    lf::Tensor a = lf::empty({1 << 20}, lf::DType::f32, lf::Device::cpu());
    const lf::MemoryStats during = lf::memory_stats(lf::Device::cpu());
    CHECK(during.bytes_in_use >= before.bytes_in_use + (4u << 20));
    CHECK(during.peak_in_use >= during.bytes_in_use);
  }
  const lf::MemoryStats after = lf::memory_stats(lf::Device::cpu());
  CHECK(after.bytes_in_use == before.bytes_in_use);
  CHECK(after.bytes_cached >= (4u << 20));  // kept for reuse
  lf::empty_cache(lf::Device::cpu());
  CHECK(lf::memory_stats(lf::Device::cpu()).bytes_cached == 0);
}

TEST_CASE("errors name the op, the shapes and what was expected; the runtime stays usable") {
  lf::Tensor a = lf::rand_uniform({2, 3}, 1, -1, 1, lf::DType::f32, lf::Device::cpu());
  lf::Tensor b = lf::rand_uniform({4, 5}, 2, -1, 1, lf::DType::f32, lf::Device::cpu());
  try {
    (void)lf::add(a, b);
    FAIL("expected an error");
  } catch (const lf::Error& e) {
    const std::string m = e.what();
    CHECK(m.find("[add]") != std::string::npos);
    CHECK(m.find("[2, 3]") != std::string::npos);
    CHECK(m.find("[4, 5]") != std::string::npos);
  }
  try {
    (void)lf::matmul(a, b);
    FAIL("expected an error");
  } catch (const lf::Error& e) {
    CHECK(std::string(e.what()).find("inner dimensions") != std::string::npos);
  }
  CHECK_THROWS_AS((void)lf::sum(a, 2), lf::Error);
  CHECK_THROWS_AS((void)lf::add(a, lf::cast(a, lf::DType::f16)), lf::Error);
  CHECK_THROWS_AS((void)lf::exp(lf::Tensor()), lf::Error);
  CHECK_THROWS_AS((void)lf::reshape(a, {4, 2}), lf::Error);
  CHECK_THROWS_AS((void)lf::parse_dtype("f8"), lf::Error);
  CHECK_THROWS_AS((void)lf::parse_device("tpu"), lf::Error);
  // Still usable.
  lf::Tensor c = lf::add(a, a);
  std::vector<float> av = a.to_floats(), cv = c.to_floats();
  for (size_t i = 0; i < av.size(); ++i) CHECK(cv[i] == av[i] * 2);
}
