// Memory the program can reach itself: a write it makes after a call returned never changes
// that call's result (DESIGN.md, eager semantics). Each pattern rewrites memory a deferred call
// reads, between the calls and the read of their result; the last grows a KV cache by concat.
#include <condition_variable>
#include <mutex>
#include <thread>

#include "user_util.hpp"

namespace {
constexpr int64_t R = 16, D = 64;
constexpr int kIters = 160;

// Two layers of a small pointwise chain: h = tanh(h * w + b) * 0.5 + h.
lf::Tensor chain(lf::Tensor h, const lf::Tensor& w, const lf::Tensor& b) {
  for (int l = 0; l < 2; ++l) h = lf::add(lf::mul(lf::tanh(lf::add(lf::mul(h, w), b)), 0.5), h);
  return h;
}
std::vector<float> chain_ref(std::vector<float> h, const std::vector<float>& w,
                             const std::vector<float>& b) {
  for (int l = 0; l < 2; ++l)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t d = 0; d < D; ++d) {
        float& x = h[r * D + d];
        x = std::tanh(x * w[d] + b[d]) * 0.5f + x;
      }
  return h;
}

const std::vector<float> kX = users::values(R * D, 1), kB = users::values(D, 2);

// A weight wrapped over the program's buffer, rewritten after every iteration's calls.
void wrapped_weight_rewritten() {
  users::Buffer wbuf(D);
  const lf::Tensor x = lf::from_floats(kX, {R, D}, lf::DType::f32, users::device());
  const lf::Tensor b = lf::from_floats(kB, {D}, lf::DType::f32, users::device());
  const lf::Tensor w = wbuf.wrap({D});
  users::Engagement e;
  // Warmed up like the others: a plan compiled after the program's 160 iterations (a GPU host
  // whose iterations outrun the compiler) would leave the pattern unchecked with fusion on.
  users::Loop loop(kIters, &e, users::WarmUp::all_served);
  for (int it = 0; loop.more(it); ++it) {
    const std::vector<float> wv = users::values(D, 10 + it);
    wbuf.write(wv);
    lf::Tensor y = chain(x, w, b);
    wbuf.write(users::values(D, 1000 + it));  // after the calls returned, before the read
    users::check(users::close(y.to_floats(), chain_ref(kX, wv, kB)),
                 "wrapped weight rewritten: iteration " + std::to_string(it));
  }
  e.expect("wrapped weight rewritten");
}

// A runtime-owned weight written through a pointer the program took from data_ptr() once.
void pointer_from_data_ptr() {
  lf::Tensor w = lf::from_floats(users::values(D, 3), {D}, lf::DType::f32, users::device());
  void* p = w.data_ptr();
  const lf::Tensor x = lf::from_floats(kX, {R, D}, lf::DType::f32, users::device());
  const lf::Tensor b = lf::from_floats(kB, {D}, lf::DType::f32, users::device());
  users::Engagement e;
  users::Loop loop(kIters, &e, users::WarmUp::all_served);
  for (int it = 0; loop.more(it); ++it) {
    const std::vector<float> wv = users::values(D, 20 + it);
    users::Buffer::write_to(p, wv);
    lf::Tensor y = chain(x, w, b);
    users::Buffer::write_to(p, users::values(D, 2000 + it));
    users::check(users::close(y.to_floats(), chain_ref(kX, wv, kB)),
                 "pointer from data_ptr: iteration " + std::to_string(it));
  }
  e.expect("pointer kept from data_ptr()");
}

// An input wrapped over the program's buffer; the handle is dropped and the buffer refilled
// before the result is read.
void wrapped_input_refilled() {
  users::Buffer xbuf(R * D);
  const lf::Tensor w = lf::from_floats(users::values(D, 4), {D}, lf::DType::f32, users::device());
  const lf::Tensor b = lf::from_floats(kB, {D}, lf::DType::f32, users::device());
  const std::vector<float> wv = users::values(D, 4);
  users::Engagement e;
  // Its two layers are planned one after the other (the first reads the refilled buffer):
  // unsampled, counted once both serve.
  users::Loop loop(kIters, &e, users::WarmUp::all_served);
  for (int it = 0; loop.more(it); ++it) {
    const std::vector<float> xv = users::values(R * D, 30 + it);
    xbuf.write(xv);
    lf::Tensor y;
    {
      lf::Tensor x = xbuf.wrap({R, D});
      y = chain(x, w, b);
    }
    xbuf.write(users::values(R * D, 3000 + it));
    users::check(users::close(y.to_floats(), chain_ref(xv, wv, kB)),
                 "wrapped input refilled: iteration " + std::to_string(it));
  }
  e.expect("wrapped input refilled");
}

// Thread B runs the chain over a weight shared with thread A; once B's calls have returned, A
// writes the weight through data_ptr() (taken fresh each time), then B reads its result.
void other_thread_writes() {
  lf::Tensor w = lf::from_floats(users::values(D, 5), {D}, lf::DType::f32, users::device());
  const lf::Tensor x = lf::from_floats(kX, {R, D}, lf::DType::f32, users::device());
  const lf::Tensor b = lf::from_floats(kB, {D}, lf::DType::f32, users::device());
  std::mutex mu;
  std::condition_variable cv;
  int phase = 0;  // 1: B's calls returned; 2: A wrote
  std::vector<float> wv = users::values(D, 5);
  users::Engagement e;
  std::thread a([&] {
    for (int it = 0; it < kIters; ++it) {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return phase == 1; });
      wv = users::values(D, 40 + it);
      users::Buffer::write_to(w.data_ptr(), wv);
      phase = 2;
      cv.notify_all();
    }
  });
  for (int it = 0; it < kIters; ++it) {
    const std::vector<float> used = wv;
    lf::Tensor y = chain(x, w, b);
    std::unique_lock<std::mutex> l(mu);
    phase = 1;
    cv.notify_all();
    cv.wait(l, [&] { return phase == 2; });
    phase = 0;
    l.unlock();
    users::check(users::close(y.to_floats(), chain_ref(kX, used, kB)),
                 "another thread writes the weight: iteration " + std::to_string(it));
  }
  a.join();
  // The weight is exposed from the first data_ptr() on: later windows snapshot it, so only
  // engagement is checked here, not the share served.
  e.expect("another thread writes the weight", 0.0);
}

// Weights wrapped and declared immutable are read in place: served like runtime-owned ones,
// with no snapshot taken.
void immutable_weights() {
  const std::vector<float> wv = users::values(D, 6);
  users::Buffer wbuf(D);
  wbuf.write(wv);
  const lf::Tensor w = wbuf.wrap({D});
  w.mark_immutable();
  const lf::Tensor x = lf::from_floats(kX, {R, D}, lf::DType::f32, users::device());
  const lf::Tensor b = lf::from_floats(kB, {D}, lf::DType::f32, users::device());
  const std::vector<float> want = chain_ref(kX, wv, kB);
  users::Engagement e;
  const uint64_t snaps0 = users::counter("snapshots");
  for (int it = 0; it < kIters; ++it) {
    lf::Tensor y = chain(x, w, b);
    users::check(users::close(y.to_floats(), want), "immutable weight: iteration " + std::to_string(it));
  }
  e.expect("immutable wrapped weight");
  users::check(users::counter("snapshots") == snaps0, "an immutable weight was snapshotted");
}

// A KV cache grown by concat, as decode loops grow theirs (sequences of 40 steps). A served
// step's concat may take the block of the cache the program let go (runtime/append.hpp); it
// must not when the program still holds that cache (every 8th step keeps it and checks it after
// the next step), nor when it took the cache's address (every 8th step, another: it writes
// through the pointer after the next step's calls returned, which changes neither their results
// nor any later step's).
void cache_grown_by_concat() {
  constexpr int64_t H = 2, E = 16, Seq = 40;
  const lf::Device dev = users::device();
  const std::vector<float> wv = users::values(H * E, 5);
  const lf::Tensor w = lf::from_floats(wv, {1, 1, H * E}, lf::DType::f32, dev);
  lf::Tensor cache;
  std::vector<std::vector<float>> rows;  // the cache's rows so far, each [H, E]
  // The cache as eager gives it, [1, H, L, E] dense, from the rows.
  const auto dense = [&](size_t n) {
    std::vector<float> c;
    for (int64_t h = 0; h < H; ++h)
      for (size_t t = 0; t < n; ++t) c.insert(c.end(), rows[t].begin() + h * E, rows[t].begin() + (h + 1) * E);
    return c;
  };
  void* exposed = nullptr;  // the address of the cache the last step made, when taken
  const uint64_t in_place0 = users::counter("appends_in_place");
  users::Engagement e;
  // Warmed up until every call is served (unsampled): the plans for the step come after the
  // earlier patterns' plans, which would end a warm-up that waits for any call served.
  users::Loop loop(kIters, &e, users::WarmUp::all_served, Seq);
  for (int it = 0; loop.more(it); ++it) {
    if (it % Seq == 0) cache = lf::Tensor(), rows.clear();
    const std::vector<float> xv = users::values(H * E, 100 + it);
    std::vector<float> row(H * E);
    for (int64_t i = 0; i < H * E; ++i) row[i] = std::tanh(xv[i] * wv[i]);
    const lf::Tensor x = lf::from_floats(xv, {1, 1, H * E}, lf::DType::f32, dev);
    const lf::Tensor k = lf::permute(lf::reshape(lf::tanh(lf::mul(x, w)), {1, 1, H, E}), {0, 2, 1, 3});
    const bool keep = it % 8 == 3 && cache.defined();
    const lf::Tensor old = keep ? cache : lf::Tensor();
    const std::vector<float> old_want = keep ? dense(rows.size()) : std::vector<float>{};
    cache = cache.defined() ? lf::concat({cache, k}, 2) : lf::contiguous(k);
    const lf::Tensor y = lf::sum(lf::mul(cache, 0.5), 2);  // [1, H, E]
    rows.push_back(row);
    if (exposed) {  // the cache of the step before: written after this step's calls returned
      users::Buffer::write_to(exposed, users::values(4, 3000 + it));
      exposed = nullptr;
    }
    std::vector<float> want(H * E, 0.0f);
    for (const std::vector<float>& r : rows)
      for (int64_t i = 0; i < H * E; ++i) want[i] += 0.5f * r[i];
    users::check(users::close(y.to_floats(), want, 1e-4), "concat cache: iteration " + std::to_string(it));
    if (keep)
      users::check(users::close(old.to_floats(), old_want), "concat cache kept: iteration " + std::to_string(it));
    if (it % 8 == 5) exposed = cache.data_ptr();
  }
  users::check(users::close(cache.to_floats(), dense(rows.size())), "concat cache at the end");
  e.expect("KV cache grown by concat");
  // With fusion on and unsampled every served step but a few takes the block over: a check that
  // never grew a cache in place would prove nothing about it.
  if (users::unsampled())
    users::check(users::counter("appends_in_place") > in_place0, "no concat cache grew in place");
}

// Plans for the chain first (runtime-owned tensors), so each pattern below is measured with
// them in place: the planner works in the background at the machine's pace.
void warm_up() {
  const lf::Tensor x = lf::from_floats(kX, {R, D}, lf::DType::f32, users::device());
  const lf::Tensor w = lf::from_floats(users::values(D, 9), {D}, lf::DType::f32, users::device());
  const lf::Tensor b = lf::from_floats(kB, {D}, lf::DType::f32, users::device());
  users::Loop loop(8);
  for (int it = 0; loop.more(it); ++it) (void)chain(x, w, b).to_floats();
}
}  // namespace

int main() {
  warm_up();
  wrapped_weight_rewritten();
  pointer_from_data_ptr();
  wrapped_input_refilled();
  other_thread_writes();
  immutable_weights();
  cache_grown_by_concat();
  return users::finish("users-reachable-memory");
}
