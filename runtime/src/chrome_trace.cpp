// The timeline (runtime/inspect_registry.hpp, namespace trace): a bounded, lock-free append
// buffer of Chrome trace events, written as JSON at exit or on demand.
//
// Slots are claimed with one fetch_add and live in chunks allocated on first use, so an idle
// trace costs no memory and a full one costs ~kTraceCapacity * sizeof(Event). Each slot has
// a ready flag: a writer may dump the buffer while other threads still append, and then skips
// slots not yet filled. When the buffer is full the first events are kept (the start of a run
// is when plans are found and compiled) and later ones are counted as dropped.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "livefuse/error.hpp"
#include "livefuse/inspect.hpp"
#include "runtime/inspect_registry.hpp"

namespace livefuse {
namespace trace {

namespace detail {
std::atomic<bool> g_enabled{false};
}

namespace {

struct Event {
  char ph = 0;
  std::string_view cat, name;
  double ts = 0, dur = 0, value = 0;
  uint64_t id = 0;
  uint32_t tid = 0;
  std::string detail;
  std::atomic<bool> ready{false};
};

constexpr size_t kChunk = 4096;

struct Buffer {
  explicit Buffer(size_t cap)
      : capacity((cap + kChunk - 1) / kChunk * kChunk),
        chunks(new std::atomic<Event*>[capacity / kChunk]) {
    for (size_t c = 0; c < capacity / kChunk; ++c) chunks[c].store(nullptr);
  }
  ~Buffer() {
    for (size_t c = 0; c < capacity / kChunk; ++c) delete[] chunks[c].load();
  }
  Event* slot(size_t i) {
    std::atomic<Event*>& c = chunks[i / kChunk];
    Event* chunk = c.load(std::memory_order_acquire);
    if (!chunk) {
      auto* fresh = new Event[kChunk];
      if (c.compare_exchange_strong(chunk, fresh, std::memory_order_acq_rel)) {
        chunk = fresh;
      } else {
        delete[] fresh;  // another thread installed this chunk first
      }
    }
    return &chunk[i % kChunk];
  }

  const size_t capacity;
  std::unique_ptr<std::atomic<Event*>[]> chunks;
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> dropped{0};
};

// Leaked on purpose: threads may append during static destruction.
std::atomic<Buffer*> g_buffer{new Buffer(kTraceCapacity)};

struct ThreadNames {
  std::mutex mu;
  std::map<uint32_t, std::string> names;
};
ThreadNames& thread_names() {
  static ThreadNames* t = new ThreadNames;  // leaked: see g_buffer
  return *t;
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

uint32_t this_tid() {
  thread_local const uint32_t tid = static_cast<uint32_t>(::syscall(SYS_gettid));
  return tid;
}

void push(char ph, std::string_view cat, std::string_view name, double ts, double dur, uint64_t id,
          double value, std::string&& detail) {
  Buffer* b = g_buffer.load(std::memory_order_acquire);
  const size_t i = b->next.fetch_add(1, std::memory_order_relaxed);
  if (i >= b->capacity) {
    b->dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Event* e = b->slot(i);
  e->ph = ph;
  e->cat = cat;
  e->name = name;
  e->ts = ts;
  e->dur = dur;
  e->id = id;
  e->value = value;
  e->tid = this_tid();
  e->detail = std::move(detail);
  e->ready.store(true, std::memory_order_release);
}

void write_event(std::FILE* f, const Event& e, long pid, bool* first) {
  std::fprintf(f, "%s\n{\"ph\":\"%c\",\"pid\":%ld,\"tid\":%u,\"ts\":%.3f", *first ? "" : ",", e.ph,
               pid, e.tid, e.ts);
  *first = false;
  std::fprintf(f, ",\"cat\":%s,\"name\":%s", json_quote(e.cat).c_str(), json_quote(e.name).c_str());
  switch (e.ph) {
    case 'X':
      std::fprintf(f, ",\"dur\":%.3f", e.dur);
      break;
    case 'i':
      std::fputs(",\"s\":\"t\"", f);
      break;
    case 'b':
    case 'e':
      std::fprintf(f, ",\"id\":\"0x%llx\"", static_cast<unsigned long long>(e.id));
      break;
    default:
      break;
  }
  if (e.ph == 'C') {
    std::fprintf(f, ",\"args\":{%s:%.17g}", json_quote(e.name).c_str(), e.value);
  } else if (!e.detail.empty()) {
    std::fprintf(f, ",\"args\":{\"detail\":%s}", json_quote(e.detail).c_str());
  }
  std::fputc('}', f);
}

}  // namespace

Scope::~Scope() {
  if (on_) {
    const double t1 = now_us();
    push('X', cat_, name_, t0_, t1 - t0_, 0, 0, std::move(detail_));
  }
}

void complete(std::string_view cat, std::string_view name, double ts_us, double dur_us,
              std::string d) {
  if (enabled()) push('X', cat, name, ts_us, dur_us, 0, 0, std::move(d));
}
void instant(std::string_view cat, std::string_view name, std::string d) {
  if (enabled()) push('i', cat, name, now_us(), 0, 0, 0, std::move(d));
}
void async_begin(std::string_view cat, std::string_view name, uint64_t id, std::string d) {
  if (enabled()) push('b', cat, name, now_us(), 0, id, 0, std::move(d));
}
void async_end(std::string_view cat, std::string_view name, uint64_t id, std::string d) {
  if (enabled()) push('e', cat, name, now_us(), 0, id, 0, std::move(d));
}
void counter(std::string_view name, double value) {
  if (enabled()) push('C', "counter", name, now_us(), 0, 0, value, {});
}

void set_thread_name(std::string name) {
  ThreadNames& t = thread_names();
  std::lock_guard<std::mutex> g(t.mu);
  t.names[this_tid()] = std::move(name);
}

Stats stats() {
  Buffer* b = g_buffer.load(std::memory_order_acquire);
  const size_t n = b->next.load(std::memory_order_relaxed);
  return {std::min<uint64_t>(n, b->capacity), b->dropped.load(std::memory_order_relaxed)};
}

void reset_for_testing(bool enable, size_t capacity) {
  detail::g_enabled.store(false);
  delete g_buffer.exchange(new Buffer(capacity ? capacity : kTraceCapacity));
  detail::g_enabled.store(enable);
}

}  // namespace trace

size_t write_trace(const std::string& path) {
  using namespace trace;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) throw Error("[trace] cannot write '" + tmp + "': " + std::strerror(errno));
  Buffer* b = g_buffer.load(std::memory_order_acquire);
  const long pid = static_cast<long>(::getpid());
  const size_t n = std::min(b->next.load(std::memory_order_acquire), b->capacity);
  size_t written = 0;
  bool first = true;
  std::fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", f);
  {
    std::FILE* comm = std::fopen("/proc/self/comm", "r");
    char name[64] = "livefuse";
    if (comm) {
      if (std::fgets(name, sizeof name, comm)) name[std::strcspn(name, "\n")] = 0;
      std::fclose(comm);
    }
    std::fprintf(
        f,
        "\n{\"ph\":\"M\",\"pid\":%ld,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":%s}}",
        pid, json_quote(name).c_str());
    first = false;
  }
  {
    ThreadNames& t = thread_names();
    std::lock_guard<std::mutex> g(t.mu);
    for (const auto& [tid, name] : t.names) {
      std::fprintf(f,
                   "%s\n{\"ph\":\"M\",\"pid\":%ld,\"tid\":%u,\"name\":\"thread_name\",\"args\":{"
                   "\"name\":%s}}",
                   first ? "" : ",", pid, tid, json_quote(name).c_str());
      first = false;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    Event* e = b->chunks[i / kChunk].load(std::memory_order_acquire);
    if (!e) continue;
    e += i % kChunk;
    if (!e->ready.load(std::memory_order_acquire)) continue;  // still being filled
    write_event(f, *e, pid, &first);
    ++written;
  }
  const Stats st = stats();
  std::fprintf(f,
               "\n],\"otherData\":{\"producer\":\"livefuse\",\"version\":\"%s\",\"events\":%zu,"
               "\"dropped\":%llu}}\n",
               LIVEFUSE_VERSION, written, static_cast<unsigned long long>(st.dropped));
  const bool ok = std::ferror(f) == 0;
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error("[trace] cannot write '" + path + "': " + why);
  }
  return written;
}

}  // namespace livefuse
