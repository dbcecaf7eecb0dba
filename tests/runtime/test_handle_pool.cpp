// The per-thread free list of handle blocks (runtime/handle_pool.hpp): blocks are reused, each
// thread keeps a bounded number, a handle freed on another thread or during a thread's exit is
// handled, and tensors made from it behave like any other.
#include <atomic>
#include <thread>
#include <vector>

#include "runtime/handle_pool.hpp"
#include "test_util.hpp"

namespace lf = livefuse;
namespace hp = livefuse::handle_pool;

namespace {
// AddressSanitizer builds take every block from the heap (handle_pool.cpp), so the list stays
// empty there: the cases that look at it are skipped (and counted so).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kPooled = false;
#else
constexpr bool kPooled = true;
#endif
}  // namespace

TEST_CASE("handle pool: a block given back is the next one taken, on the same thread" *
          doctest::skip(!kPooled)) {
  std::thread([] {
    CHECK(hp::free_blocks() == 0);
    void* a = hp::take();
    void* b = hp::take();
    CHECK(a != b);
    hp::give(a);
    CHECK(hp::free_blocks() == 1);
    CHECK(hp::take() == a);
    CHECK(hp::free_blocks() == 0);
    hp::give(a);
    hp::give(b);
  }).join();
}

TEST_CASE("handle pool: a thread keeps at most kMostFree blocks" * doctest::skip(!kPooled)) {
  std::thread([] {
    std::vector<void*> blocks;
    for (size_t i = 0; i < hp::kMostFree + 100; ++i) blocks.push_back(hp::take());
    for (void* b : blocks) hp::give(b);
    CHECK(hp::free_blocks() == hp::kMostFree);
  }).join();
}

TEST_CASE("handle pool: objects larger than a block come from the heap") {
  struct Big {
    char bytes[hp::kBlock * 2];
  };
  std::thread([] {
    const size_t before = hp::free_blocks();
    { auto p = hp::make<Big>(); }
    CHECK(hp::free_blocks() == before);  // not put on the list
  }).join();
}

TEST_CASE("handle pool: tensors made on one thread and released on another keep their values") {
  lf::Tensor t = lf::from_floats({1, 2, 3, 4, 5, 6}, {2, 3});
  lf::Tensor v = lf::slice(t, 1, 1, 3);
  std::thread([t = std::move(t)]() mutable {
    t = lf::Tensor();  // the storage stays: the view holds it
  }).join();
  CHECK(v.to_floats() == std::vector<float>{2, 3, 5, 6});
  std::thread([&] {
    lf::Tensor w = lf::add(v, 1.0);  // made here, released on the main thread below
    v = w;
  }).join();
  CHECK(v.to_floats() == std::vector<float>{3, 4, 6, 7});
  v = lf::Tensor();
}

namespace {
std::atomic<long> g_blocks_after_exit{-1};
struct ReleasedAtExit {
  lf::Tensor t;
  // Runs after the thread's list was returned to the heap (this object was made before the
  // list's first use on the thread, so its destructor runs later): the block must not go back
  // on a list nobody will free.
  ~ReleasedAtExit() {
    t = lf::Tensor();
    g_blocks_after_exit.store(static_cast<long>(hp::free_blocks()));
  }
};
}  // namespace

TEST_CASE("handle pool: a handle released by a thread_local destructor after the list is gone" *
          doctest::skip(!kPooled)) {
  std::thread([] {
    thread_local ReleasedAtExit holder;    // constructed first: destroyed after the list's reaper
    { lf::Tensor warm = lf::zeros({4}); }  // the list's first use on this thread
    CHECK(hp::free_blocks() > 0);
    holder.t = lf::zeros({8});
  }).join();
  CHECK(g_blocks_after_exit.load() == 0);
}
