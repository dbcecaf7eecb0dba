#pragma once
// MergedWeights: the plan-owned concatenation of sibling linears' weights (and biases) that one
// merged GEMM reads (pass_gemm_siblings; plan_siblings.cpp runs it).
//
// [ Note -- when a concatenated copy is served ]
// A copy is made for one set of sources: each weight's (and bias') storage, held as a weak_ptr
// and compared by owner (a freed block the pool hands out again is a new Storage, so it misses),
// with the view's offset, shape, strides and dtype, and the stream it is written on. A plan
// serves many bindings (every layer of a model binds its own weights to the same slots), so
// each binding gets its own copy, least recently used first out past kMaxEntries.
// The copy is refreshed in place, on the stream, before the GEMM reads it, whenever any source
// may differ from what was copied (DESIGN, "Memory the program can reach"):
//   - its `version` moved: livefuse wrote it in place (copy_into, index_copy);
//   - it may_change(): exposed and not immutable, so the program may have written it through a
//     pointer at any time -- then every use copies it again (the matcher hands a deferred call
//     such memory as a fresh snapshot anyway, which is a new source each time).
// A refresh bumps the copy's own version, so the CPU GEMM's pack cache drops its stale pack.
// While a CUDA graph is being captured nothing is allocated: a copy that is not there yet is
// not served (the merged step then runs the siblings one by one); FusedPlan prepares the
// copies before every capture or replay (prepare_merged_weights), so this is the rare case.
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "livefuse/stream.hpp"
#include "livefuse/tensor.hpp"

namespace livefuse::planner {

class MergedWeights {
 public:
  static constexpr size_t kMaxEntries = 64;
  struct Copy {
    Tensor weight;  // [sum N_i, K], dense
    Tensor bias;    // [sum N_i], dense; undefined without biases
    bool defined() const { return weight.defined(); }
  };
  struct Counters {
    uint64_t hits = 0, refreshes = 0, builds = 0, evictions = 0, declined = 0;
  };

  // The concatenation of `weights` ([N_i, K] each, one dtype) along N and of `biases` (empty:
  // none), for exactly these sources; refreshed on `stream` where any of them may have changed
  // since it was copied. Undefined when it would have to be made during a graph capture.
  Copy get(std::span<const Tensor> weights, std::span<const Tensor> biases, const Stream& stream);
  // CUDA: a dense [.., sum N_i] buffer (`shape`) for the merged product on `stream`, kept per
  // stream and grown, never while a graph is captured. Undefined where it cannot be had then,
  // or past kMaxStreams streams (a buffer a captured graph writes is never handed to another).
  static constexpr size_t kMaxStreams = 8;
  Tensor scratch(const Shape& shape, DType dtype, const Stream& stream);
  Counters counters() const;

 private:
  struct Source {
    std::weak_ptr<Storage> owner;
    int64_t offset = 0;
    Shape shape;
    Strides strides;
    DType dtype = DType::f32;
    uint64_t version = 0;
  };
  struct Entry {
    std::vector<Source> sources;  // weights, then biases
    void* stream = nullptr;
    Copy copy;
    uint64_t last_use = 0;
  };
  static bool same_source(const Source& s, const Tensor& t);
  static bool current(const Source& s, const Tensor& t);

  struct Scratch {
    void* stream = nullptr;
    std::shared_ptr<Storage> storage;
  };

  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  std::vector<Scratch> scratch_;
  uint64_t clock_ = 0;
  Counters c_;
};

}  // namespace livefuse::planner
