// The kernel cache: memory LRU, disk entries found by a second compiler (a second process
// works the same way), corrupt and foreign entries ignored and rebuilt, concurrent writers,
// an unwritable directory, and the caps with their counters.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "kernels/jit/kernel_compiler.hpp"
#include "kernels/jit/render.hpp"
#include "tests/planner/planner_util.hpp"

using namespace plantest;
namespace fs = std::filesystem;

namespace {

const bool kNoNvrtc = !jit::nvrtc_available();

std::shared_ptr<const jit::KernelSpec> chain_spec(int length, DType dt = DType::f32) {
  SegmentBuilder b;
  ValueRef v = b.input({128}, dt);
  for (int i = 0; i < length; ++i) v = b.add(i % 2 ? OpId::exp : OpId::neg, {v});
  b.output(v);
  const PlannedSegment p = plan_segment(b.build());
  return std::get<FusedKernelStep>(p.steps.at(0).body).spec;
}

}  // namespace

TEST_CASE("nvrtc cache: a second compiler finds the first one's kernel on disk" * doctest::skip(kNoNvrtc)) {
  TempDir dir("hit");
  const auto spec = chain_spec(3);
  std::string cubin;
  {
    jit::KernelCompiler c1(1, dir.path.string());
    const jit::CompileResult r = c1.compile(spec, sm90());
    REQUIRE(r.ok());
    CHECK(!r.cache_hit);
    cubin = r.kernel->cubin();
    CHECK(c1.cache().counters().disk_writes == 1);
    // The same compiler: a memory hit.
    CHECK(c1.compile(spec, sm90()).cache_hit);
    CHECK(c1.cache().counters().memory_hits >= 1);
  }
  CHECK(dir.files().size() == 1);
  CHECK(dir.files(".tmp").empty());
  jit::KernelCompiler c2(1, dir.path.string());
  const jit::CompileResult r2 = c2.compile(spec, sm90());
  REQUIRE(r2.ok());
  CHECK(r2.cache_hit);
  CHECK(r2.kernel->from_disk);
  CHECK(r2.kernel->cubin() == cubin);
  CHECK(c2.cache().counters().disk_hits == 1);
  CHECK(c2.stats().compiled == 0);
}

TEST_CASE("nvrtc cache: corrupt and foreign entries are ignored and rebuilt" * doctest::skip(kNoNvrtc)) {
  TempDir dir("corrupt");
  const auto spec = chain_spec(4);
  {
    jit::KernelCompiler c(1, dir.path.string());
    REQUIRE(c.compile(spec, sm90()).ok());
  }
  REQUIRE(dir.files().size() == 1);
  const fs::path entry = dir.files()[0];
  const auto size = fs::file_size(entry);
  SUBCASE("flipped payload byte") {
    std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 10));
    char ch = 0;
    f.read(&ch, 1);
    f.seekp(static_cast<std::streamoff>(size - 10));
    ch = static_cast<char>(ch ^ 0x5a);
    f.write(&ch, 1);
  }
  SUBCASE("truncated") { fs::resize_file(entry, size / 2); }
  SUBCASE("garbage") {
    std::ofstream f(entry, std::ios::binary | std::ios::trunc);
    f << "not a kernel";
  }
  SUBCASE("foreign key (another arch) under this name") {
    jit::KernelCompiler other(1, (dir.path / "other").string());
    jit::CompileOptions o80;
    o80.arch = 80;
    REQUIRE(other.compile(spec, o80).ok());
    fs::copy_file(fs::directory_iterator(dir.path / "other")->path(), entry, fs::copy_options::overwrite_existing);
  }
  jit::KernelCompiler c2(1, dir.path.string());
  const jit::CompileResult r = c2.compile(spec, sm90());
  REQUIRE(r.ok());
  CHECK(!r.cache_hit);
  CHECK(c2.cache().counters().disk_rejected == 1);
  CHECK(c2.stats().compiled == 1);
  // Rebuilt: a third compiler hits.
  jit::KernelCompiler c3(1, dir.path.string());
  CHECK(c3.compile(spec, sm90()).cache_hit);
}

TEST_CASE("nvrtc cache: concurrent writers of the same kernel" * doctest::skip(kNoNvrtc)) {
  TempDir dir("race");
  const auto spec = chain_spec(5);
  jit::KernelCompiler a(1, dir.path.string()), b(1, dir.path.string());
  jit::CompileResult ra, rb;
  std::thread ta([&] { ra = a.compile(spec, sm90()); });
  std::thread tb([&] { rb = b.compile(spec, sm90()); });
  ta.join();
  tb.join();
  REQUIRE(ra.ok());
  REQUIRE(rb.ok());
  CHECK(ra.kernel->cubin() == rb.kernel->cubin());
  CHECK(dir.files().size() == 1);
  CHECK(dir.files(".tmp").empty());
  for (const auto& e : fs::directory_iterator(dir.path)) CHECK(e.path().extension() == ".lfk");
  jit::KernelCompiler c(1, dir.path.string());
  CHECK(c.compile(spec, sm90()).cache_hit);
  // A forked process writing while this one reads sees a whole entry or none.
  const auto spec2 = chain_spec(6);
  const pid_t pid = fork();
  if (pid == 0) {
    // The child stays off TBB (its worker threads do not survive fork): compile and write
    // synchronously through the cache itself.
    jit::KernelCache cache(dir.path.string());
    auto k = std::make_shared<jit::CompiledKernel>();
    k->rendered = jit::render_cuda(*spec2);
    k->key = jit::make_key(*spec2, k->rendered, sm90());
    jit::NvrtcOutput out = jit::nvrtc_compile(k->rendered.source, k->rendered.prefix, sm90());
    if (!out.ok) _exit(1);
    k->program = std::make_shared<jit::CompiledProgram>(out.cubin);
    for (size_t i = 0; i < k->rendered.variants.size(); ++i) {
      k->stats.push_back({k->rendered.entry(k->rendered.variants[i]), 1, 0});
      k->variant_ok.push_back(true);
    }
    cache.insert(k);
    _exit(0);
  }
  jit::KernelCompiler parent(1, dir.path.string());
  const jit::CompileResult rp = parent.compile(spec2, sm90());
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(rp.ok());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(dir.files().size() == 2);
}

TEST_CASE("nvrtc cache: an unwritable directory means memory-only caching" * doctest::skip(kNoNvrtc)) {
  jit::KernelCompiler c(1, "/proc/livefuse-cannot-create-this");
  CHECK(!c.cache().disk_enabled());
  const auto spec = chain_spec(2);
  REQUIRE(c.compile(spec, sm90()).ok());
  CHECK(c.compile(spec, sm90()).cache_hit);
}

TEST_CASE("nvrtc cache: the memory cache is bounded (LRU, counted)" * doctest::skip(kNoNvrtc)) {
  jit::KernelCompiler c(1, "", /*memory_cap=*/2);
  for (int len : {1, 2, 3}) REQUIRE(c.compile(chain_spec(len), sm90()).ok());
  CHECK(c.cache().size() == 2);
  CHECK(c.cache().counters().memory_evictions == 1);
  CHECK(!c.compile(chain_spec(1), sm90()).cache_hit);  // evicted: compiled again
}

TEST_CASE("kernel cache: the disk cache is bounded and checks keys") {
  TempDir dir("cap");
  jit::DiskCache d(dir.path.string(), 2);
  REQUIRE(d.enabled());
  jit::CacheCounters c;
  std::vector<jit::KernelKey> keys;
  for (int i = 0; i < 3; ++i) {
    jit::KernelKey k;
    k.text = "key-" + std::to_string(i);
    k.hash = jit::fnv1a(k.text.data(), k.text.size());
    keys.push_back(k);
    d.put(k, "payload-" + std::to_string(i), c);
    // Distinct modification times, so "oldest" is well defined.
    fs::last_write_time(d.path_for(k), fs::file_time_type::clock::now() - std::chrono::hours(10 - i));
  }
  d.put(keys[2], "payload-2", c);
  CHECK(c.disk_writes == 4);
  CHECK(c.disk_evictions == 1);
  CHECK(dir.files().size() == 2);
  CHECK(!d.get(keys[0], c).has_value());
  CHECK(d.get(keys[2], c).value() == "payload-2");
  // The same file name with another key inside is foreign.
  jit::KernelKey impostor = keys[2];
  impostor.text = "another key";
  CHECK(!d.get(impostor, c).has_value());
  CHECK(c.disk_rejected == 1);
}
