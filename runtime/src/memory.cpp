#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "livefuse/config.hpp"
#include "livefuse/error.hpp"
#include "runtime/block_cache.hpp"
#include "runtime/cuda_check.hpp"
#include "runtime/handle_pool.hpp"
#include "runtime/memory_pool.hpp"

namespace livefuse {

namespace {

struct Counters {
  std::atomic<size_t> in_use{0}, peak{0}, allocations{0};
  void add(size_t b) {
    const size_t now = in_use.fetch_add(b) + b;
    size_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    allocations.fetch_add(1);
  }
  void sub(size_t b) { in_use.fetch_sub(b); }
};

// LIVEFUSE_CACHE_MAX_MB, read at each allocation and kept by the pool: a block is freed from
// a deleter, which may run during static destruction, when reading the configuration is not
// safe.
size_t cache_cap_bytes() { return static_cast<size_t>(config().cache_max_mb) << 20; }
// Stores only a change: every thread allocates, and a store per allocation would bounce the
// cache line between their cores.
void refresh_cap(std::atomic<size_t>& cap) {
  const size_t now = cache_cap_bytes();
  if (cap.load(std::memory_order_relaxed) != now) cap.store(now, std::memory_order_relaxed);
}

Counters& cpu_counters() {
  static Counters c;
  return c;
}

// ---- CPU: size classes of powers of two from 256 B; blocks above 1 GiB are not cached ----
class CpuPool {
 public:
  static constexpr int kClasses = 23;  // 256 B .. 1 GiB

  void* get(size_t bytes, size_t* cls_bytes) {
    refresh_cap(cap_);
    const int c = size_class(bytes);
    if (c >= kClasses) {
      *cls_bytes = round_up(bytes);
      return raw_alloc(*cls_bytes);
    }
    *cls_bytes = size_t(256) << c;
    if (void* p = cache_.take(c)) return p;
    return raw_alloc(*cls_bytes);
  }

  void put(void* p, size_t cls_bytes) {
    const int c = size_class(cls_bytes);
    if (c >= kClasses) return std::free(p);
    cache_.put({p, cls_bytes, c}, cap_.load(std::memory_order_relaxed), true,
               [](const Cache::Block& b) { std::free(b.ptr); });
  }

  void trim() {
    cache_.release_all([](const Cache::Block& b) { std::free(b.ptr); });
  }
  size_t cached() const { return cache_.cached(); }
  BlockCacheCounters counters() const { return cache_.counters(); }

 private:
  using Cache = BlockCache<int, std::hash<int>>;
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
  std::atomic<size_t> cap_{size_t(1) << 30};
  Cache cache_;
};

CpuPool& cpu_pool() {
  // Leaked on purpose: tensors held in static objects may be released after main returns.
  static CpuPool* p = new CpuPool;
  return *p;
}

thread_local bool t_capturing = false;
// The storages allocated in this thread's innermost capture (CaptureScope).
thread_local std::vector<CaptureScope::Allocation>* t_capture_allocs = nullptr;

#if LIVEFUSE_HAS_CUDA
// A failed free (a destructor has nobody to tell) must not linger as the thread's last CUDA
// error, where the next launch check would report it as its own.
void free_async(void* p, cudaStream_t st) {
  if (cudaFreeAsync(p, st) != cudaSuccess) (void)cudaGetLastError();
}

struct CudaBlockKey {
  size_t bytes;  // the size class (cuda_size_class)
  cudaStream_t stream;
  bool operator==(const CudaBlockKey&) const = default;
};
struct CudaBlockKeyHash {
  size_t operator()(const CudaBlockKey& k) const {
    return std::hash<size_t>()(k.bytes) * 31 + std::hash<void*>()(k.stream);
  }
};

// One device's memory: the stream-ordered pool (cudaMemPool) and, in front of it, blocks freed
// on a stream, kept for the next allocation of the same size on the same stream. Stream order
// makes that reuse safe without events, and it saves the two driver calls (cudaMallocAsync +
// cudaFreeAsync, about a microsecond of host time together) that every eager op would
// otherwise pay. Other streams and other sizes go to the pool. LIVEFUSE_CUDA_CACHE=0 turns the
// block cache off.
//
// Both are bounded by LIVEFUSE_CACHE_MAX_MB (cap): the block cache keeps at most cap bytes
// (the oldest blocks go back to the pool first: under shape churn those are the sizes that do
// not come back), and once the pool's unused memory passes twice the cap it is trimmed back to
// the cap (the pool reuses memory for any size, so it keeps some slack before giving memory
// to the driver: each give-back costs a driver allocation later).
struct CudaDevice {
  std::once_flag once;
  cudaMemPool_t pool = nullptr;
  Counters counters;
  BlockCache<CudaBlockKey, CudaBlockKeyHash> blocks;
  std::atomic<size_t> cap{size_t(1) << 30};
  std::atomic<size_t> returned_since_check{0};
  std::atomic<uint64_t> pool_trims{0};
};
constexpr int kMaxCudaDevices = 64;

CudaDevice& cuda_device(int device) {
  // Leaked: tensors may die after main returns.
  static CudaDevice* const all = new CudaDevice[kMaxCudaDevices];
  LF_CHECK(device >= 0 && device < kMaxCudaDevices, "alloc", "CUDA device index ", device,
           " is outside 0..", kMaxCudaDevices - 1);
  CudaDevice& d = all[device];
  std::call_once(d.once, [&] {
    LF_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&d.pool, device));
    // The pool keeps its memory between calls (steady-state inference then costs no driver
    // calls); maybe_trim_pool() bounds what it keeps unused.
    uint64_t threshold = UINT64_MAX;
    LF_CUDA_CHECK(cudaMemPoolSetAttribute(d.pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  });
  return d;
}

void maybe_trim_pool(CudaDevice& d) {
  uint64_t reserved = 0, used = 0;
  if (cudaMemPoolGetAttribute(d.pool, cudaMemPoolAttrReservedMemCurrent, &reserved) !=
          cudaSuccess ||
      cudaMemPoolGetAttribute(d.pool, cudaMemPoolAttrUsedMemCurrent, &used) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  const uint64_t cap = d.cap.load(std::memory_order_relaxed);
  if (reserved <= used + 2 * cap) return;
  // Releases only memory whose frees have completed: safe with work in flight.
  if (cudaMemPoolTrimTo(d.pool, used + cap) == cudaSuccess)
    d.pool_trims.fetch_add(1, std::memory_order_relaxed);
  else
    (void)cudaGetLastError();
}

// Bytes just freed to the pool: the pool is looked at every cap/8 of them (at least 1 MiB), so
// the check costs nothing per op.
void note_returned(CudaDevice& d, size_t bytes) {
  const size_t every = std::max<size_t>(d.cap.load(std::memory_order_relaxed) / 8, size_t(1) << 20);
  if (d.returned_since_check.fetch_add(bytes, std::memory_order_relaxed) + bytes < every) return;
  d.returned_since_check.store(0, std::memory_order_relaxed);
  maybe_trim_pool(d);
}

// Frees of memory allocated outside a capture, made while this thread captures: a cudaFreeAsync
// on the captured stream would become a node of the graph (freeing, at every replay, memory the
// graph does not own). They wait here until the capture ends.
struct DeferredFree {
  void* ptr;
  cudaStream_t stream;
  int device;
  size_t bytes;
};
std::mutex g_deferred_mu;
std::vector<DeferredFree>& deferred_frees() {
  static auto* v = new std::vector<DeferredFree>;  // leaked, as the pools
  return *v;
}
std::atomic<bool> g_have_deferred{false};

void release_deferred_frees() {
  if (!g_have_deferred.load(std::memory_order_acquire) || t_capturing) return;
  std::vector<DeferredFree> todo;
  {
    std::lock_guard<std::mutex> g(g_deferred_mu);
    // Another thread's capture may have deferred some of these: they are not its graph's
    // memory either, so freeing them from here is right.
    todo.swap(deferred_frees());
    g_have_deferred.store(false, std::memory_order_release);
  }
  for (const DeferredFree& f : todo) {
    free_async(f.ptr, f.stream);
    note_returned(cuda_device(f.device), f.bytes);
  }
}

// The three ways a CUDA block goes back. The deleters capture 16 bytes (bytes and device packed
// into one word, the stream), which std::function keeps inline: no heap allocation per tensor.
constexpr int kDeviceShift = 48;
uint64_t pack(size_t bytes, int device) {
  return static_cast<uint64_t>(bytes) | (static_cast<uint64_t>(device) << kDeviceShift);
}
size_t bytes_of(uint64_t packed) { return packed & ((uint64_t(1) << kDeviceShift) - 1); }
int device_of(uint64_t packed) { return static_cast<int>(packed >> kDeviceShift); }

void to_block_cache(uint64_t packed, void* ptr, cudaStream_t st) {
  CudaDevice& d = cuda_device(device_of(packed));
  const size_t bytes = bytes_of(packed);
  d.counters.sub(bytes);
  if (!ptr) return;
  size_t returned = 0;
  d.blocks.put({ptr, bytes, CudaBlockKey{bytes, st}}, d.cap.load(std::memory_order_relaxed),
               !t_capturing, [&](const auto& b) {
                 free_async(b.ptr, b.key.stream);
                 returned += b.bytes;
               });
  if (returned) note_returned(d, returned);
}

void to_pool(uint64_t packed, void* ptr, cudaStream_t st) {
  CudaDevice& d = cuda_device(device_of(packed));
  const size_t bytes = bytes_of(packed);
  d.counters.sub(bytes);
  if (!ptr) return;
  if (t_capturing) {
    std::lock_guard<std::mutex> g(g_deferred_mu);
    deferred_frees().push_back({ptr, st, device_of(packed), bytes});
    g_have_deferred.store(true, std::memory_order_release);
    return;
  }
  free_async(ptr, st);
  note_returned(d, bytes);
}

// Allocated inside a capture: graph memory, freed by the graph when it dies within the capture
// (a free node), else by this free once the graph has run.
void graph_owned_free(uint64_t packed, void* ptr, cudaStream_t st) {
  cuda_device(device_of(packed)).counters.sub(bytes_of(packed));
  if (ptr) free_async(ptr, st);
}
#endif

}  // namespace

CaptureScope::CaptureScope() : prev_(t_capturing), prev_allocs_(t_capture_allocs) {
  t_capturing = true;
  t_capture_allocs = &allocs_;
}
CaptureScope::~CaptureScope() {
  t_capturing = prev_;
  t_capture_allocs = prev_allocs_;
#if LIVEFUSE_HAS_CUDA
  release_deferred_frees();
#endif
}
bool CaptureScope::active() { return t_capturing; }

size_t CaptureScope::held_allocations() const {
  size_t n = 0;
  for (const Allocation& a : allocs_) n += !a.storage.expired();
  return n;
}

size_t CaptureScope::rehome(void* stream) {
  t_capturing = prev_;  // what follows allocates outside the capture
  t_capture_allocs = prev_allocs_;
  // The graph's own allocations are never freed here, rehomed or not (a block only parts of a
  // run held dies once they are rehomed): the address went with the graph and may be another
  // graph's by now. Only their bytes leave the count.
#if LIVEFUSE_HAS_CUDA
  for (const Allocation& a : allocs_)
    if (const std::shared_ptr<Storage> s = a.storage.lock(); s && a.owns && s->device.is_cuda())
      s->deleter = [device = s->device.index, bytes = s->bytes](void*) {
        cuda_device(device).counters.sub(bytes);
      };
#endif
  size_t n = 0;
  // Newest first: the parts of a run before the block they hold.
  for (auto it = allocs_.rbegin(); it != allocs_.rend(); ++it) {
    const std::shared_ptr<Storage> s = it->storage.lock();
    if (!s || !s->device.is_cuda()) continue;
    const std::shared_ptr<Storage> fresh = allocate_storage(s->device, s->bytes, stream);
#if LIVEFUSE_HAS_CUDA
    if (it->owns) cuda_device(s->device.index).counters.sub(s->bytes);  // its deleter goes below
#endif
    s->ptr = fresh->ptr;
    s->deleter = std::move(fresh->deleter);
    fresh->ptr = nullptr;
    fresh->deleter = nullptr;
    ++n;
  }
  allocs_.clear();
  return n;
}

size_t cuda_size_class(size_t bytes) {
  constexpr size_t kSmall = size_t(64) << 10, kLarge = size_t(16) << 20, kLargeStep = size_t(2) << 20;
  if (bytes <= kSmall) return (bytes + 511) / 512 * 512;
  if (bytes > kLarge) return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
  // Four classes per power of two: 2^k * {1, 1.25, 1.5, 1.75}.
  const size_t step = (std::bit_floor(bytes - 1)) / 4;
  return (bytes + step - 1) / step * step;
}

std::vector<std::shared_ptr<Storage>> allocate_storage_run(Device device, size_t bytes, int parts,
                                                           void* stream) {
  const size_t step = (bytes + kStorageRunAlign - 1) / kStorageRunAlign * kStorageRunAlign;
  std::shared_ptr<Storage> block =
      allocate_storage(device, step * static_cast<size_t>(std::max(parts, 0)), stream);
  std::vector<std::shared_ptr<Storage>> out;
  for (int i = 0; i < parts; ++i) {
    auto s = handle_pool::make<Storage>();
    s->device = device;
    s->bytes = bytes;
    s->ptr = block->ptr ? static_cast<std::byte*>(block->ptr) + step * static_cast<size_t>(i) : nullptr;
    // Owns a share of the block: the block goes back to the pool with its last part.
    s->deleter = [block](void*) {};
    if (t_capturing && t_capture_allocs) t_capture_allocs->push_back({s, false});
    out.push_back(std::move(s));
  }
  return out;
}

std::shared_ptr<Storage> allocate_storage(Device device, size_t bytes, void* stream) {
  auto s = handle_pool::make<Storage>();
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
  CudaDevice& d = cuda_device(device.index);
  refresh_cap(d.cap);
  release_deferred_frees();
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  void* p = nullptr;
  // A block allocated inside a capture is a graph memory node: it bypasses the block cache
  // both ways (a cached block must never be one the graph owns, nor a graph own a block the
  // cache hands out again later).
  const bool cache = config().cuda_cache && !t_capturing;
  // Cached blocks are kept by size class, so a slightly longer tensor reuses a block.
  const size_t held = cache && bytes > 0 ? cuda_size_class(bytes) : bytes;
  if (bytes > 0 && cache) p = d.blocks.take(CudaBlockKey{held, st});
  if (bytes > 0 && !p) {
    cudaError_t e = cudaMallocAsync(&p, held, st);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw Error(detail::concat("[alloc] cudaMallocAsync of ", bytes, " bytes on ", device.str(),
                                 " failed: ", cudaGetErrorString(e)));
    }
  }
  s->ptr = p;
  d.counters.add(held);
  // Stream-ordered: later work on `st` may still read it; reuse on `st` is ordered after it.
  const uint64_t packed = pack(held, device.index);
  if (t_capturing) {
    s->deleter = [packed, st](void* ptr) { graph_owned_free(packed, ptr, st); };
    if (t_capture_allocs) t_capture_allocs->push_back({s, true});
  } else if (cache) {
    s->deleter = [packed, st](void* ptr) { to_block_cache(packed, ptr, st); };
  } else {
    s->deleter = [packed, st](void* ptr) { to_pool(packed, ptr, st); };
  }
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
    m.bytes_cached = cpu_pool().cached();
    m.peak_in_use = c.peak;
    m.allocations = c.allocations;
    const BlockCacheCounters k = cpu_pool().counters();
    m.cache_evictions = k.evictions;
    m.bytes_returned = k.bytes_returned;
    return m;
  }
#if LIVEFUSE_HAS_CUDA
  CudaDevice& d = cuda_device(device.index);
  m.bytes_in_use = d.counters.in_use;
  m.peak_in_use = d.counters.peak;
  m.allocations = d.counters.allocations;
  uint64_t reserved = 0;
  if (cudaMemPoolGetAttribute(d.pool, cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess)
    m.bytes_cached = reserved > m.bytes_in_use ? reserved - m.bytes_in_use : 0;
  else
    (void)cudaGetLastError();
  m.bytes_cached = std::max(m.bytes_cached, d.blocks.cached());
  const BlockCacheCounters k = d.blocks.counters();
  m.cache_evictions = k.evictions;
  m.bytes_returned = k.bytes_returned;
  m.pool_trims = d.pool_trims.load(std::memory_order_relaxed);
#endif
  return m;
}

void empty_cache(Device device) {
  if (device.is_cpu()) return cpu_pool().trim();
#if LIVEFUSE_HAS_CUDA
  CudaDevice& d = cuda_device(device.index);
  d.blocks.release_all([](const auto& b) { free_async(b.ptr, b.key.stream); });
  LF_CUDA_CHECK(cudaDeviceSynchronize());
  LF_CUDA_CHECK(cudaMemPoolTrimTo(d.pool, 0));
#endif
}

}  // namespace livefuse
