// Threads and exits with deferred work pending: a worker thread that ends with its last result
// unread (held by another thread), two threads on their own streams, empty batches in a hot
// loop, a static cache written in place by worker threads and read by another, and -- with
// `--exit N` -- a process that calls std::exit(N) with results unread.
#include <algorithm>
#include <thread>

#include "user_util.hpp"

namespace {
constexpr int64_t R = 8, D = 32;

// A layer with a GEMM: y = relu(linear(x, w, b)) * 0.5 + x.
lf::Tensor layer(const lf::Tensor& x, const lf::Tensor& w, const lf::Tensor& b) {
  return lf::add(lf::mul(lf::relu(lf::linear(x, w, b)), 0.5), x);
}
std::vector<float> layer_ref(const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>& b, int64_t rows) {
  std::vector<float> y(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < D; ++o) {
      double acc = b[o];
      for (int64_t i = 0; i < D; ++i) acc += double(x[r * D + i]) * w[o * D + i];
      y[r * D + o] = float(std::max(acc, 0.0) * 0.5 + x[r * D + o]);
    }
  return y;
}

struct Model {
  std::vector<float> wv = users::values(D * D, 7), bv = users::values(D, 8);
  lf::Tensor w = lf::from_floats(wv, {D, D}, lf::DType::f32, users::device());
  lf::Tensor b = lf::from_floats(bv, {D}, lf::DType::f32, users::device());
  lf::Tensor run(const lf::Tensor& x) const { return layer(layer(x, w, b), w, b); }
  std::vector<float> ref(const std::vector<float>& x, int64_t rows) const {
    return layer_ref(layer_ref(x, wv, bv, rows), wv, bv, rows);
  }
};

// Workers, one after another, each running the hot loop and ending with its last result unread
// but held outside the thread.
void worker_exits_pending(const Model& m) {
  {  // plans for the loop first, so the workers' windows are deferred from their first calls
    const lf::Tensor x = lf::from_floats(users::values(R * D, 49), {R, D}, lf::DType::f32, users::device());
    users::Loop warm(8);
    for (int it = 0; warm.more(it); ++it) (void)m.run(x).to_floats();
  }
  users::Engagement e;
  for (int t = 0; t < 6; ++t) {
    const std::vector<float> xv = users::values(R * D, 50 + t);
    lf::Tensor kept;
    std::thread worker([&] {
      const lf::Tensor x = lf::from_floats(xv, {R, D}, lf::DType::f32, users::device());
      for (int it = 0; it < 40; ++it) {
        lf::Tensor y = m.run(x);
        if (it + 1 < 40) users::check(users::close(y.to_floats(), m.ref(xv, R), 1e-4), "worker loop");
        else kept = y;  // left unread: the thread ends with it deferred
      }
    });
    worker.join();
    users::check(users::close(kept.to_floats(), m.ref(xv, R), 1e-4),
                 "a result left pending by an exited thread, worker " + std::to_string(t));
  }
  e.expect("worker threads exit with work pending", 0.3);
}

// Two threads, each on its own stream, each with its own loop.
void two_threads_two_streams(const Model& m) {
  users::Engagement e;
  auto body = [&](int seed) {
    lf::StreamGuard g(lf::Stream::create(users::device()));
    const std::vector<float> xv = users::values(R * D, seed);
    const lf::Tensor x = lf::from_floats(xv, {R, D}, lf::DType::f32, users::device());
    const std::vector<float> want = m.ref(xv, R);
    for (int it = 0; it < 120; ++it)
      users::check(users::close(m.run(x).to_floats(), want, 1e-4), "two threads on two streams");
  };
  std::thread a(body, 60), b(body, 61);
  a.join();
  b.join();
  e.expect("two threads on two streams", 0.3);
}

// Some iterations have an empty batch ([0, D]); the others a batch of one of a few sizes, and
// now and then one never seen before (the monitor learns and forgets shapes meanwhile).
void empty_batches(const Model& m) {
  users::Engagement e;
  for (int it = 0; it < 240; ++it) {
    const int64_t rows = it % 5 == 3 ? 0 : it % 7 == 0 ? 1 + (it * 13) % 40 : R;
    const std::vector<float> xv = users::values(rows * D, 70 + it % 3);
    const lf::Tensor x = lf::from_floats(xv, {rows, D}, lf::DType::f32, users::device());
    lf::Tensor y = m.run(x);
    users::check(y.shape() == lf::Shape({rows, D}), "empty batch: shape");
    users::check(users::close(y.to_floats(), m.ref(xv, rows), 1e-4),
                 "empty batches in a hot loop: iteration " + std::to_string(it));
  }
  e.expect("empty batches", 0.3);
}

// A static KV cache as a decode loop keeps one: each step's K and V (views of one product) go
// into preallocated caches with index_copy, then the step reads the caches back. Worker threads
// take turns on the caches; each leaves its last step's writes to the next reader (the main
// thread, or the next worker), and the last one exits right after writing.
void static_cache_across_threads(const Model& m) {
  constexpr int64_t S = 24;
  const lf::Tensor kc = lf::zeros({1, S, D}, lf::DType::f32, users::device());
  const lf::Tensor vc = lf::zeros({1, S, D}, lf::DType::f32, users::device());
  std::vector<float> kref(S * D, 0.0f), vref(S * D, 0.0f);
  const uint64_t held0 = users::counter("writes_held");
  int64_t pos = 0;
  for (int t = 0; t < 3; ++t) {
    std::thread worker([&] {
      for (int step = 0; step < 8; ++step, ++pos) {
        const std::vector<float> xv = users::values(2 * D, 90 + static_cast<int>(pos));
        const lf::Tensor x = lf::from_floats(xv, {2, D}, lf::DType::f32, users::device());
        const lf::Tensor kv = m.run(x).reshape({1, 2, D});  // row 0: K, row 1: V
        lf::index_copy(kc, 1, pos, lf::slice(kv, 1, 0, 1));
        lf::index_copy(vc, 1, pos, lf::slice(kv, 1, 1, 2));
        const std::vector<float> y = m.ref(xv, 2);
        std::copy(y.begin(), y.begin() + D, kref.begin() + pos * D);
        std::copy(y.begin() + D, y.end(), vref.begin() + pos * D);
        if (step == 7) break;  // the thread ends with this step's writes just made
        // The step reads both caches back: the writes it just made are in them.
        const lf::Tensor both = lf::add(kc, vc);
        std::vector<float> want(S * D);
        for (size_t i = 0; i < want.size(); ++i) want[i] = kref[i] + vref[i];
        users::check(users::close(both.to_floats(), want, 1e-4), "static cache read by its writer");
      }
      ++pos;
    });
    worker.join();
    // The exited writer's last writes, seen by this thread's op and then by a host copy.
    users::check(users::close(lf::mul(kc, 1.0).to_floats(), kref, 1e-4), "static cache after its writer exited: K");
    users::check(users::close(vc.to_floats(), vref, 1e-4), "static cache after its writer exited: V");
  }
  const uint64_t held = users::counter("writes_held") - held0;
  std::printf("%-40s writes held %llu of %d\n", "static cache across threads", static_cast<unsigned long long>(held),
              2 * 3 * 8);
  if (!users::fusion_on()) users::check(held == 0, "static cache: writes held with fusion off");
  else if (users::env("LIVEFUSE_WRITE_BATCH") != "0") users::check(held > 0, "static cache: no write was held");
}

lf::Tensor g_unread;  // results still referenced at std::exit
}  // namespace

int main(int argc, char** argv) {
  const Model m;
  if (argc == 3 && std::string(argv[1]) == "--exit") {
    // Leaves the last results deferred and referenced (a global and a local), then exits.
    const lf::Tensor x = lf::from_floats(users::values(R * D, 80), {R, D}, lf::DType::f32, users::device());
    lf::Tensor local;
    for (int it = 0; it < 60; ++it) {
      local = m.run(x);
      g_unread = m.run(local);
    }
    // And a static cache's write still held (fusion on): the exit enqueues it, and must not
    // crash doing so.
    static lf::Tensor cache = lf::zeros({1, 4, D}, lf::DType::f32, users::device());
    lf::index_copy(cache, 1, 2, lf::reshape(lf::slice(local, 0, 0, 1), {1, 1, D}));
    // Registered last, so run first: a crash report then says exit had begun.
    std::atexit([] { users::say("[exit handlers begin]\n"); });
    std::exit(std::atoi(argv[2]));
  }
  worker_exits_pending(m);
  two_threads_two_streams(m);
  empty_batches(m);
  static_cache_across_threads(m);
  return users::finish("users-threads-and-exits");
}
