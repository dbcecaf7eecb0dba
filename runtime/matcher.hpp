#pragma once
// The Matcher: per thread and stream, follows installed plans call by call (DESIGN.md "The
// walk"). A call that extends a plan's prefix is deferred (its outputs are pending handles);
// the call that completes the plan binds buffers and runs it; a divergent call or a sync point
// flushes the deferred calls eagerly, in order.
#include <mutex>
#include <optional>

#include "runtime/op_call.hpp"

namespace livefuse {

class InferMemo;
class Stream;

namespace matcher {
// Returns the (pending or finished) outputs when the call was taken by a plan window; nullopt
// when it must run eagerly now (any window it broke has been flushed first). `held`: the window
// lock the caller holds already (hold_inputs), not taken a second time. `attrs_hash`: the call's
// monitor::structural_attrs_hash when known (InferMemo::Shaping), else 0.
std::optional<TensorList> try_defer(OpCall& call, const OutputInfos& infos, const Stream& stream,
                                    const std::recursive_mutex* held = nullptr,
                                    uint64_t attrs_hash = 0);
// The memory of this thread's calls on `stream` by their position in its window
// (runtime/infer_memo.hpp): for a call about to go to try_defer (LIVEFUSE=on).
InferMemo& infer_memo(const Stream& stream);
// LIVEFUSE=shadow: follows plans over calls that already ran eagerly and counts the calls a
// plan would have served (MatcherCounters::shadow_would_serve). Never defers anything.
void shadow_observe(const OpCall& call, const TensorList& outs, const Stream& stream);
// Flushes the window holding `t` (if any) / every window of this thread.
void flush_for(const TensorImpl& t);
void flush_all();
// Settles every window, of any thread, that reads `s` in place (it has just become exposed).
void settle_readers(const Storage& s);
// Taken by a call before it looks at its inputs: values pending in other threads' windows are
// settled first (no lock held: two threads handing each other pending values must not wait on
// each other), and the lock of this thread's window holding an input is returned held. The
// call reads its own pending values (their storage, offset, strides) while another thread that
// was handed one of the window's results may settle the window, writing them.
std::unique_lock<std::recursive_mutex> hold_inputs(const OpCall& call);
}  // namespace matcher

}  // namespace livefuse
