#pragma once
// A KV cache grown by concat, appended in place (issue: shape-parametric decode).
//
// [ Note -- capacity and in-place appends ]
// A decode loop writes `cache = concat({cache, k}, 2)` every step. Done literally, each step
// copies the whole cache into fresh storage: O(length) bytes a token, the growth of a long
// context's step time beyond the bytes its attention reads.
//
// 1. Capacity. A concat that looks like a cache growing -- its first input at least
//    kAppendMinRows long along the concat dim and at least 4x what the others add, and the dim
//    not the first or the last -- gives its result strides with room: those of the same shape
//    with the concat dim's extent raised to a capacity C (the output is a view of a [.., C, ..]
//    block). When the first input already has such strides with room for the result, the
//    result takes exactly its strides; else C = L + L/4 + 32 rounded up to 32 (amortised: a
//    full copy once every ~L/4 steps, at most ~25% + 32 rows of the block unused). The layout
//    is decided at the call, in every mode (LIVEFUSE=off too), so what strides() reports does
//    not depend on whether fusion ran.
// 2. In place. When the concat runs, its result can take the first input's storage instead of
//    fresh storage -- then only the new rows are copied (the kernels skip an input whose
//    memory already is where the output wants it) -- if nobody can tell: the first input is
//    referenced by nothing but the window that is being completed (the program dropped it: the
//    loop reassigned its handle), the storage by nothing but that input (no view of it lives),
//    the program never reached the memory (not exposed: not wrapped, no data_ptr(), no DLPack),
//    the strides are the same and the block has room. The matcher works out which inputs are
//    so at a window's completion (DonatedInputs); eager calls outside a window never take over
//    (the program still holds the input while its call runs). The rows the result adds lie
//    past the input's extent, so even a wrong guess about who holds the input could not change
//    a value it shows; the reference counts rule out the other hazard, a later in-place write
//    through one tensor showing through the other.
#include <cstddef>
#include <span>

#include "livefuse/tensor.hpp"
#include "runtime/op_call.hpp"

namespace livefuse {

struct Window;

namespace append {

inline constexpr int64_t kAppendMinRows = 16;

// The strides of concat `call`'s output of shape `out` (Note 1): contiguous, or with capacity.
Strides concat_strides(const OpCall& call, const Shape& out);

// Bytes a fresh storage for `t` (offset 0) needs: its elements, or the whole block its
// capacity strides describe.
size_t storage_bytes(const TensorImpl& t);

// Storage for `out`, an output of `call` (null: of no call) that has none yet: the block of a
// concat's first input when Note 2 allows it (its rows are then in place already), else a fresh
// block of storage_bytes(out) on `stream`. Nothing when `out` has storage.
void give_storage(const OpCall* call, TensorImpl& out, void* stream);

// True when src's elements already sit where dst wants them (same address and strides): a copy
// from one to the other can be skipped.
bool same_place(const void* src, const Strides& src_st, const void* dst, const Strides& dst_st,
                const Shape& shape);

// While a window completes on this thread: the first inputs of its concats that nothing but
// the window references (Note 2). The window's calls, outputs and externals are counted here;
// the matcher adds the other tensors its state for the window holds (also_held: the other
// candidates' bound slots). Scopes nest; the inner one is in force.
class DonatedInputs {
 public:
  explicit DonatedInputs(const Window& w);
  ~DonatedInputs();
  DonatedInputs(const DonatedInputs&) = delete;
  DonatedInputs& operator=(const DonatedInputs&) = delete;

  void also_held(std::span<const Tensor> ts);
  static constexpr int kMost = 8;
  bool has(const TensorImpl* t) const;

 private:
  const TensorImpl* impls_[kMost];
  long uses_[kMost], refs_[kMost];  // use_count() when the window completes, and the window's
  int n_ = 0;
  const DonatedInputs* outer_;
};

}  // namespace append
}  // namespace livefuse
