#pragma once
// Executor: the single dispatch path of every op call (DESIGN.md "The walk").
//   submit(call): validate (infer_outputs) -> views need no kernel -> allocate outputs ->
//   record for the monitor -> eager kernel on the call's stream.
// Later stages (matcher, plan replay) hook in here, never around it.
#include "livefuse/stream.hpp"
#include "runtime/op_call.hpp"
#include "runtime/write_batch.hpp"

namespace livefuse {

struct Window;

class Executor {
 public:
  // Runs (or, with a plan, defers) `call`; returns its outputs. A deferred call's inputs are
  // moved into its window: `call` is left without them.
  static TensorList submit(OpCall& call);
  static Tensor submit1(OpCall& call) {
    TensorList outs = submit(call);
    return std::move(outs.front());  // a copy would cost a reference count up and down
  }

  // Sync points: make `t`'s value observable (flushes deferred work producing it).
  static void materialize(const TensorImpl& t);
  // Flushes every deferred call of the current thread, eagerly and in order.
  static void flush_all();
  // `t`'s storage becomes reachable by the program (its address was handed out): marks it
  // exposed and, the first time, settles every window of any thread that reads it in place.
  static void expose(const TensorImpl& t);

  // Runs `call` eagerly into `outs` (made by make_outputs; pending ones get storage here).
  // Never consults the matcher: plans use it for their unfused steps and the eager fallback.
  static void run_eager_into(const OpCall& call, const TensorList& outs, const Stream& stream);
  // Output handles for `call`: real storage, or pending (no storage, `pending_tag` set; their
  // ids from `window`'s block when it has one).
  static TensorList make_outputs(const OpCall& call, const OutputInfos& infos, Device device,
                                 void* pending_tag, Window* window = nullptr);
  // A layout op that must copy (a reshape of a non-contiguous view): its output needs storage
  // of its own, unlike every other view.
  static bool is_copying_view(const OpCall& call);
};

// A sync point on `t`: its value settled, this thread's windows run, every thread's held writes
// (runtime/write_batch.hpp) that conflict with `use` of its storage enqueued, the trace told.
// Own::flush enqueues this thread's held writes too: what follows reads or writes through the
// address. Own::keep is for a write's operands (copy_into): this thread's held writes come
// before that write, so they may stay held and share its launch.
enum class Own { flush, keep };
void sync_on(const Tensor& t, writes::Use use, Own own);

// A sync point on `t` that does not expose its storage (runtime code reading a value for the
// program: copy_to_host, to(Device)); data_ptr() is this plus Executor::expose. The program may
// write through the address from then on, so it counts as a write of the storage.
void* synced_data(const Tensor& t);

// Storage of a fresh dense output on `device` for the current stream.
Tensor new_dense(const Shape& shape, DType dtype, Device device);
// The same with `strides` (a concat's capacity, runtime/append.hpp): the whole block they span.
Tensor new_strided(const Shape& shape, const Strides& strides, DType dtype, Device device);

}  // namespace livefuse
