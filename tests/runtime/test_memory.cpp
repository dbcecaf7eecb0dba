// The caps on cached memory (LIVEFUSE_CACHE_MAX_MB): what a pool keeps for reuse stays under
// the cap, and the blocks it hands back are the oldest.
#include <set>

#include "runtime/block_cache.hpp"
#include "runtime/memory_pool.hpp"
#include "test_util.hpp"

namespace lf = livefuse;

namespace {
const lf::Device cpu = lf::Device::cpu();
constexpr size_t kMiB = size_t(1) << 20;

// f32 elements filling exactly `bytes` (the CPU pool's size classes are powers of two).
int64_t floats(size_t bytes) { return static_cast<int64_t>(bytes / 4); }

struct CacheCap {
  lf::Config saved = lf::config();
  explicit CacheCap(int mb) {
    lf::Config c = saved;
    c.cache_max_mb = mb;
    lf::set_config_for_testing(c);
    lf::empty_cache(cpu);
  }
  ~CacheCap() {
    lf::empty_cache(cpu);
    lf::set_config_for_testing(saved);
  }
};
}  // namespace

TEST_CASE(
    "memory: the CPU pool keeps at most LIVEFUSE_CACHE_MAX_MB cached, returning the oldest first") {
  CacheCap cap(1);
  const lf::MemoryStats m0 = lf::memory_stats(cpu);
  {
    // 256 KiB, then 2 x 512 KiB freed: 1.25 MiB, over the 1 MiB cap by the oldest block.
    lf::Tensor a = lf::empty({floats(kMiB / 4)}, lf::DType::f32, cpu);
    lf::Tensor b = lf::empty({floats(kMiB / 2)}, lf::DType::f32, cpu);
    lf::Tensor c = lf::empty({floats(kMiB / 2)}, lf::DType::f32, cpu);
    a = lf::Tensor();
    b = lf::Tensor();
    c = lf::Tensor();
  }
  const lf::MemoryStats m1 = lf::memory_stats(cpu);
  CHECK(m1.bytes_cached == kMiB);
  CHECK(m1.cache_evictions == m0.cache_evictions + 1);
  CHECK(m1.bytes_returned == m0.bytes_returned + kMiB / 4);
  {
    // The 256 KiB block was the one returned: this allocation misses, the cache is untouched...
    lf::Tensor a = lf::empty({floats(kMiB / 4)}, lf::DType::f32, cpu);
    CHECK(lf::memory_stats(cpu).bytes_cached == kMiB);
    // ... and a 512 KiB one is served from it.
    lf::Tensor b = lf::empty({floats(kMiB / 2)}, lf::DType::f32, cpu);
    CHECK(lf::memory_stats(cpu).bytes_cached == kMiB / 2);
  }
  // Many sizes, many blocks: never more than the cap.
  for (int round = 0; round < 4; ++round) {
    std::vector<lf::Tensor> held;
    for (int k = 0; k < 24; ++k)
      held.push_back(lf::empty({floats(size_t(4096) << (k % 8))}, lf::DType::f32, cpu));
    held.clear();
    CHECK(lf::memory_stats(cpu).bytes_cached <= kMiB);
  }
}

TEST_CASE("memory: LIVEFUSE_CACHE_MAX_MB=0 keeps nothing cached on the CPU") {
  CacheCap cap(0);
  { lf::Tensor a = lf::empty({floats(kMiB)}, lf::DType::f32, cpu); }
  CHECK(lf::memory_stats(cpu).bytes_cached == 0);
}

TEST_CASE("config: LIVEFUSE_CACHE_MAX_MB is read, and a bad value keeps the default") {
  static const char* value = nullptr;
  auto env = [](const char* n) -> const char* {
    return std::string_view(n) == "LIVEFUSE_CACHE_MAX_MB" ? value : nullptr;
  };
  std::vector<std::string> warnings;
  CHECK(lf::parse_config(env, &warnings).cache_max_mb == 1024);
  value = "64";
  CHECK(lf::parse_config(env, &warnings).cache_max_mb == 64);
  CHECK(warnings.empty());
  value = "-3";
  CHECK(lf::parse_config(env, &warnings).cache_max_mb == 1024);
  CHECK(warnings.size() == 1);
}

// The LRU both pools use (the CUDA block cache too, keyed by size and stream), on its own.
TEST_CASE(
    "memory: a block cache takes the newest block of a key, evicts the oldest of all, defers "
    "during a capture") {
  struct Hash {
    size_t operator()(int k) const { return std::hash<int>()(k); }
  };
  lf::BlockCache<int, Hash> cache;
  std::vector<uintptr_t> released;
  auto release = [&](const auto& b) { released.push_back(reinterpret_cast<uintptr_t>(b.ptr)); };
  auto block = [](uintptr_t p, size_t bytes, int key) {
    return lf::BlockCache<int, Hash>::Block{reinterpret_cast<void*>(p), bytes, key};
  };
  cache.put(block(1, 100, 7), 300, true, release);
  cache.put(block(2, 100, 8), 300, true, release);
  cache.put(block(3, 100, 7), 300, true, release);
  CHECK(cache.cached() == 300);
  CHECK(released.empty());
  cache.put(block(4, 100, 9), 300, true, release);  // over the cap: the oldest (1) goes
  REQUIRE(released.size() == 1);
  CHECK(released[0] == 1);
  CHECK(cache.take(7) == reinterpret_cast<void*>(3));  // the newest of key 7
  CHECK(cache.take(7) == nullptr);                     // 1 was returned
  // A capture open: over the cap for now, enforced by the next put that may evict.
  cache.put(block(5, 200, 7), 300, false, release);
  CHECK(cache.cached() == 400);
  CHECK(released.size() == 1);
  cache.put(block(6, 100, 8), 300, true, release);  // 2, then 4 go: 5 and 6 stay
  REQUIRE(released.size() == 3);
  CHECK(released[1] == 2);
  CHECK(released[2] == 4);
  CHECK(cache.cached() == 300);
  CHECK(cache.counters().evictions == 3);
  CHECK(cache.counters().bytes_returned == 300);
  cache.release_all(release);
  CHECK(released.size() == 5);
  CHECK(cache.cached() == 0);
  CHECK(cache.take(8) == nullptr);
}

TEST_CASE("memory: CUDA size classes hold the request, waste little, and absorb growth") {
  size_t prev = 0;
  for (size_t b = 1; b < (size_t(64) << 20); b = b * 9 / 8 + 1) {
    const size_t c = livefuse::cuda_size_class(b);
    CHECK(c >= b);
    CHECK(c >= prev);  // monotone: a larger request never gets a smaller block
    prev = c;
    if (b > (size_t(64) << 10)) CHECK(double(c) <= 1.25 * double(b));
    if (b > (size_t(16) << 20)) CHECK(c - b < (size_t(2) << 20));
    CHECK(livefuse::cuda_size_class(c) == c);  // a class is its own class
  }
  // A GPT-2 KV cache (one f16 row of 768 a step) from 32 to 4096 rows crosses few classes: each
  // crossing is one allocation from the pool, every other step reuses a cached block.
  std::set<size_t> classes;
  for (size_t n = 32; n <= 4096; ++n) classes.insert(livefuse::cuda_size_class(n * 768 * 2));
  CHECK(classes.size() < 40);
}
