// The CPU GEMM's cache of packed B operands (kernels/cpu/gemm_pack_cache.hpp): hits, what
// invalidates an entry, that a freed and reused block is never served stale, and the cap.
#include <cstring>
#include <new>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_pack_cache.hpp"
#include "tests/ops/ops_util.hpp"

using namespace opstest;
using livefuse::Storage;
using livefuse::cpu::PackCache;
using livefuse::cpu::PackKey;
using livefuse::cpu::PackedPanels;

namespace {

PackCache::Counters global_counters() { return livefuse::cpu::pack_cache().counters(); }

std::vector<double> linear_ref(const Tensor& x, const Tensor& w) {
  const std::vector<double> xv = x.to_doubles(), wv = w.to_doubles();
  const int64_t K = w.shape()[1], N = w.shape()[0], M = x.numel() / K;
  std::vector<double> out(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += xv[m * K + k] * wv[n * K + k];
      out[m * N + n] = acc;
    }
  return out;
}

// M, K, N past one block in every direction (the blocks' edges), M past the small-M path.
constexpr int64_t kM = 130, kK = 300, kN = 270;

// x @ w^T straight through the CPU GEMM, as linear runs it: the cache's counters then count
// exactly these calls, whatever the runtime around it decides.
Tensor gemm_linear(const Tensor& x, const Tensor& w) {
  using namespace livefuse::cpu;
  const Tensor out = lf::empty({kM, kN}, DType::f32, Device::cpu());
  GemmProblem p;
  p.M = kM, p.N = kN, p.K = kK;
  p.a = {static_cast<const std::byte*>(x.impl()->data()), x.dtype(), kK, 1, StridedIndex(), nullptr};
  p.b = {static_cast<const std::byte*>(w.impl()->data()), w.dtype(), 1, kK, StridedIndex(), w.impl()->storage};
  p.out = static_cast<std::byte*>(out.impl()->data());
  gemm(p);
  return out;
}

void check_linear(const Tensor& x, const Tensor& w, const std::string& what) {
  const double atol = lftest::tolerance(w.dtype()) * std::sqrt(double(kK) + 1);
  check_close(gemm_linear(x, w), linear_ref(x, w), Shape{kM, kN}, DType::f32,
              lftest::tolerance(w.dtype()), atol, what);
}

std::vector<float> pattern(size_t n, float v) { return std::vector<float>(n, v); }

}  // namespace

TEST_CASE("pack cache: a weight is packed on its second use and served from then on") {
  for (DType t : float_dtypes()) {
    livefuse::cpu::pack_cache().clear();
    const Tensor x = rand_tensor({kM, kK}, t, Device::cpu(), 51);
    const Tensor w = rand_tensor({kN, kK}, t, Device::cpu(), 52);
    const auto before = global_counters();
    for (int i = 0; i < 4; ++i) check_linear(x, w, case_name("linear", t, Device::cpu(), "call " + std::to_string(i)));
    const auto after = global_counters();
    CHECK(after.admitted - before.admitted == 1);
    CHECK(after.hits - before.hits == 2);  // calls 3 and 4
    CHECK(after.entries == 1);
    CHECK(after.bytes >= size_t(kK * kN) * sizeof(float));
  }
}

TEST_CASE("pack cache: a transposed weight view (matmul x @ W^T) hits and stays correct") {
  livefuse::cpu::pack_cache().clear();
  const Tensor x = rand_tensor({kM, kK}, DType::f32, Device::cpu(), 53);
  const Tensor w = rand_tensor({kN, kK}, DType::f32, Device::cpu(), 54);
  const Tensor wt = lf::transpose(w, 0, 1);
  const auto before = global_counters();
  for (int i = 0; i < 3; ++i) {
    const double atol = lftest::tolerance(DType::f32) * std::sqrt(double(kK) + 1);
    check_close(lf::matmul(x, wt), linear_ref(x, w), Shape{kM, kN}, DType::f32, lftest::tolerance(DType::f32), atol,
                "matmul x @ W^T, call " + std::to_string(i));
  }
  CHECK(global_counters().hits - before.hits == 1);
}

TEST_CASE("pack cache: memory the program may write is never served from the cache") {
  livefuse::cpu::pack_cache().clear();
  const auto start = global_counters();
  const Tensor x = rand_tensor({kM, kK}, DType::f32, Device::cpu(), 55);
  const Tensor w = rand_tensor({kN, kK}, DType::f32, Device::cpu(), 56);
  for (int i = 0; i < 3; ++i) check_linear(x, w, "before exposure");
  REQUIRE(global_counters().hits - start.hits == 1);
  // data_ptr() exposes the storage: the program may now write it at any time.
  auto* p = static_cast<float*>(w.data_ptr());
  for (int64_t i = 0; i < kN * kK; i += 7) p[i] = -p[i] + 0.5f;
  const auto exposed = global_counters();
  check_linear(x, w, "after a write through data_ptr");
  p[3] = 4.0f;
  check_linear(x, w, "after a second write");
  const auto after = global_counters();
  CHECK(after.hits == exposed.hits);
  CHECK(after.uncacheable - exposed.uncacheable == 2);
  CHECK(after.stale - exposed.stale == 1);
  CHECK(after.entries == 0);

  SUBCASE("a wrapped buffer, rewritten between calls") {
    std::vector<float> buf(static_cast<size_t>(kN * kK));
    const std::vector<double> init = rand_tensor({kN, kK}, DType::f32, Device::cpu(), 57).to_doubles();
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(init[i]);
    const Tensor wrapped = Tensor::wrap(buf.data(), {kN, kK}, DType::f32, Device::cpu());
    for (int i = 0; i < 3; ++i) {
      check_linear(x, wrapped, "wrapped, call " + std::to_string(i));
      for (float& v : buf) v = v * 0.5f + 0.25f;
    }
    CHECK(global_counters().hits == after.hits);
  }
  SUBCASE("exposed but promised immutable: cached") {
    const Tensor w2 = rand_tensor({kN, kK}, DType::f32, Device::cpu(), 58);
    (void)w2.data_ptr();
    w2.mark_immutable();
    for (int i = 0; i < 3; ++i) check_linear(x, w2, "immutable, call " + std::to_string(i));
    CHECK(global_counters().hits - after.hits == 1);
  }
}

TEST_CASE("pack cache: a freed storage's block handed out again is a new operand") {
  // The same Storage address and the same data address for two different storages: what a
  // pool that reuses blocks (and an allocator that reuses the Storage's own memory) can give.
  alignas(Storage) static unsigned char slot[sizeof(Storage)];
  static float data[64];
  auto make = [&] {
    auto* s = new (slot) Storage();
    s->ptr = data;
    s->bytes = sizeof data;
    return std::shared_ptr<Storage>(s, [](Storage* x) { x->~Storage(); });
  };
  PackCache cache;
  PackKey k;
  k.K = 8, k.N = 8, k.rs = 8, k.cs = 1;
  bool admit = false;
  auto s1 = make();
  CHECK(cache.find(s1, k, &admit) == nullptr);
  CHECK(!admit);
  CHECK(cache.find(s1, k, &admit) == nullptr);
  REQUIRE(admit);
  cache.insert(s1, k, std::make_shared<const std::vector<float>>(pattern(64, 1.0f)));
  PackedPanels hit = cache.find(s1, k, &admit);
  REQUIRE(hit != nullptr);
  CHECK((*hit)[0] == 1.0f);
  s1.reset();
  auto s2 = make();
  REQUIRE(static_cast<void*>(s2.get()) == static_cast<void*>(slot));
  CHECK(cache.find(s2, k, &admit) == nullptr);  // not s1's pack
  CHECK(!admit);                                // and a first sighting, not a second
  CHECK(cache.counters().stale == 1);

  SUBCASE("a bumped version drops the pack") {
    CHECK(cache.find(s2, k, &admit) == nullptr);
    REQUIRE(admit);
    cache.insert(s2, k, std::make_shared<const std::vector<float>>(pattern(64, 2.0f)));
    REQUIRE(cache.find(s2, k, &admit) != nullptr);
    s2->version.fetch_add(1);
    CHECK(cache.find(s2, k, &admit) == nullptr);
    CHECK(cache.counters().stale == 2);
  }
}

TEST_CASE("pack cache: freed and reallocated weights through linear give the new weight's result") {
  livefuse::cpu::pack_cache().clear();
  const auto start = global_counters();
  const Tensor x = rand_tensor({kM, kK}, DType::f32, Device::cpu(), 59);
  for (int round = 0; round < 4; ++round) {
    // Same size each round: the memory pool hands the freed block back to the next weight.
    const Tensor w = rand_tensor({kN, kK}, DType::f32, Device::cpu(), 60 + round);
    const double atol = lftest::tolerance(DType::f32) * std::sqrt(double(kK) + 1);
    for (int i = 0; i < 3; ++i)
      check_close(lf::linear(x, w), linear_ref(x, w), Shape{kM, kN}, DType::f32, lftest::tolerance(DType::f32),
                  atol, "round " + std::to_string(round) + ", call " + std::to_string(i));
  }
  CHECK(global_counters().hits - start.hits >= 4);  // the cache was in play every round
}

TEST_CASE("pack cache: the byte cap holds, least recently used first out") {
  PackCache cache(3 * 64 * sizeof(float));
  std::vector<std::shared_ptr<Storage>> s;
  static float data[4][64];
  PackKey k;
  k.K = 8, k.N = 8, k.rs = 8, k.cs = 1;
  bool admit = false;
  for (int i = 0; i < 4; ++i) {
    s.push_back(std::make_shared<Storage>());
    s.back()->ptr = data[i];
    cache.find(s.back(), k, &admit);
    cache.find(s.back(), k, &admit);
    REQUIRE(admit);
    cache.insert(s.back(), k, std::make_shared<const std::vector<float>>(pattern(64, float(i))));
    if (i == 2) REQUIRE(cache.find(s[0], k, &admit) != nullptr);  // 0 is now the most recent
  }
  const auto c = cache.counters();
  CHECK(c.bytes <= 3 * 64 * sizeof(float));
  CHECK(c.entries == 3);
  CHECK(c.evictions == 1);
  CHECK(cache.find(s[0], k, &admit) != nullptr);
  CHECK(cache.find(s[1], k, &admit) == nullptr);  // the least recently used one went
  CHECK(cache.find(s[3], k, &admit) != nullptr);
  // A pack larger than the whole cap is not kept.
  auto big = std::make_shared<Storage>();
  cache.find(big, k, &admit);
  cache.find(big, k, &admit);
  cache.insert(big, k, std::make_shared<const std::vector<float>>(pattern(4 * 64, 0.0f)));
  CHECK(cache.counters().bytes <= 3 * 64 * sizeof(float));
  CHECK(cache.find(big, k, &admit) == nullptr);
}

TEST_CASE("pack cache: a working set above the cap stops being packed whole, results stay right") {
  livefuse::cpu::PackCache& cache = livefuse::cpu::pack_cache();
  cache.clear();
  cache.set_capacity(size_t(kK * kN) * sizeof(float) * 2);  // two of the eight weights
  const auto start = cache.counters();
  const Tensor x = rand_tensor({kM, kK}, DType::f32, Device::cpu(), 70);
  std::vector<Tensor> ws;
  for (int i = 0; i < 8; ++i) ws.push_back(rand_tensor({kN, kK}, DType::f32, Device::cpu(), 71 + i));
  for (int pass = 0; pass < 24; ++pass)
    for (const Tensor& w : ws) {
      const Tensor y = gemm_linear(x, w);
      if (pass % 8 == 7) check_close(y, linear_ref(x, w), Shape{kM, kN}, DType::f32, 2e-5, 4e-4, "cycled weight");
    }
  const auto c = cache.counters();
  INFO("hits ", c.hits - start.hits, " admitted ", c.admitted - start.admitted, " evictions ",
       c.evictions - start.evictions, " misses ", c.misses - start.misses);
  CHECK(c.bytes <= size_t(kK * kN) * sizeof(float) * 2);
  CHECK(c.declined - start.declined > 0);
  CHECK(c.admitted - start.admitted < 8 * 24 / 2);
  cache.set_capacity(PackCache::kDefaultCapBytes);
}
