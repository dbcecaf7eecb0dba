#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "livefuse/config.hpp"
#include "livefuse/error.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/memory_pool.hpp"

namespace livefuse {

namespace {

struct Counters {
  std::atomic<size_t> in_use{0}, peak{0}, allocations{0}, cached{0};
  void add(size_t b) {
    const size_t now = in_use.fetch_add(b) + b;
    size_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    allocations.fetch_add(1);
  }
  void sub(size_t b) { in_use.fetch_sub(b); }
};

Counters& cpu_counters() {
  static Counters c;
  return c;
}

// ---- CPU: size classes of powers of two from 256 B; blocks above 1 GiB are not cached ----
class CpuPool {
 public:
  static constexpr int kClasses = 23;                    // 256 B .. 1 GiB
  static constexpr size_t kMaxCached = size_t(2) << 30;  // cap; beyond it blocks are freed

  void* get(size_t bytes, size_t* cls_bytes) {
    const int c = size_class(bytes);
    if (c >= kClasses) {
      *cls_bytes = round_up(bytes);
      return raw_alloc(*cls_bytes);
    }
    *cls_bytes = size_t(256) << c;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto& fl = free_[c];
      if (!fl.empty()) {
        void* p = fl.back();
        fl.pop_back();
        cpu_counters().cached.fetch_sub(*cls_bytes);
        return p;
      }
    }
    return raw_alloc(*cls_bytes);
  }

  void put(void* p, size_t cls_bytes) {
    const int c = size_class(cls_bytes);
    if (c < kClasses && cpu_counters().cached.load() + cls_bytes <= kMaxCached) {
      std::lock_guard<std::mutex> g(mu_);
      free_[c].push_back(p);
      cpu_counters().cached.fetch_add(cls_bytes);
      return;
    }
    std::free(p);
  }

  void trim() {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& fl : free_) {
      for (void* p : fl) std::free(p);
      fl.clear();
    }
    cpu_counters().cached.store(0);
  }

 private:
  static int size_class(size_t bytes) {
    if (bytes <= 256) return 0;
    return std::bit_width(bytes - 1) - 8;
  }
  static size_t round_up(size_t b) { return (b + 63) / 64 * 64; }
  static void* raw_alloc(size_t bytes) {
    void* p = std::aligned_alloc(64, std::max<size_t>(64, round_up(bytes)));
    LF_CHECK(p != nullptr, "alloc", "out of host memory allocating ", bytes, " bytes");
    return p;
  }
  std::mutex mu_;
  std::array<std::vector<void*>, kClasses> free_;
};

CpuPool& cpu_pool() {
  // Leaked on purpose: tensors held in static objects may be released after main returns.
  static CpuPool* p = new CpuPool;
  return *p;
}

#if LIVEFUSE_HAS_CUDA
Counters& cuda_counters() {
  static Counters c;
  return c;
}

cudaMemPool_t cuda_pool(int device) {
  static std::once_flag once;
  static cudaMemPool_t pool = nullptr;
  std::call_once(once, [&] {
    LF_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    // Never give memory back between calls: steady-state inference then costs no driver calls.
    uint64_t threshold = UINT64_MAX;
    LF_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  });
  return pool;
}

// A failed free (a destructor has nobody to tell) must not linger as the thread's last CUDA
// error, where the next launch check would report it as its own.
void free_async(void* p, cudaStream_t st) {
  if (cudaFreeAsync(p, st) != cudaSuccess) (void)cudaGetLastError();
}

// Blocks freed on a stream, kept for the next allocation of the same size on the same stream.
// Stream order makes that reuse safe without events, and it saves the two driver calls
// (cudaMallocAsync + cudaFreeAsync, about a microsecond of host time together) that every
// eager op would otherwise pay. Other streams, other sizes and overflow go to the pool.
// LIVEFUSE_CUDA_CACHE=0 turns it off.
class CudaBlockCache {
 public:
  static constexpr size_t kMaxCachedBytes = size_t(4) << 30;

  void* get(size_t bytes, cudaStream_t st) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = free_.find(Key{bytes, st});
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= bytes;
    return p;
  }
  bool put(void* p, size_t bytes, cudaStream_t st) {
    std::lock_guard<std::mutex> g(mu_);
    if (cached_ + bytes > kMaxCachedBytes) return false;
    free_[Key{bytes, st}].push_back(p);
    cached_ += bytes;
    return true;
  }
  void release_all() {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [k, v] : free_)
      for (void* p : v) free_async(p, k.stream);
    free_.clear();
    cached_ = 0;
  }
  size_t cached() const { return cached_; }

 private:
  struct Key {
    size_t bytes;
    cudaStream_t stream;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<size_t>()(k.bytes) * 31 + std::hash<void*>()(k.stream);
    }
  };
  std::mutex mu_;
  std::unordered_map<Key, std::vector<void*>, KeyHash> free_;
  std::atomic<size_t> cached_{0};
};

CudaBlockCache& cuda_cache() {
  static CudaBlockCache* c = new CudaBlockCache;  // leaked: tensors may die after main returns
  return *c;
}
#endif

}  // namespace

namespace {
thread_local bool t_capturing = false;
}
CaptureScope::CaptureScope() : prev_(t_capturing) { t_capturing = true; }
CaptureScope::~CaptureScope() { t_capturing = prev_; }
bool CaptureScope::active() { return t_capturing; }

std::shared_ptr<Storage> allocate_storage(Device device, size_t bytes, void* stream) {
  auto s = std::make_shared<Storage>();
  s->device = device;
  s->bytes = bytes;
  if (device.is_cpu()) {
    size_t cls = 0;
    s->ptr = cpu_pool().get(bytes, &cls);
    cpu_counters().add(cls);
    s->deleter = [cls](void* p) {
      cpu_counters().sub(cls);
      cpu_pool().put(p, cls);
    };
    return s;
  }
#if LIVEFUSE_HAS_CUDA
  (void)cuda_pool(device.index);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  void* p = nullptr;
  const bool cache = config().cuda_cache && !t_capturing;
  if (bytes > 0 && cache) p = cuda_cache().get(bytes, st);
  if (bytes > 0 && !p) {
    cudaError_t e = cudaMallocAsync(&p, bytes, st);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw Error(detail::concat("[alloc] cudaMallocAsync of ", bytes, " bytes on ", device.str(),
                                 " failed: ", cudaGetErrorString(e)));
    }
  }
  s->ptr = p;
  cuda_counters().add(bytes);
  // Stream-ordered: later work on `st` may still read it; reuse on `st` is ordered after it.
  // (Two lambdas of 16 bytes each rather than one with a flag: std::function keeps those inline,
  // no heap allocation per tensor.)
  if (cache)
    s->deleter = [bytes, st](void* ptr) {
      cuda_counters().sub(bytes);
      if (ptr && !cuda_cache().put(ptr, bytes, st)) free_async(ptr, st);
    };
  else
    s->deleter = [bytes, st](void* ptr) {
      cuda_counters().sub(bytes);
      if (ptr) free_async(ptr, st);
    };
  return s;
#else
  (void)stream;
  throw Error("[alloc] CUDA memory requested but livefuse was built without CUDA");
#endif
}

MemoryStats memory_stats(Device device) {
  MemoryStats m;
  if (device.is_cpu()) {
    auto& c = cpu_counters();
    m.bytes_in_use = c.in_use;
    m.bytes_cached = c.cached;
    m.peak_in_use = c.peak;
    m.allocations = c.allocations;
    return m;
  }
#if LIVEFUSE_HAS_CUDA
  auto& c = cuda_counters();
  m.bytes_in_use = c.in_use;
  m.peak_in_use = c.peak;
  m.allocations = c.allocations;
  uint64_t reserved = 0;
  if (cudaMemPoolGetAttribute(cuda_pool(device.index), cudaMemPoolAttrReservedMemCurrent,
                              &reserved) == cudaSuccess)
    m.bytes_cached = reserved > m.bytes_in_use ? reserved - m.bytes_in_use : 0;
  m.bytes_cached = std::max(m.bytes_cached, cuda_cache().cached());
#endif
  return m;
}

void empty_cache(Device device) {
  if (device.is_cpu()) return cpu_pool().trim();
#if LIVEFUSE_HAS_CUDA
  cuda_cache().release_all();
  LF_CUDA_CHECK(cudaDeviceSynchronize());
  LF_CUDA_CHECK(cudaMemPoolTrimTo(cuda_pool(device.index), 0));
#endif
}

}  // namespace livefuse
