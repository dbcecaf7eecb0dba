// How a deferred window ends (runtime/matcher_window.hpp): complete() runs it through its plan
// when the plan's sequence is complete (sampling it against eager while the plan is new), and
// flush() runs its calls eagerly, in order, when it diverges or meets a sync point.
#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>
#include <vector>

#include "livefuse/config.hpp"
#include "runtime/append.hpp"
#include "runtime/executor.hpp"
#include "runtime/inspect_registry.hpp"
#include "runtime/matcher.hpp"
#include "runtime/matcher_window.hpp"
#include "runtime/plan.hpp"
#include "runtime/trace_sink.hpp"

namespace livefuse::matcher::detail {
namespace {

void last_uses(const Window& w, StreamWindow::LastUses& u) {
  const size_t count = w.ids_next - w.ids_begin;
  std::vector<int> last(count, -1);
  u.where.assign(count, {-1, -1});
  for (size_t j = 0; j < w.calls.size(); ++j) {
    for (const Tensor& in : w.calls[j].inputs)
      if (const ValueId id = in.impl()->id; id >= w.ids_begin && id < w.ids_next)
        last[id - w.ids_begin] = static_cast<int>(j);
    for (size_t k = 0; k < w.outputs[j].size(); ++k)
      if (const ValueId id = w.outputs[j][k].impl()->id; id >= w.ids_begin && id < w.ids_next) {
        u.where[id - w.ids_begin] = {static_cast<int>(j), static_cast<int>(k)};
        last[id - w.ids_begin] = std::max(last[id - w.ids_begin], static_cast<int>(j));
      }
  }
  u.head.assign(w.calls.size(), -1);
  u.next.assign(count, -1);
  for (size_t f = 0; f < count; ++f)
    if (last[f] >= 0 && u.where[f].first >= 0) {
      u.next[f] = u.head[last[f]];
      u.head[last[f]] = static_cast<int>(f);
    }
}

}  // namespace

void window_refs(const StreamWindow& sw, std::vector<long>& refs) {
  const Window& w = sw.w;
  size_t total = 0;
  for (const TensorList& outs : w.outputs) total += outs.size();
  refs.assign(total, 1);
  if (w.ids_begin != 0 && w.ids_next - w.ids_begin == total) {
    // Output f's id is ids_begin + f, and a call can only read outputs of calls before it (an
    // output is made after its call's inputs), so counting every call's reads counts the reads
    // of the calls after f's own.
    for (const OpCall& c : w.calls)
      for (const Tensor& in : c.inputs)
        if (const ValueId id = in.impl()->id; id >= w.ids_begin && id < w.ids_next)
          ++refs[id - w.ids_begin];
    return;
  }
  // The id block ran out (a window of more than Window::kIdBlock outputs): one scan per output.
  size_t f = 0;
  for (size_t j = 0; j < w.outputs.size(); ++j)
    for (const Tensor& t : w.outputs[j]) {
      for (size_t q = j + 1; q < w.calls.size(); ++q)
        for (const Tensor& in : w.calls[q].inputs) refs[f] += in.impl() == t.impl();
      ++f;
    }
}

namespace {
// The tensors the matcher's own state for the window holds beyond the window itself -- the
// other candidates' bound slots, the snapshots -- count as the window's when it decides which
// caches the program let go (runtime/append.hpp): a cache they hold is not the program's.
void count_held(append::DonatedInputs& d, const StreamWindow& sw) {
  for (const Candidate& c : sw.candidates) d.also_held(c.externals);
  if (sw.ready) d.also_held(sw.ready->externals);
  for (const auto& [orig, copy] : sw.snapshots) {
    d.also_held(std::span<const Tensor>(&orig, 1));
    d.also_held(std::span<const Tensor>(&copy, 1));
  }
}
}  // namespace

// Runs every deferred call eagerly, in order, into the handles the user already holds.
// `sink_us`, when given, adds up the host time of reporting the calls to the trace sink (a
// sampled eager run leaves it out: complete() says why).
//
// Each call's inputs are dropped once it ran, and an output the program no longer holds is
// dropped after the call that reads it last: its release reaches the monitor where the
// program's came, not when the flush ends. (At the end, a decode layer flushed from a longer
// plan's diverging window looked as if its attention scores outlived the layer; the layer was
// then planned writing them out -- no fused attention, 12 launches instead of 7 -- and lost its
// samples, H200.)
void flush(StreamWindow& sw, std::atomic<uint64_t>& reason, double* sink_us) {
  if (!sw.active) return;
  trace::Scope ts("matcher", "flush_eager");
  reason.fetch_add(1, std::memory_order_relaxed);
  trace::async_end("matcher", "deferred_window", reinterpret_cast<uintptr_t>(&sw));
  sw.active = false;  // a sync point reached from inside the flush must not re-enter it
  append::DonatedInputs donated(sw.w);  // caches the program let go grow in place
  count_held(donated, sw);
  try {
    TraceSink* sink = trace_sink();
    // In the window, not thread_local: a thread's exit flushes its windows, after thread_locals
    // defined later than its ThreadState are gone.
    StreamWindow::LastUses& uses = sw.flush_uses;
    if (sink) last_uses(sw.w, uses);
    for (size_t j = 0; j < sw.w.calls.size(); ++j) {
      Executor::run_eager_into(sw.w.calls[j], sw.w.outputs[j], sw.stream);
      // Reported now, as they run (runtime/trace_sink.hpp, the note).
      if (!sink) continue;
      const auto t0 = sink_us ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      report_call(*sink, sw.w.calls[j],
                  std::span<const Tensor>(sw.w.outputs[j].data(), sw.w.outputs[j].size()),
                  sw.stream.id());
      if (sink_us)
        *sink_us += detail::us_since(t0);
      sw.w.calls[j].inputs.clear();
      for (int f = uses.head[j]; f >= 0; f = uses.next[f]) {
        Tensor& t = sw.w.outputs[uses.where[f].first][uses.where[f].second];
        if (!t.defined() || t.impl_ptr().use_count() != 1) continue;  // the program holds it
        t.impl()->pending.store(nullptr, std::memory_order_release);
        t = Tensor();
      }
    }
  } catch (...) {
    clear(sw);
    throw;
  }
  clear(sw);
}

void complete(StreamWindow& sw) {
  Candidate cand = std::move(*sw.ready);
  sw.ready.reset();
  Plan& plan = *cand.plan;
  auto& ctr = matcher_counters();
  ctr.completions.fetch_add(1, std::memory_order_relaxed);
  if (plan.early_cooldown.load(std::memory_order_relaxed) > 0)
    plan.early_cooldown.fetch_sub(1, std::memory_order_relaxed);
  // Which outputs can the user still observe? Everything the user holds beyond the window's
  // own references, and the last call's outputs (the sequence's results).
  std::vector<std::pair<int, int>> needed;
  const size_t n = sw.w.calls.size();
  std::vector<long>& refs = sw.own_refs;
  window_refs(sw, refs);
  uint64_t outside_mask = 0;  // Window::held
  size_t f = 0;               // flat output index
  for (size_t j = 0; j < n; ++j) {
    for (size_t k = 0; k < sw.w.outputs[j].size(); ++k, ++f) {
      const Tensor& t = sw.w.outputs[j][k];
      const bool outside = t.impl_ptr().use_count() > refs[f];
      if (outside && f < 64) outside_mask |= uint64_t{1} << f;
      const bool held = j + 1 == n || outside;
      if (!held) continue;
      if (!plan.writes(static_cast<int>(j), static_cast<int>(k))) {
        // An intermediate the plan keeps in registers is still reachable: serve eagerly.
        flush(sw, ctr.flush_escaped);
        return;
      }
      needed.emplace_back(static_cast<int>(j), static_cast<int>(k));
    }
  }
  sw.w.externals = std::move(cand.externals);
  sw.w.held = outside_mask;
  if (plan.state.load() == PlanState::sampling && sample_pairs() == 0)
    record_transition(plan, PlanState::active, "active: sampling disabled (LIVEFUSE_SAMPLE=0)");
  const bool sampling = plan.state.load() == PlanState::sampling && !detail::put_sample_off(plan);
  uint64_t stratum = sampling ? sample_stratum(plan, sw.w.externals) : 0;
  const bool via_plan = !sampling || sample_choice(plan, stratum);
  std::optional<SampleClock> clock;
  if (sampling) clock.emplace(sw);
  else if (!sw.pending_samples.empty()) detail::poll_samples(sw);
  bool cold_run = false;
  // On the CPU a sample leaves out the host time of telling the monitor about the window: a
  // flushed window reports call by call, a served one once, and before the monitor goes quiet
  // the per-call reports made the eager side of a decode layer twice its ops' own time (83
  // against ~40 us), so plans no faster than eager were kept and the loop paid their deferral.
  // In the steady state the monitor is quiet and neither side pays it. (CUDA samples keep it:
  // not yet measured there.)
  const bool timing_sink = sampling && !sw.stream.device().is_cuda();
  double sink_us = 0;
  if (!via_plan) {
    flush(sw, ctr.plan_declined, timing_sink ? &sink_us : nullptr);
    ctr.plan_declined.fetch_sub(1);  // a sampling run, not a decline
  } else {
    bool ok = false;
    sw.w.cold_run = false;
    trace::Scope ts("plan", sampling ? "replay_sampled" : "replay");
    if (ts) ts.detail("plan " + std::to_string(plan.id));
    try {
      append::DonatedInputs donated(sw.w);  // caches the program let go grow in place
      count_held(donated, sw);
      ok = plan.run(sw.w, needed);
    } catch (const std::exception& e) {
      // Whose fault? The window runs eagerly: if eager execution fails too, the input was bad
      // and eager's error is the program's (the plan stays); if it succeeds, the plan is broken.
      const std::string why = e.what();
      flush(sw, ctr.flush_error);
      record_transition(plan, PlanState::failed, "failed while running: " + why);
      return;
    }
    cold_run = sw.w.cold_run;
    if (!ok) {
      plan.eager_fallbacks.fetch_add(1, std::memory_order_relaxed);
      flush(sw, ctr.plan_declined);
      return;
    }
    plan.hits.fetch_add(1, std::memory_order_relaxed);
    ctr.served.fetch_add(n, std::memory_order_relaxed);
    if (TraceSink* sink = trace_sink()) {
      const auto t0 = timing_sink ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      sink->on_served(plan, sw.w);
      if (timing_sink)
        sink_us = detail::us_since(t0);
    }
    if (plan.verified_runs.fetch_add(1) < config().verify) {
      verify_against_eager(sw, needed, plan);
    } else {
      clear(sw);
    }
  }
  // A cold run is not timed, up to kColdUntimedAtMost of them: sample_choice picks the plan's
  // side until it has as many samples as eager's, so a plan whose every run was cold stayed
  // sampling, untimed, for good -- Llama-1B bf16 concat decode at prompt 4096 on the H200: the
  // layer plan served 661 runs without one sample, 21% of calls served and 2.58 ms a token,
  // against 95.5% and 1.54 in a process where its verdict came.
  const bool untimed = sampling && via_plan && cold_run &&
                       plan.cold_untimed.fetch_add(1, std::memory_order_relaxed) < kColdUntimedAtMost;
  if (untimed) ctr.samples_cold.fetch_add(1, std::memory_order_relaxed);
  else if (sampling && !clock->started()) ctr.samples_no_slot.fetch_add(1, std::memory_order_relaxed);
  if (sampling && clock->started() && !untimed)
    clock->finish(plan, via_plan, stratum,
                  (via_plan && sw.timing_defer ? sw.defer_us : 0.0) - sink_us);
}

}  // namespace livefuse::matcher::detail
