#pragma once
// Held writes: in-place writes (copy_into, index_copy) that share one launch.
//
// [ Note -- writes held until the next call ]
// A static KV cache writes K and V at the step's position one after the other, two eager copy
// launches a layer (GPT-2: 24 a token, each ~2.4 us of GPU and ~5 us of the program's thread on
// the H200). A write whose operands the program cannot reach (neither storage exposed: no raw
// pointer handed out, nothing wrapped) is checked and ordered as before -- this thread's deferred
// calls run, other threads' windows that read the destination are settled, the storage's version
// moves -- and then *held* in this thread's batch instead of launched. The batch is enqueued, as
// one launch of independent copies on the batch's stream, at the first of:
//   * this thread's next op call (Executor::submit) or sync point (Executor::flush_all: data_ptr,
//     host copies, synchronize, a switch of stream);
//   * a write that conflicts with a held one (it writes a storage a held write reads or writes,
//     or reads one a held write writes -- two writes reading one source, a step's K and V as
//     views of one product, do not conflict), goes to another stream, finds the batch full, or
//     cannot be held: the batch first, then that write;
//   * another thread's op call or sync point on a storage a held write reads or writes (it
//     looks through every thread's batch, only while some thread holds a write);
//   * a plan run on this thread (planner's run_plan: the matcher runs plans only after such a
//     call, other callers get the same order);
//   * the thread's exit.
// Nothing can observe a held write before then: every livefuse path to the storages passes one
// of those points, and the program has no pointer of its own to them. So eager order holds,
// with one launch where there were two. The write's checks all run at its call; only a launch
// failure (a sticky CUDA error) can surface later, from the call that enqueued the batch. Only
// with LIVEFUSE=on (LIVEFUSE_WRITE_BATCH=0: never).
#include "livefuse/stream.hpp"
#include "livefuse/tensor.hpp"

namespace livefuse::writes {

// Takes the write of `src` into `dst` (checked, ordered, same shape and dtype, the source not
// sharing the destination's storage) into this thread's batch for `stream`. False when it cannot
// be held; the caller then writes eagerly (the batch has been enqueued first if it had to be).
bool hold(const Tensor& dst, const Tensor& src, const Stream& stream);

// Enqueues this thread's held writes. Cheap when no thread holds any.
void flush_own();

// Enqueues the held writes of every thread that write `s` (a call reads it), or that read or
// write it (a call writes it, or hands its address to the program). One relaxed load while no
// thread holds a write.
enum class Use { read, write };
void flush_for(const Storage& s, Use use);

// Whether any thread holds a write now (one relaxed load): the per-input check is skipped
// while none does.
bool any_held();

}  // namespace livefuse::writes
