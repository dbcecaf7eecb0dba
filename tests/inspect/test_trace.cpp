// The timeline: events from several threads land in a Chrome trace that parses as JSON, with
// the right phases, tracks and names; the buffer is bounded; disabled costs nothing visible.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "livefuse/error.hpp"
#include "livefuse/inspect.hpp"
#include "livefuse/ops.hpp"
#include "runtime/inspect_registry.hpp"

namespace lf = livefuse;
namespace tr = livefuse::trace;
using nlohmann::json;

namespace {

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() /
          (std::string("lf_trace_") + std::to_string(::getpid()) + "_" + name))
      .string();
}

json load(const std::string& path) {
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(), "no trace at ", path);
  return json::parse(f);  // throws (fails the test) when not JSON
}

std::vector<json> events_named(const json& t, const std::string& name) {
  std::vector<json> r;
  for (const json& e : t["traceEvents"])
    if (e.value("name", "") == name) r.push_back(e);
  return r;
}

struct TraceOn {
  explicit TraceOn(size_t cap = 0) { tr::reset_for_testing(true, cap); }
  ~TraceOn() { tr::reset_for_testing(false); }
};

}  // namespace

TEST_CASE("trace: spans, instants, async windows and counters from two threads") {
  TraceOn on;
  const std::string path = temp_path("basic.json");
  tr::set_thread_name("test-main");
  {
    tr::Scope s("op", "add");
    CHECK(static_cast<bool>(s));
    s.detail("add(f32[2], f32[2])");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  tr::async_begin("window", "deferred", 7, "stream 0");
  tr::instant("matcher", "flush", "divergent \"quoted\" \\ reason\n");
  tr::async_end("window", "deferred", 7);
  tr::counter("pending_calls", 3);
  std::thread worker([] {
    tr::set_thread_name("livefuse-compile-0");
    const double t0 = tr::now_us();
    tr::complete("compile", "nvrtc", t0, 1500.0, "kernel k0");
  });
  worker.join();
  CHECK(lf::write_trace(path) == 6);

  const json t = load(path);
  REQUIRE(t.contains("traceEvents"));
  CHECK(t["otherData"]["dropped"] == 0);
  CHECK(t["otherData"]["events"] == 6);
  const auto add = events_named(t, "add");
  REQUIRE(add.size() == 1);
  CHECK(add[0]["ph"] == "X");
  CHECK(add[0]["cat"] == "op");
  CHECK(add[0]["dur"].get<double>() >= 1500.0);  // slept 2 ms inside
  CHECK(add[0]["args"]["detail"] == "add(f32[2], f32[2])");
  CHECK(add[0]["pid"] == ::getpid());
  const auto win = events_named(t, "deferred");
  REQUIRE(win.size() == 2);
  CHECK(win[0]["ph"] == "b");
  CHECK(win[1]["ph"] == "e");
  CHECK(win[0]["id"] == win[1]["id"]);
  CHECK(win[0]["ts"].get<double>() <= win[1]["ts"].get<double>());
  const auto flush = events_named(t, "flush");
  REQUIRE(flush.size() == 1);
  CHECK(flush[0]["ph"] == "i");
  CHECK(flush[0]["args"]["detail"] == "divergent \"quoted\" \\ reason\n");
  const auto ctr = events_named(t, "pending_calls");
  REQUIRE(ctr.size() == 1);
  CHECK(ctr[0]["ph"] == "C");
  CHECK(ctr[0]["args"]["pending_calls"] == 3.0);
  const auto nv = events_named(t, "nvrtc");
  REQUIRE(nv.size() == 1);
  CHECK(nv[0]["dur"] == 1500.0);
  CHECK(nv[0]["tid"] != add[0]["tid"]);  // the compile job is on its own thread's track
  // Thread names are metadata events naming those tracks.
  std::map<int64_t, std::string> names;
  for (const json& e : events_named(t, "thread_name")) {
    CHECK(e["ph"] == "M");
    names[e["tid"].get<int64_t>()] = e["args"]["name"].get<std::string>();
  }
  CHECK(names[add[0]["tid"].get<int64_t>()] == "test-main");
  CHECK(names[nv[0]["tid"].get<int64_t>()] == "livefuse-compile-0");
  std::filesystem::remove(path);
}

TEST_CASE("trace: in-place writes are op spans (a static KV cache's writes, twice a layer a token)") {
  TraceOn on;
  const std::string path = temp_path("writes.json");
  const lf::Device cpu = lf::Device::cpu();
  const lf::Tensor cache = lf::zeros({2, 8, 4}, lf::DType::f32, cpu);
  const lf::Tensor row = lf::full({2, 1, 4}, 1.5, lf::DType::f32, cpu);
  lf::index_copy(cache, 1, 3, row);
  lf::copy_into(lf::slice(cache, 1, 5, 6), row);
  lf::write_trace(path);
  const auto writes = events_named(load(path), "copy_into");
  CHECK(writes.size() == 2);  // index_copy writes through copy_into
  for (const json& e : writes) {
    CHECK(e["cat"] == "op");
    CHECK(e["ph"] == "X");
  }
  std::filesystem::remove(path);
}

TEST_CASE("trace: disabled, nothing is collected") {
  tr::reset_for_testing(false);
  {
    tr::Scope s("op", "add");
    CHECK_FALSE(static_cast<bool>(s));
  }
  tr::instant("matcher", "flush");
  tr::async_begin("window", "deferred", 1);
  CHECK(tr::stats().events == 0);
  CHECK(tr::stats().dropped == 0);
}

TEST_CASE("trace: the buffer is bounded and counts what it dropped, also under concurrency") {
  TraceOn on(4096);  // one chunk
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([] {
      for (int k = 0; k < 2000; ++k) tr::Scope s("op", "mul");
    });
  for (auto& th : threads) th.join();
  CHECK(tr::stats().events == 4096);
  CHECK(tr::stats().dropped == 8000 - 4096);
  const std::string path = temp_path("bounded.json");
  CHECK(lf::write_trace(path) == 4096);
  const json t = load(path);
  CHECK(t["otherData"]["dropped"] == 8000 - 4096);
  CHECK(events_named(t, "mul").size() == 4096);
  std::filesystem::remove(path);
  CHECK(lf::inspect().counter("inspect", "trace_dropped") == 8000u - 4096u);
}

TEST_CASE("trace: an unwritable path is an error naming it, and leaves no temp file") {
  TraceOn on;
  tr::instant("x", "y");
  const std::string dir = temp_path("no_such_dir");
  CHECK_THROWS_WITH_AS(lf::write_trace(dir + "/t.json"), doctest::Contains("no_such_dir"),
                       lf::Error);
}
