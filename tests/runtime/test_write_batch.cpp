// Held in-place writes (runtime/write_batch.hpp): a static KV cache's K and V writes share one
// launch, and nothing -- an op, a sync point, a conflicting write, another thread, a thread's
// exit -- sees the destination before its held write landed.
#include <future>
#include <thread>

#include "runtime/plan.hpp"
#include "test_util.hpp"

namespace lf = livefuse;
using lf::DType;

namespace {

struct Counts {
  uint64_t held = lf::matcher_counters().writes_held.load();
  uint64_t launches = lf::matcher_counters().write_launches.load();
  uint64_t held_since() const { return lf::matcher_counters().writes_held.load() - held; }
  uint64_t launches_since() const {
    return lf::matcher_counters().write_launches.load() - launches;
  }
};

// [1, 2, 6, 4] cache and [1, 2, 1, 4] rows of distinct values.
lf::Tensor rows(float base, lf::Device dev) {
  std::vector<float> v(8);
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + static_cast<float>(i);
  return lf::from_floats(v, {1, 2, 1, 4}, DType::f32, dev);
}

// What index_copy(cache of zeros, 2, pos, rows(base)) leaves.
std::vector<float> cache_with(int64_t pos, float base) {
  std::vector<float> want(48, 0.0f);
  for (int h = 0; h < 2; ++h)
    for (int d = 0; d < 4; ++d)
      want[static_cast<size_t>(h * 24 + pos * 4 + d)] = base + static_cast<float>(h * 4 + d);
  return want;
}

}  // namespace

TEST_CASE("held writes: a cache's K and V writes share one launch, enqueued by the next call") {
  const lftest::ScopedConfig on(&lf::Config::mode, lf::Mode::on);
  for (const lf::Device dev : lftest::devices()) {
    INFO(dev.str());
    const lf::Tensor k = lf::zeros({1, 2, 6, 4}, DType::f32, dev),
                     v = lf::zeros({1, 2, 6, 4}, DType::f32, dev);
    // K and V as a decode step has them: views of one product.
    const lf::Tensor kv = lf::concat({rows(10, dev), rows(20, dev)}, 2);
    const lf::Tensor kt = lf::slice(kv, 2, 0, 1), vt = lf::slice(kv, 2, 1, 2);
    const Counts c;
    lf::index_copy(k, 2, 3, kt);
    lf::index_copy(v, 2, 3, vt);
    CHECK(c.held_since() == 2);
    CHECK(c.launches_since() == 0);        // nothing enqueued yet
    const lf::Tensor sum = lf::add(k, v);  // the next call: the batch first, in one launch
    CHECK(c.launches_since() == 1);
    std::vector<float> want = cache_with(3, 10), vw = cache_with(3, 20);
    for (size_t i = 0; i < want.size(); ++i) want[i] += vw[i];
    CHECK(sum.to_floats() == want);
    CHECK(k.to_floats() == cache_with(3, 10));
  }
}

TEST_CASE("held writes: every way to read the destination sees the write") {
  const lftest::ScopedConfig on(&lf::Config::mode, lf::Mode::on);
  for (const lf::Device dev : lftest::devices()) {
    INFO(dev.str());
    const auto written = [&] {
      const lf::Tensor k = lf::zeros({1, 2, 6, 4}, DType::f32, dev);
      const Counts c;
      lf::index_copy(k, 2, 5, rows(1, dev));
      CHECK(c.held_since() == 1);
      return k;
    };
    CHECK(written().to_floats() == cache_with(5, 1));  // a host copy (sync point)
    CHECK(lf::slice(written(), 2, 5, 6).contiguous().to_floats() ==
          rows(1, dev).to_floats());  // a view, then an op
    {
      const lf::Tensor other = lf::zeros({1, 2, 6, 4}, DType::f32, dev);
      const lf::Tensor k = written();
      const Counts c;
      lf::copy_into(other, k);  // the held write's destination as the next write's source
      CHECK(c.launches_since() == 1);
      CHECK(other.to_floats() == cache_with(5, 1));
    }
    if (dev.is_cpu()) {
      const lf::Tensor k = written();
      const float* p = static_cast<const float*>(k.data_ptr());
      CHECK(p[5 * 4] == 1.0f);  // element [0, 0, 5, 0] through the program's own pointer
      CHECK(p[24 + 5 * 4 + 3] == 8.0f);
    }
    {
      const lf::Tensor k = written();
      lf::synchronize(dev);
      CHECK(k.to_floats() == cache_with(5, 1));
    }
  }
}

TEST_CASE("held writes: writes that touch one storage keep eager order") {
  const lftest::ScopedConfig on(&lf::Config::mode, lf::Mode::on);
  for (const lf::Device dev : lftest::devices()) {
    INFO(dev.str());
    const lf::Tensor a = lf::full({2, 4}, 1.0, DType::f32, dev),
                     b = lf::full({2, 4}, 2.0, DType::f32, dev);
    const lf::Tensor x = lf::full({2, 4}, 3.0, DType::f32, dev);
    {
      const Counts c;
      lf::copy_into(a, b);  // a <- 2, held
      lf::copy_into(b, x);  // writes what the held write reads: the held one goes first
      CHECK(c.launches_since() == 1);
      CHECK(a.to_floats() == std::vector<float>(8, 2.0f));
      CHECK(b.to_floats() == std::vector<float>(8, 3.0f));
    }
    {
      // Operands made first: any op call in between would enqueue the batch by itself.
      const lf::Tensor row = lf::slice(a, 0, 0, 1), five = lf::full({1, 4}, 5.0, DType::f32, dev);
      const lf::Tensor six = lf::full({1, 4}, 6.0, DType::f32, dev);
      const Counts c;
      lf::copy_into(row, five);
      lf::copy_into(row, six);  // the same rows again: the first goes first
      lf::copy_into(b, a);      // reads what both wrote
      CHECK(c.held_since() == 3);
      CHECK(c.launches_since() == 2);
      CHECK(b.to_floats() == std::vector<float>{6, 6, 6, 6, 2, 2, 2, 2});
    }
  }
}

TEST_CASE("held writes: memory the program can reach is written at the call") {
  const lftest::ScopedConfig on(&lf::Config::mode, lf::Mode::on);
  const lf::Tensor k = lf::zeros({1, 2, 6, 4}, DType::f32, lf::Device::cpu());
  const float* p = static_cast<const float*>(k.data_ptr());  // exposed from now on
  const Counts c;
  lf::index_copy(k, 2, 0, rows(4, lf::Device::cpu()));
  CHECK(c.held_since() == 0);
  CHECK(p[0] == 4.0f);  // no call, no sync point in between
  // A source the program can reach: read now, not at the next call.
  std::vector<float> mine(8, 7.0f);
  const lf::Tensor wrapped =
      lf::Tensor::wrap(mine.data(), {1, 2, 1, 4}, DType::f32, lf::Device::cpu());
  const lf::Tensor v = lf::zeros({1, 2, 6, 4}, DType::f32, lf::Device::cpu());
  lf::index_copy(v, 2, 2, wrapped);
  mine.assign(8, -1.0f);
  CHECK(c.held_since() == 0);
  CHECK(v.to_floats()[2 * 4] == 7.0f);
}

TEST_CASE("held writes: another thread's call and a thread's exit see the write") {
  const lftest::ScopedConfig on(&lf::Config::mode, lf::Mode::on);
  for (const lf::Device dev : lftest::devices()) {
    INFO(dev.str());
    const lf::Tensor k = lf::zeros({1, 2, 6, 4}, DType::f32, dev);
    std::promise<void> written, read;
    std::thread writer([&] {
      lf::index_copy(k, 2, 2, rows(30, dev));  // held by this thread
      written.set_value();
      read.get_future().wait();  // still holding while the other thread reads
    });
    written.get_future().wait();
    const lf::Tensor y = lf::mul(k, 2.0);  // this thread's op on the storage enqueues it
    read.set_value();
    writer.join();
    std::vector<float> want = cache_with(2, 30);
    for (float& f : want) f *= 2.0f;
    CHECK(y.to_floats() == want);

    const lf::Tensor v = lf::zeros({1, 2, 6, 4}, DType::f32, dev);
    std::thread([&] { lf::index_copy(v, 2, 4, rows(40, dev)); }).join();  // exits holding it
    CHECK(v.to_floats() == cache_with(4, 40));
  }
}

TEST_CASE("held writes: off, LIVEFUSE_WRITE_BATCH=0 and a failed write") {
  for (const lf::Device dev : lftest::devices()) {
    INFO(dev.str());
    {
      const lftest::ScopedConfig off(&lf::Config::mode, lf::Mode::off);
      const Counts c;
      lf::index_copy(lf::zeros({1, 2, 6, 4}, DType::f32, dev), 2, 0, rows(0, dev));
      CHECK(c.held_since() == 0);
    }
    const lftest::ScopedConfig on(&lf::Config::mode, lf::Mode::on);
    {
      const lftest::ScopedConfig no(&lf::Config::write_batch, false);
      const Counts c;
      lf::index_copy(lf::zeros({1, 2, 6, 4}, DType::f32, dev), 2, 0, rows(0, dev));
      CHECK(c.held_since() == 0);
    }
    const lf::Tensor k = lf::zeros({1, 2, 6, 4}, DType::f32, dev);
    lf::index_copy(k, 2, 1, rows(50, dev));
    CHECK_THROWS_AS(lf::index_copy(k, 2, 6, rows(60, dev)), lf::Error);  // out of range
    CHECK_THROWS_AS(lf::index_copy(k, 2, 0, rows(60, dev).reshape({2, 4})), lf::Error);
    CHECK(k.to_floats() == cache_with(1, 50));  // the held write survived the errors
  }
}
