#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <vector>

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
  static constexpr int kClasses = 23;                 // 256 B .. 1 GiB
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
#endif

}  // namespace

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
  if (bytes > 0) {
    cudaError_t e = cudaMallocAsync(&p, bytes, st);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw Error(detail::concat("[alloc] cudaMallocAsync of ", bytes, " bytes on ", device.str(),
                                 " failed: ", cudaGetErrorString(e)));
    }
  }
  s->ptr = p;
  cuda_counters().add(bytes);
  s->deleter = [bytes, st](void* ptr) {
    cuda_counters().sub(bytes);
    // Stream-ordered free: later work on `st` may still read it; the pool reuses it safely.
    if (ptr) (void)cudaFreeAsync(ptr, st);
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
#endif
  return m;
}

void empty_cache(Device device) {
  if (device.is_cpu()) return cpu_pool().trim();
#if LIVEFUSE_HAS_CUDA
  LF_CUDA_CHECK(cudaDeviceSynchronize());
  LF_CUDA_CHECK(cudaMemPoolTrimTo(cuda_pool(device.index), 0));
#endif
}

}  // namespace livefuse
