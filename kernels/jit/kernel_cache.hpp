#pragma once
// Compiled fused kernels, cached in memory and on disk.
//
// [ Note -- kernel cache key ]
// A key is the text
//   lfk2|spec=<structure_hash>|kind=<pointwise|row>|io=<dtypes and spaces of every input and
//   output>|spec_dims=<specialised dims, "-" when none>|arch=sm_<XX>|nvrtc=<major.minor>|
//   opts=<every NVRTC flag>|src=<FNV-1a 64 of the rendered source>|helpers=<FNV-1a of the
//   embedded lf_math.cuh + lf_fused.cuh>
// structure_hash covers every instruction (op, attrs and scalars, dtypes, compute types,
// spaces, wiring) and the io descriptions; the source hash makes any change of the renderer
// or of an op's expr a different key even when the structure is equal. Concrete shapes,
// strides and pointers are never in a key: they are kernel parameters. A disk entry's file name
// is a 64-bit hash of the key, and the entry stores the whole key text, so a collision or an
// entry written by another version/arch/NVRTC is detected and ignored (then overwritten).
// The op library of the linked route keeps its LTO IR in the same directory under keys of its
// own family, "lfl1|..." (lto_compiler.cpp): no kernel key ever matches one.
//
// Disk entry: "LFKC" | u32 format | u32 key_len | u64 payload_len | u64 checksum (FNV-1a over
// key and payload) | key | payload (cubin and compile stats). The cubin is that of the program
// the kernel was compiled in, which may hold other kernels of its batch (kernel_compiler.hpp);
// the key is still the kernel's own (its source alone), and loading the entry finds its entries.
// Written to a unique temp file in the same directory and renamed over the final name (atomic
// on POSIX), so a reader sees the old entry, the new one, or none -- never half of one;
// concurrent writers of one key both rename whole files. A truncated, corrupt or foreign file is ignored and rebuilt. An
// unwritable directory turns disk caching off for the process with one warning.
//
// Bounds: the memory cache keeps at most `memory_cap` kernels (LRU; evictions counted; a
// kernel in use stays alive through its shared_ptr); the disk directory at most `disk_cap`
// entries (oldest by modification time removed after a write; counted).
#include <cstdint>
#include <list>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/jit/cuda_driver.hpp"
#include "kernels/jit/nvrtc_compiler.hpp"
#include "kernels/jit/render.hpp"
#include "kernels/jit/row_tuner.hpp"

namespace livefuse::jit {

struct KernelKey {
  std::string text;
  uint64_t hash = 0;
};
KernelKey make_key(const KernelSpec& spec, const RenderedKernel& rk, const CompileOptions& opts);
uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull);
std::string hex64(uint64_t v);       // 16 hex digits: key fields, file names
KernelKey key_of(std::string text);  // the key with that text (its hash: FNV-1a of the text)

// An NVRTC program's cubin, loaded at most once per device and shared by the kernels compiled in
// it (a program may hold several: program_source).
class CompiledProgram {
 public:
  explicit CompiledProgram(std::string cubin, int kernels = 1) : cubin_(std::move(cubin)), kernels_(kernels) {}
  const std::string& cubin() const { return cubin_; }
  int kernels() const { return kernels_; }
  // The CUmodule on the current device (loaded at the first call there); nullptr + *error.
  void* module(std::string* error);

 private:
  const std::string cubin_;
  const int kernels_;
  std::mutex mu_;
  std::vector<void*> modules_;  // by device index
};

// A compiled kernel: the rendered kernel, the program it was compiled in and its stats; its
// functions are looked up lazily per device.
struct CompiledKernel {
  KernelKey key;
  RenderedKernel rendered;
  std::shared_ptr<CompiledProgram> program;
  std::string log;
  double compile_ms = 0;   // NVRTC time spent on it: its program's, shared out among the program's
                           // kernels (the stored figure for a disk hit)
  bool from_disk = false;
  const std::string& cubin() const { return program->cubin(); }
  std::vector<EntryStats> stats;       // per variant, from ptxas
  std::vector<bool> variant_ok;        // per rendered.variants entry: false when it spills

  // The module for the current device (loaded at first use). nullptr + error on failure.
  std::shared_ptr<LoadedModule> module(std::string* error);
  bool usable(Variant v) const;
  // Register rows with both bodies, per launch shape (cuda_launch.cpp makes the key): the
  // blocks the pipelined body keeps resident per SM (its grid) and which body runs, measured at
  // the shape's first launches (row_tuner.hpp), with the timings not yet read.
  struct RowShape {
    struct Timing {
      void* start = nullptr;
      void* end = nullptr;
      bool pipelined = false;
    };
    int pipelined_blocks_per_sm = 1;
    BodyTuner tuner{false};
    std::vector<Timing> pending;
    RowShape(int blocks, bool guess) : pipelined_blocks_per_sm(blocks), tuner(guess) {}
    RowShape(const RowShape&) = delete;
    RowShape& operator=(const RowShape&) = delete;
    ~RowShape();  // destroys the events of pending timings
  };
  // fn(shape) under the kernel's lock; make() builds the shape's entry at its first launch (a
  // null one: fn is not called). Beyond 64 shapes a fresh, untimed entry serves each launch.
  void with_row_shape(uint64_t key, const std::function<std::unique_ptr<RowShape>()>& make,
                      const std::function<void(RowShape&)>& fn);
  // A launch shape: threads per row and rows per block, and the rows to within a factor of two.
  static uint64_t row_shape_key(unsigned block_x, unsigned block_y, int64_t rows);
  // The body choices so far, one per launch shape (tests, benchmarks, the inspection report).
  struct RowBodyChoice {
    unsigned block_x = 0, block_y = 0;
    int rows_bits = 0;  // rows < 2^rows_bits
    bool guess = false, decided = false, pipelined = false;
    double plain_us = 0, pipelined_us = 0;  // median timed launch of each body (0: none)
    std::string describe() const;
  };
  std::vector<RowBodyChoice> row_body_choices() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<uint64_t, std::unique_ptr<RowShape>>> row_shapes_;
  std::vector<std::shared_ptr<LoadedModule>> modules_;  // by device index
};

struct CacheCounters {
  uint64_t memory_hits = 0, memory_misses = 0, memory_evictions = 0;
  uint64_t disk_hits = 0, disk_misses = 0, disk_writes = 0, disk_rejected = 0, disk_evictions = 0,
           disk_write_failures = 0;
};

class DiskCache {
 public:
  explicit DiskCache(std::string dir, size_t cap = 4096);
  bool enabled() const { return enabled_; }
  const std::string& dir() const { return dir_; }
  // The stored payload for `key`, or nullopt (absent, corrupt or foreign: counted as rejected).
  std::optional<std::string> get(const KernelKey& key, CacheCounters& c);
  void put(const KernelKey& key, const std::string& payload, CacheCounters& c);
  std::string path_for(const KernelKey& key) const;

 private:
  void evict_over_cap(CacheCounters& c);
  std::string dir_;
  size_t cap_;
  bool enabled_ = false;
};

class KernelCache {
 public:
  KernelCache(std::string disk_dir, size_t memory_cap = 1024, size_t disk_cap = 4096);
  // Memory, then disk (a disk hit is rebuilt around `rk` and kept in memory). nullptr: miss.
  std::shared_ptr<CompiledKernel> find(const KernelKey& key, const RenderedKernel& rk);
  void insert(const std::shared_ptr<CompiledKernel>& k);  // memory and disk
  void clear_memory();
  CacheCounters counters() const;
  size_t size() const;
  bool disk_enabled() const { return disk_.enabled(); }
  DiskCache& disk() { return disk_; }

 private:
  mutable std::mutex mu_;
  size_t cap_;
  std::list<std::string> lru_;  // most recent first
  struct Entry {
    std::shared_ptr<CompiledKernel> k;
    std::list<std::string>::iterator pos;
  };
  std::unordered_map<std::string, Entry> map_;
  void insert_memory_locked(const std::shared_ptr<CompiledKernel>& k);
  DiskCache disk_;
  CacheCounters c_;
};

// Payload (de)serialisation: cubin + stats, without the rendered source (rebuilt from the spec).
std::string encode_payload(const CompiledKernel& k);
bool decode_payload(const std::string& payload, CompiledKernel& k);

}  // namespace livefuse::jit
