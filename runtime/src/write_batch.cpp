// Held writes (runtime/write_batch.hpp, the Note): each thread's batch, and the enqueue that
// empties it.
#include "runtime/write_batch.hpp"

#include <algorithm>
#include <atomic>
#include <boost/container/small_vector.hpp>
#include <mutex>
#include <vector>

#include "kernels/backend.hpp"
#include "livefuse/config.hpp"
#include "runtime/executor.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/plan.hpp"

namespace livefuse::writes {
namespace {

// Copies in one batch: what one launch of independent copies takes (kernels/cuda/layout.hpp).
constexpr size_t kMaxHeld = 8;

struct Held {
  Tensor dst, src;
};
using HeldList = boost::container::small_vector<Held, kMaxHeld>;

struct Batch {
  std::mutex mu;  // the owning thread holds and enqueues; another thread may enqueue
  Stream stream;  // of every held write
  HeldList writes;
  Batch();
  ~Batch();
};

std::atomic<uint64_t> g_held{0};  // writes held by every thread together
std::mutex g_batches_mu;
std::vector<Batch*>& batches() {
  static auto* all = new std::vector<Batch*>;  // leaked: threads may exit after static teardown
  return *all;
}

// Enqueues `b`'s writes on its stream, one launch of independent copies on CUDA. `b.mu` held.
void enqueue(Batch& b) {
  if (b.writes.empty()) return;
  HeldList ws;
  ws.swap(b.writes);
  struct Release {  // given back even when the launch throws (its error is the caller's)
    size_t n;
    ~Release() { g_held.fetch_sub(n, std::memory_order_relaxed); }
  } release{ws.size()};
  const trace::Scope span("op", "held_writes");
  matcher_counters().write_launches.fetch_add(1, std::memory_order_relaxed);
  if (!b.stream.device().is_cpu()) {
#if LIVEFUSE_HAS_CUDA
    boost::container::small_vector<Tensor, kMaxHeld> dsts, srcs;
    for (const Held& h : ws) dsts.push_back(h.dst), srcs.push_back(h.src);
    cuda::run_copies(std::span<const Tensor>(dsts.data(), dsts.size()),
                     std::span<const Tensor>(srcs.data(), srcs.size()), b.stream.handle());
    return;
#endif
  }
  for (const Held& h : ws) {
    OpCall c;
    c.op = OpId::contiguous;  // writes through its output's strides: the destination view
    c.inputs.push_back(h.src);
    Executor::run_eager_into(c, TensorList{h.dst}, b.stream);
  }
}

Batch::Batch() {
  cpu::prepare_thread();  // its per-thread buffers outlive this batch, whose destructor copies
  const std::lock_guard<std::mutex> g(g_batches_mu);
  batches().push_back(this);
}

Batch::~Batch() {
  // Thread exit: the held writes still go (never both locks at once: flush_for takes the
  // registry's, then a batch's).
  try {
    const std::lock_guard<std::mutex> lock(mu);
    enqueue(*this);
  } catch (...) {
    // Nowhere to report at thread exit; the destination keeps its earlier contents.
  }
  const std::lock_guard<std::mutex> g(g_batches_mu);
  std::erase(batches(), this);
}

thread_local Batch t_batch;

// Whether a call that reads (or writes) `s` must wait for `h`: `h` writes it, or reads what the
// call writes.
bool conflicts(const Held& h, const Storage* s, Use use) {
  return h.dst.impl()->storage.get() == s ||
         (use == Use::write && h.src.impl()->storage.get() == s);
}

}  // namespace

bool any_held() { return g_held.load(std::memory_order_relaxed) != 0; }

bool hold(const Tensor& dst, const Tensor& src, const Stream& stream) {
  const Config& cfg = config();
  Storage* d = dst.impl()->storage.get();
  Storage* s = src.impl()->storage.get();
  // The program could read (or write) either through a pointer of its own: written now.
  const bool holdable = cfg.mode == Mode::on && cfg.write_batch && d && s && d != s &&
                        !d->exposed.load(std::memory_order_acquire) &&
                        !s->exposed.load(std::memory_order_acquire);
  if (!holdable && !any_held()) return false;
  Batch& b = t_batch;
  const std::lock_guard<std::mutex> lock(b.mu);
  bool first =
      !holdable || (!b.writes.empty() && (!(b.stream == stream) || b.writes.size() >= kMaxHeld));
  // Held writes run in one launch, in no order: one storage written by one and touched by
  // another waits for the next batch.
  for (const Held& h : b.writes)
    first = first || conflicts(h, d, Use::write) || conflicts(h, s, Use::read);
  if (first) enqueue(b);
  if (!holdable) return false;
  b.stream = stream;
  b.writes.push_back({dst, src});
  g_held.fetch_add(1, std::memory_order_relaxed);
  matcher_counters().writes_held.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void flush_own() {
  if (!any_held()) return;
  Batch& b = t_batch;
  const std::lock_guard<std::mutex> lock(b.mu);
  enqueue(b);
}

void flush_for(const Storage& s, Use use) {
  if (!any_held()) return;
  const std::lock_guard<std::mutex> g(g_batches_mu);
  for (Batch* b : batches()) {
    const std::lock_guard<std::mutex> lock(b->mu);
    if (std::any_of(b->writes.begin(), b->writes.end(),
                    [&](const Held& h) { return conflicts(h, &s, use); }))
      enqueue(*b);
  }
}

}  // namespace livefuse::writes
