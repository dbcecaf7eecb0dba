#include "kernels/jit/row_schedule.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>

#include "livefuse/error.hpp"

namespace livefuse::jit {
namespace {

// A value's register type (float for every float dtype, int for i32 and bool, 64-bit for i64:
// the renderer's natural forms).
int register_type(DType d) { return is_floating(d) ? 0 : d == DType::i64 ? 2 : 1; }

// The loop in which instruction y reads its Full operands.
int use_loop(const Instr& y, int phase_y) { return y.is_reduction() ? phase_y - 1 : phase_y; }

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
    if (in.is_reduction()) ++p;
    s.phase[i] = p;
    if (in.space == Space::Full) max_full = std::max(max_full, p);
  }
  s.nloops = max_full + 1;
  LF_ASSERT(s.nloops < 64, "row program with ", s.nloops, " column loops");
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
  // Home loop of a Full value: the first loop that needs it (a load only an epilogue reads is
  // read in the last loop, not carried from the first). needs[x]: every loop that needs x when
  // nothing is cached (users first: operands precede users).
  std::vector<uint64_t> needs(n, 0);
  for (int y = n - 1; y >= 0; --y) {
    const Instr& in = part.instrs[y];
    uint64_t loops = 0;
    if (in.is_reduction()) loops = uint64_t{1} << use_loop(in, s.phase[y]);
    else if (in.kind == InstrKind::Store && in.space == Space::Full) loops = uint64_t{1} << s.phase[y];
    else if (in.space == Space::Full) loops = needs[y];
    for (int a = 0; a < in.nargs; ++a)
      if (part.instrs[in.arg[a]].space == Space::Full) needs[in.arg[a]] |= loops;
  }
  s.home.assign(n, -1);
  for (int i = 0; i < n; ++i)
    if (needs[i]) s.home[i] = std::countr_zero(needs[i]);
  // Full values a later loop than their home uses directly: cached (when cacheable) in their
  // home loop. (One needed later only through a user that is not cached is recomputed there.)
  std::vector<bool> used_later(n, false);
  for (int y = 0; y < n; ++y) {
    const Instr& in = part.instrs[y];
    int loop = -1;
    if (in.is_reduction()) loop = use_loop(in, s.phase[y]);
    else if (in.kind == InstrKind::Store && in.space == Space::Full) loop = s.phase[y];
    else if (in.space == Space::Full) loop = s.home[y];
    for (int a = 0; loop >= 0 && a < in.nargs; ++a) {
      const int x = in.arg[a];
      if (part.instrs[x].space == Space::Full && loop > s.home[x]) used_later[x] = true;
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
      if (s.home[x] < p && in_cache[x]) {
        read[x] = true;
        return;
      }
      eval[x] = true;
      stack.push_back(x);
    };
    for (int i = 0; i < n; ++i) {
      const Instr& in = part.instrs[i];
      if (in.is_reduction() && s.phase[i] - 1 == p) {
        s.loop_reduce[p].push_back(i);
        need(in.arg[0]);
      } else if (in.kind == InstrKind::Store && in.space == Space::Full && s.phase[i] == p) {
        s.loop_store[p].push_back(i);
        need(in.arg[0]);
      } else if (in.space == Space::Full && in.has_value() && s.home[i] == p && in_cache[i]) {
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
        if (s.home[i] == p && in_cache[i]) {
          s.cache_slot[i] = 0;
          s.loop_cache_write[p].push_back(i);
        }
      }
      if (read[i]) s.loop_cache_read[p].push_back(i);
    }
  }
  // Slots only for values some later loop reads (a user that is itself cached may make an
  // operand's copy unnecessary); `live`: most cached values held across one loop boundary.
  std::vector<int> last_read(n, -1);
  for (int p = 0; p < s.nloops; ++p)
    for (int x : s.loop_cache_read[p]) last_read[x] = p;
  for (int p = 0; p < s.nloops; ++p) {
    auto& w = s.loop_cache_write[p];
    w.erase(std::remove_if(w.begin(), w.end(), [&](int x) { return last_read[x] < 0; }), w.end());
    for (int x : w) s.cache_slot[x] = s.ncache++;
  }
  for (int i = 0; i < n; ++i)
    if (last_read[i] < 0) s.cache_slot[i] = -1;
  for (int b = 0; b + 1 < s.nloops; ++b) {
    int held = 0;
    for (int i = 0; i < n; ++i)
      if (s.cache_slot[i] >= 0 && s.home[i] <= b && last_read[i] > b) held += dtype_size(part.instrs[i].dtype) == 8 ? 2 : 1;
    s.live = std::max(s.live, held);
  }
  // Arrays by interval colouring in home order (first fit is optimal for intervals): a value
  // takes the first array of its type whose last value is last read no later than its home.
  s.reg_array.assign(n, -1);
  std::vector<std::pair<int, int>> arrays;  // per array: last read of its last value, register type
  for (int p = 0; p < s.nloops; ++p)
    for (int x : s.loop_cache_write[p]) {
      const int t = register_type(part.instrs[x].dtype);
      int a = 0;
      while (a < static_cast<int>(arrays.size()) && !(arrays[a].second == t && arrays[a].first <= p)) ++a;
      if (a == static_cast<int>(arrays.size())) arrays.push_back({0, t});
      arrays[a].first = last_read[x];
      s.reg_array[x] = a;
    }
  s.narrays = static_cast<int>(arrays.size());
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
