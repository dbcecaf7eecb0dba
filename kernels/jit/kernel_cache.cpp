#include "kernels/jit/kernel_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "livefuse/error.hpp"
#include "runtime/inspect_registry.hpp"

namespace livefuse::jit {

uint64_t fnv1a(const void* data, size_t n, uint64_t h) {
  const auto* c = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

namespace {
constexpr char kMagic[4] = {'L', 'F', 'K', 'C'};
constexpr uint32_t kFormat = 2;

template <class T> void put_raw(std::string& s, const T& v) { s.append(reinterpret_cast<const char*>(&v), sizeof(T)); }
template <class T> bool get_raw(const std::string& s, size_t& pos, T& v) {
  if (pos + sizeof(T) > s.size()) return false;
  std::memcpy(&v, s.data() + pos, sizeof(T));
  pos += sizeof(T);
  return true;
}
bool get_str(const std::string& s, size_t& pos, std::string& out) {
  uint64_t n = 0;
  if (!get_raw(s, pos, n) || pos + n > s.size()) return false;
  out.assign(s.data() + pos, n);
  pos += n;
  return true;
}
void put_str(std::string& s, const std::string& v) {
  put_raw<uint64_t>(s, v.size());
  s += v;
}
}  // namespace

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

KernelKey key_of(std::string text) {
  KernelKey k;
  k.text = std::move(text);
  k.hash = fnv1a(k.text.data(), k.text.size());
  return k;
}

KernelKey make_key(const KernelSpec& spec, const RenderedKernel& rk, const CompileOptions& opts) {
  std::ostringstream os;
  os << "lfk2|spec=" << hex64(structure_hash(spec)) << "|kind=" << (spec.kind == SpecKind::Pointwise ? "pointwise" : "row")
     << "|io=";
  for (const auto& p : spec.parts) {
    for (const auto& d : p.inputs) os << dtype_name(d.dtype) << ":" << space_name(d.space) << ",";
    os << "->";
    for (const auto& d : p.outputs) os << dtype_name(d.dtype) << ":" << space_name(d.space) << ",";
    os << ";";
  }
  const uint64_t helpers = fnv1a(kLfFusedSource.data(), kLfFusedSource.size(), fnv1a(kLfMathSource.data(), kLfMathSource.size()));
  os << "|spec_dims=-|arch=sm_" << opts.arch << "|nvrtc=" << nvrtc_version() << "|opts=" << opts.str()
     << "|src=" << hex64(fnv1a(rk.source.data(), rk.source.size())) << "|helpers=" << hex64(helpers);
  return key_of(os.str());
}

// ---- CompiledKernel ---------------------------------------------------------------------------
void* CompiledProgram::module(std::string* error) {
  const int dev = current_device_index();
  if (dev < 0) {
    *error = "[jit] no current CUDA device";
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<size_t>(dev) < modules_.size() && modules_[dev]) return modules_[dev];
  const trace::Scope span("jit", "module_load");  // on whichever thread launches first
  void* m = load_cubin(cubin_, error);
  if (!m) return nullptr;
  if (modules_.size() <= static_cast<size_t>(dev)) modules_.resize(dev + 1);
  modules_[dev] = m;
  return m;
}

std::shared_ptr<LoadedModule> CompiledKernel::module(std::string* error) {
  const int dev = current_device_index();
  if (dev < 0) {
    *error = "[jit] no current CUDA device";
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<size_t>(dev) < modules_.size() && modules_[dev]) return modules_[dev];
  void* mod = program->module(error);
  if (!mod) return nullptr;
  std::vector<std::string> names;
  for (Variant v : rendered.variants) names.push_back(rendered.entry(v));
  auto m = module_functions(mod, names, error);
  if (!m) return nullptr;
  // The loaded functions' own report is the final word on spilling.
  for (size_t i = 0; i < m->functions.size() && i < variant_ok.size(); ++i)
    if (m->functions[i].local_bytes > 0 && stats.size() > i && stats[i].spill_bytes > 0) variant_ok[i] = false;
  if (modules_.size() <= static_cast<size_t>(dev)) modules_.resize(dev + 1);
  modules_[dev] = m;
  return m;
}

CompiledKernel::RowShape::~RowShape() {
  for (const Timing& t : pending) {
    destroy_event(t.start);
    destroy_event(t.end);
  }
}

void CompiledKernel::with_row_shape(uint64_t key, const std::function<std::unique_ptr<RowShape>()>& make,
                                    const std::function<void(RowShape&)>& fn) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [k, v] : row_shapes_)
    if (k == key) return fn(*v);
  std::unique_ptr<RowShape> v = make();
  if (!v) return;
  if (row_shapes_.size() >= 64) {
    v->tuner.abandon();
    return fn(*v);
  }
  row_shapes_.emplace_back(key, std::move(v));
  fn(*row_shapes_.back().second);
}

uint64_t CompiledKernel::row_shape_key(unsigned block_x, unsigned block_y, int64_t rows) {
  return (uint64_t{block_x} << 40) | (uint64_t{block_y} << 32) | static_cast<uint64_t>(std::bit_width(static_cast<uint64_t>(rows)));
}

std::vector<CompiledKernel::RowBodyChoice> CompiledKernel::row_body_choices() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<RowBodyChoice> out;
  for (const auto& [k, v] : row_shapes_) {
    const BodyTuner& t = v->tuner;
    out.push_back({static_cast<unsigned>(k >> 40), static_cast<unsigned>((k >> 32) & 0xff),
                   static_cast<int>(k & 0xffffffffu), t.guess(), t.decided(), t.choice(), t.median_us(false),
                   t.median_us(true)});
  }
  return out;
}

std::string CompiledKernel::RowBodyChoice::describe() const {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << "rows < 2^" << rows_bits << ", " << block_x << "x" << block_y << " threads: " << (pipelined ? "pipelined" : "plain");
  if (decided && plain_us > 0 && pipelined_us > 0)
    os << ", timed " << (pipelined ? pipelined_us : plain_us) << " us against " << (pipelined ? "plain " : "pipelined ")
       << (pipelined ? plain_us : pipelined_us) << " us";
  else if (decided)
    os << " (not timed: the only usable body, rows one wave holds once, or timing failed)";
  else
    os << " (the starting guess; both bodies not timed yet)";
  return os.str();
}

bool CompiledKernel::usable(Variant v) const {
  for (size_t i = 0; i < rendered.variants.size(); ++i)
    if (rendered.variants[i] == v) return i < variant_ok.size() && variant_ok[i];
  return false;
}

std::string encode_payload(const CompiledKernel& k) {
  std::string s;
  put_raw<double>(s, k.compile_ms);
  put_raw<uint32_t>(s, static_cast<uint32_t>(k.stats.size()));
  for (const auto& e : k.stats) {
    put_str(s, e.name);
    put_raw<int32_t>(s, e.registers);
    put_raw<int32_t>(s, e.spill_bytes);
  }
  put_raw<uint32_t>(s, static_cast<uint32_t>(k.variant_ok.size()));
  for (bool b : k.variant_ok) put_raw<uint8_t>(s, b ? 1 : 0);
  put_str(s, k.cubin());
  return s;
}

bool decode_payload(const std::string& s, CompiledKernel& k) {
  size_t pos = 0;
  uint32_t n = 0;
  if (!get_raw(s, pos, k.compile_ms) || !get_raw(s, pos, n) || n > 64) return false;
  k.stats.resize(n);
  for (auto& e : k.stats) {
    int32_t r = 0, sp = 0;
    if (!get_str(s, pos, e.name) || !get_raw(s, pos, r) || !get_raw(s, pos, sp)) return false;
    e.registers = r;
    e.spill_bytes = sp;
  }
  if (!get_raw(s, pos, n) || n > 64) return false;
  k.variant_ok.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    uint8_t b = 0;
    if (!get_raw(s, pos, b)) return false;
    k.variant_ok[i] = b != 0;
  }
  std::string cubin;
  if (!get_str(s, pos, cubin) || cubin.empty()) return false;
  k.program = std::make_shared<CompiledProgram>(std::move(cubin));
  return pos == s.size();
}

// ---- DiskCache ----------------------------------------------------------------------------------
DiskCache::DiskCache(std::string dir, size_t cap) : dir_(std::move(dir)), cap_(cap) {
  if (dir_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  const bool writable = !ec && ::access(dir_.c_str(), W_OK | X_OK) == 0;
  if (!writable) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      std::cerr << "[livefuse] warning: kernel cache directory " << dir_
                << " is not writable; kernels are cached in memory only\n";
    return;
  }
  enabled_ = true;
}

std::string DiskCache::path_for(const KernelKey& key) const { return dir_ + "/" + hex64(key.hash) + ".lfk"; }

std::optional<std::string> DiskCache::get(const KernelKey& key, CacheCounters& c) {
  if (!enabled_) return std::nullopt;
  std::ifstream f(path_for(key), std::ios::binary);
  if (!f) {
    ++c.disk_misses;
    return std::nullopt;
  }
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  char magic[4];
  uint32_t format = 0, key_len = 0;
  uint64_t payload_len = 0, checksum = 0;
  auto reject = [&]() -> std::optional<std::string> {
    ++c.disk_rejected;
    return std::nullopt;
  };
  if (data.size() < 4) return reject();
  std::memcpy(magic, data.data(), 4);
  pos = 4;
  if (std::memcmp(magic, kMagic, 4) != 0 || !get_raw(data, pos, format) || format != kFormat ||
      !get_raw(data, pos, key_len) || !get_raw(data, pos, payload_len) || !get_raw(data, pos, checksum))
    return reject();
  if (pos + key_len + payload_len != data.size()) return reject();
  const std::string stored_key = data.substr(pos, key_len);
  std::string payload = data.substr(pos + key_len, payload_len);
  const uint64_t sum = fnv1a(payload.data(), payload.size(), fnv1a(stored_key.data(), stored_key.size()));
  if (sum != checksum || stored_key != key.text) return reject();
  ++c.disk_hits;
  return payload;
}

void DiskCache::put(const KernelKey& key, const std::string& payload, CacheCounters& c) {
  if (!enabled_) return;
  std::string data(kMagic, 4);
  put_raw<uint32_t>(data, kFormat);
  put_raw<uint32_t>(data, static_cast<uint32_t>(key.text.size()));
  put_raw<uint64_t>(data, payload.size());
  put_raw<uint64_t>(data, fnv1a(payload.data(), payload.size(), fnv1a(key.text.data(), key.text.size())));
  data += key.text;
  data += payload;
  static std::atomic<uint64_t> counter{0};
  const std::string final_path = path_for(key);
  const std::string tmp = final_path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()) & 0xffffff) + "." +
                          std::to_string(counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  bool ok = fd >= 0;
  size_t done = 0;
  while (ok && done < data.size()) {
    const ssize_t w = ::write(fd, data.data() + done, data.size() - done);
    if (w <= 0) ok = false;
    else done += static_cast<size_t>(w);
  }
  if (fd >= 0 && ::close(fd) != 0) ok = false;
  if (ok && std::rename(tmp.c_str(), final_path.c_str()) != 0) ok = false;
  if (!ok) {
    ::unlink(tmp.c_str());
    ++c.disk_write_failures;
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      std::cerr << "[livefuse] warning: cannot write the kernel cache entry " << final_path
                << " (disk full or read-only?); continuing with the memory cache\n";
    return;
  }
  ++c.disk_writes;
  evict_over_cap(c);
}

void DiskCache::evict_over_cap(CacheCounters& c) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, fs::path>> entries;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (e.path().extension() != ".lfk") continue;
    std::error_code ec2;
    const auto t = fs::last_write_time(e.path(), ec2);
    if (!ec2) entries.emplace_back(t, e.path());
  }
  if (entries.size() <= cap_) return;
  std::sort(entries.begin(), entries.end());
  const size_t drop = entries.size() - cap_;
  for (size_t i = 0; i < drop; ++i) {
    std::error_code ec3;
    if (fs::remove(entries[i].second, ec3)) ++c.disk_evictions;
  }
}

// ---- KernelCache --------------------------------------------------------------------------------
KernelCache::KernelCache(std::string disk_dir, size_t memory_cap, size_t disk_cap)
    : cap_(memory_cap), disk_(std::move(disk_dir), disk_cap) {}

void KernelCache::insert_memory_locked(const std::shared_ptr<CompiledKernel>& k) {
  if (auto it = map_.find(k->key.text); it != map_.end()) {
    lru_.erase(it->second.pos);
    map_.erase(it);
  }
  lru_.push_front(k->key.text);
  map_[k->key.text] = Entry{k, lru_.begin()};
  while (map_.size() > cap_) {
    map_.erase(lru_.back());
    lru_.pop_back();
    ++c_.memory_evictions;
  }
}

std::shared_ptr<CompiledKernel> KernelCache::find(const KernelKey& key, const RenderedKernel& rk) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = map_.find(key.text); it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.pos);
      ++c_.memory_hits;
      return it->second.k;
    }
    ++c_.memory_misses;
  }
  CacheCounters local;
  std::optional<std::string> payload = disk_.get(key, local);
  std::shared_ptr<CompiledKernel> k;
  if (payload) {
    k = std::make_shared<CompiledKernel>();
    k->key = key;
    k->rendered = rk;
    if (!decode_payload(*payload, *k) || k->variant_ok.size() != rk.variants.size()) {
      k.reset();
      ++local.disk_rejected;
      --local.disk_hits;
    } else {
      k->from_disk = true;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  c_.disk_hits += local.disk_hits;
  c_.disk_misses += local.disk_misses;
  c_.disk_rejected += local.disk_rejected;
  if (k) insert_memory_locked(k);
  return k;
}

void KernelCache::insert(const std::shared_ptr<CompiledKernel>& k) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    insert_memory_locked(k);
  }
  CacheCounters local;
  disk_.put(k->key, encode_payload(*k), local);
  std::lock_guard<std::mutex> lock(mu_);
  c_.disk_writes += local.disk_writes;
  c_.disk_evictions += local.disk_evictions;
  c_.disk_write_failures += local.disk_write_failures;
}

void KernelCache::clear_memory() {
  std::lock_guard<std::mutex> lock(mu_);
  map_.clear();
  lru_.clear();
}

CacheCounters KernelCache::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return c_;
}

size_t KernelCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

}  // namespace livefuse::jit
