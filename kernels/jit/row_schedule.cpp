#include "kernels/jit/row_schedule.hpp"

#include <algorithm>
#include <functional>

#include "livefuse/error.hpp"

namespace livefuse::jit {
namespace {

bool is_reduce(const Instr& in) {
  return in.kind == InstrKind::ReduceSum || in.kind == InstrKind::ReduceMax;
}

// The loop in which instruction y reads its Full operands.
int use_loop(const Instr& y, int phase_y) { return is_reduce(y) ? phase_y - 1 : phase_y; }

}  // namespace

RowSchedule schedule_row(const KernelPart& part, RowCacheMode mode) {
  const int n = static_cast<int>(part.instrs.size());
  RowSchedule s;
  s.phase.assign(n, 0);
  s.cache_slot.assign(n, -1);
  int max_full = 0;
  for (int i = 0; i < n; ++i) {
    const Instr& in = part.instrs[i];
    int p = 0;
    for (int a = 0; a < in.nargs; ++a) p = std::max(p, s.phase[in.arg[a]]);
    if (is_reduce(in)) ++p;
    s.phase[i] = p;
    if (in.space == Space::Full) max_full = std::max(max_full, p);
  }
  s.nloops = max_full + 1;
  s.loop_eval.resize(s.nloops);
  s.loop_cache_read.resize(s.nloops);
  s.loop_cache_write.resize(s.nloops);
  s.loop_reduce.resize(s.nloops);
  s.loop_store.resize(s.nloops);
  s.section.resize(s.nloops + 1);

  auto cacheable = [&](int i) {
    if (mode == RowCacheMode::Recompute) return false;
    if (mode == RowCacheMode::CacheAll) return true;
    return is_floating(part.instrs[i].dtype);
  };
  // Full values used by a later loop than their own: cached (when cacheable) in their loop.
  std::vector<bool> used_later(n, false);
  for (int y = 0; y < n; ++y) {
    const Instr& in = part.instrs[y];
    for (int a = 0; a < in.nargs; ++a) {
      const int x = in.arg[a];
      if (part.instrs[x].space == Space::Full && use_loop(in, s.phase[y]) > s.phase[x]) used_later[x] = true;
    }
  }

  // Keep the cache small (it bounds rows per block and occupancy): a value that later loops can
  // recompute from cached values with arithmetic alone -- no loads -- is recomputed instead.
  // (LN: cache x + r, recompute x + r - mean; softmax: cache the scaled, masked logits and
  // recompute exp(z - max).) The CPU interpreter (CacheAll) keeps everything it has anyway.
  std::vector<bool> in_cache(n, false);
  if (mode == RowCacheMode::CacheFloat) {
    for (int i = 0; i < n; ++i) in_cache[i] = used_later[i] && cacheable(i);
    std::vector<int8_t> avail(n, -1);  // memo: can i be rebuilt from cached values and row values?
    std::function<bool(int)> rebuildable = [&](int x) -> bool {
      const Instr& in = part.instrs[x];
      if (in.space != Space::Full) return true;
      if (in_cache[x]) return true;
      if (avail[x] >= 0) return avail[x];
      bool ok = in.kind == InstrKind::Op || in.kind == InstrKind::Custom;
      for (int a = 0; ok && a < in.nargs; ++a) ok = rebuildable(in.arg[a]);
      avail[x] = ok;
      return ok;
    };
    for (int i = 0; i < n; ++i) {
      const Instr& in = part.instrs[i];
      if (!in_cache[i] || in.kind == InstrKind::Load) continue;
      bool ok = in.kind == InstrKind::Op || in.kind == InstrKind::Custom;
      for (int a = 0; ok && a < in.nargs; ++a) ok = rebuildable(in.arg[a]);
      if (ok) {
        in_cache[i] = false;
        std::fill(avail.begin(), avail.end(), -1);
      }
    }
  } else if (mode == RowCacheMode::CacheAll) {
    for (int i = 0; i < n; ++i) in_cache[i] = used_later[i];
  }

  for (int p = 0; p < s.nloops; ++p) {
    std::vector<bool> eval(n, false), read(n, false);
    std::vector<int> stack;
    auto need = [&](int x) {
      if (part.instrs[x].space != Space::Full || eval[x] || read[x]) return;
      if (s.phase[x] < p && in_cache[x]) {
        read[x] = true;
        return;
      }
      eval[x] = true;
      stack.push_back(x);
    };
    for (int i = 0; i < n; ++i) {
      const Instr& in = part.instrs[i];
      if (is_reduce(in) && s.phase[i] - 1 == p) {
        s.loop_reduce[p].push_back(i);
        need(in.arg[0]);
      } else if (in.kind == InstrKind::Store && in.space == Space::Full && s.phase[i] == p) {
        s.loop_store[p].push_back(i);
        need(in.arg[0]);
      } else if (in.space == Space::Full && in.has_value() && s.phase[i] == p && in_cache[i]) {
        need(i);
      }
    }
    while (!stack.empty()) {
      const int x = stack.back();
      stack.pop_back();
      const Instr& in = part.instrs[x];
      for (int a = 0; a < in.nargs; ++a) need(in.arg[a]);
    }
    for (int i = 0; i < n; ++i) {
      if (eval[i]) {
        s.loop_eval[p].push_back(i);
        if (s.phase[i] == p && in_cache[i]) {
          s.cache_slot[i] = s.ncache++;
          s.loop_cache_write[p].push_back(i);
        }
      }
      if (read[i]) s.loop_cache_read[p].push_back(i);
    }
  }
  for (int i = 0; i < n; ++i) {
    const Instr& in = part.instrs[i];
    if (in.space == Space::Full) continue;
    LF_ASSERT(s.phase[i] <= s.nloops, "row instr phase out of range");
    s.section[s.phase[i]].push_back(i);
  }
  // Every cache read refers to a value written in its own loop.
  for (int p = 0; p < s.nloops; ++p)
    for (int x : s.loop_cache_read[p]) LF_ASSERT(s.cache_slot[x] >= 0, "cache read of an unwritten value");
  return s;
}

}  // namespace livefuse::jit
