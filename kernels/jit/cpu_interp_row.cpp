// Row parts on the CPU. TBB splits the rows; a block of rows runs the schedule of
// row_schedule.hpp. Rows of up to kRowTile columns are one tile whose buffers survive across the
// column loops (the values of an earlier phase are simply still there), several such rows a
// block; longer rows are cut into tiles, one row a block, and every loop recomputes what it
// needs from the inputs, so memory stays bounded.
#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "kernels/jit/cpu_eval.hpp"
#include "kernels/jit/cpu_interp.hpp"
#include "kernels/jit/row_schedule.hpp"
#include "livefuse/error.hpp"

namespace livefuse::jit::cpu_interp {
namespace {

constexpr int64_t kRowTile = 4096;    // columns a tile holds; longer rows are cut into tiles
constexpr int64_t kBlockElems = 1024;  // rows x columns of a block of short rows

std::byte* at(void* base, int64_t elems, DType dt) {
  return static_cast<std::byte*>(base) + elems * static_cast<int64_t>(dtype_size(dt));
}

// A part's schedule and the buffers its full values take: a value's buffer is handed to a later
// one once its last reader has run (in the schedule's order: loops, then within a loop the
// evaluations, reductions and stores), never to a value its own instruction reads. An add +
// layer_norm has ~18 values and needs ~5 buffers: the block's working set then fits L1 (one
// buffer per value was ~70 KiB, half of it evicted between instructions).
struct RowPlan {
  RowSchedule sched;
  std::vector<int> slot;  // per instruction: its full-value buffer (-1: none)
  int nslots = 0;
};

RowPlan plan_rows(const KernelPart& part, RowCacheMode mode) {
  RowPlan rp{schedule_row(part, mode), {}, 0};
  const RowSchedule& sc = rp.sched;
  const int n = static_cast<int>(part.instrs.size());
  auto full = [&](int i) { return i >= 0 && i < n && part.instrs[i].space == Space::Full; };
  std::vector<int> first_write(n, -1), last_read(n, -1);
  // Positions in execution order; per loop: evaluations, reductions, stores.
  std::vector<int> writer;  // per position: the full value it writes, -1 none
  int pos = 0;
  auto visit = [&](int i, bool writes) {
    const Instr& in = part.instrs[i];
    const int na = in.kind == InstrKind::Store || in.kind == InstrKind::ReduceSum ||
                           in.kind == InstrKind::ReduceMax
                       ? 1
                       : std::min<int>(in.nargs, 3);
    for (int a = 0; a < na; ++a)
      if (full(in.arg[a])) last_read[in.arg[a]] = std::max(last_read[in.arg[a]], pos);
    if (writes && first_write[i] < 0) first_write[i] = pos;
    writer.push_back(writes ? i : -1);
    ++pos;
  };
  for (int s = 0; s < sc.nloops; ++s) {
    for (int i : sc.loop_eval[s]) visit(i, full(i));
    for (int i : sc.loop_reduce[s]) visit(i, false);
    for (int i : sc.loop_store[s]) visit(i, false);
  }
  rp.slot.assign(n, -1);
  std::vector<int> free_slots;
  for (int p = 0; p < pos; ++p) {
    const int i = writer[p];
    if (i >= 0 && first_write[i] == p) {
      if (free_slots.empty()) free_slots.push_back(rp.nslots++);
      rp.slot[i] = free_slots.back();
      free_slots.pop_back();
      if (last_read[i] < p) last_read[i] = p;  // never read: its buffer is free after it
    }
    for (int v = 0; v < n; ++v)
      if (rp.slot[v] >= 0 && last_read[v] == p) free_slots.push_back(rp.slot[v]);
  }
  return rp;
}

// The plan of a part, kept per thread for the parts it ran last: computing it allocates a
// dozen vectors, 3% of a CPU decode step whose rows are one 64-column row each. An entry is
// found by the part's address and taken only when the instructions are still the same (a
// freed part's address can be reused by another). Shared, not referenced: while TBB's workers
// read one, this thread may run another part and replace its entry.
std::shared_ptr<const RowPlan> cached_plan(const KernelPart& part, RowCacheMode mode) {
  struct Entry {
    const KernelPart* part = nullptr;
    RowCacheMode mode = RowCacheMode::Recompute;
    std::vector<Instr> instrs;
    std::shared_ptr<const RowPlan> plan;
  };
  constexpr size_t kEntries = 32;
  thread_local std::vector<Entry> cache;
  thread_local size_t next = 0;
  for (const Entry& e : cache)
    if (e.part == &part && e.mode == mode && e.instrs == part.instrs) return e.plan;
  Entry fresh{&part, mode, part.instrs, std::make_shared<const RowPlan>(plan_rows(part, mode))};
  if (cache.size() < kEntries) {
    cache.push_back(std::move(fresh));
    return cache.back().plan;
  }
  Entry& e = cache[next];
  next = (next + 1) % kEntries;
  e = std::move(fresh);
  return e.plan;
}

}  // namespace

void run_row_part(const KernelPart& part, const PartGeometry& g) {
  using namespace cpu_eval;
  if (g.numel == 0) return;
  const int64_t rows = g.numel, cols = g.cols;
  const bool single = cols <= kRowTile;
  const int64_t tile = single ? std::max<int64_t>(cols, 1) : kRowTile;
  // Short rows run kBlockElems / cols at a time: each instruction is one call over the block's
  // rows (a call per row per instruction was most of a 256-wide add + layer_norm's time).
  const int64_t block = single ? std::clamp<int64_t>(kBlockElems / tile, 1, rows) : 1;
  const std::shared_ptr<const RowPlan> held =
      cached_plan(part, single ? RowCacheMode::CacheAll : RowCacheMode::Recompute);
  const RowSchedule& sched = held->sched;
  const std::vector<int>& slot = held->slot;
  const int n = static_cast<int>(part.instrs.size());
  const size_t nin = part.inputs.size(), nout = part.outputs.size();

  auto body = [&](int64_t r0, int64_t r1) {
    Scratch sc(block * tile);
    // Full values: block x tile elements each, row r of the block at r * tile. Row values: block
    // elements each, contiguous (an op over row values is one call over the block).
    auto* mem = reinterpret_cast<std::byte*>(
        thread_buffer(1, static_cast<size_t>(std::max(held->nslots, 1) * block * tile)));
    auto* rmem = reinterpret_cast<std::byte*>(thread_buffer(2, static_cast<size_t>(n * block)));
    // Per-thread, kept: a decode step's row groups are one row each, where four allocations
    // a call cost as much as the row's arithmetic.
    thread_local std::vector<double> acc;
    thread_local std::vector<float> mx;
    thread_local std::vector<std::byte*> in_base, out_base;
    acc.resize(static_cast<size_t>(n * block));
    mx.resize(static_cast<size_t>(n * block));
    in_base.resize(nin * block);
    out_base.resize(nout * block);
    auto width = [&](int i) -> int64_t { return nat_of(part.instrs[i].dtype) == Nat::I64 ? 8 : 4; };
    // Buffers hold 8-byte elements (i64 values); a narrower value packs its rows at its width.
    auto full = [&](int i, int64_t r) -> void* {
      LF_ASSERT(slot[i] >= 0, "row interpreter: value ", i, " has no buffer");
      return mem + static_cast<int64_t>(slot[i]) * block * tile * 8 + r * tile * width(i);
    };
    auto rowv = [&](int i, int64_t r) -> void* {
      return rmem + static_cast<int64_t>(i) * block * 8 + r * width(i);
    };
    auto is_full = [&](int i) { return part.instrs[i].space == Space::Full; };
    auto nat = [&](int i) { return nat_of(part.instrs[i].dtype); };
    for (int64_t b0 = r0; b0 < r1; b0 += block) {
      const int64_t nr = std::min(block, r1 - b0);
      for (int64_t r = 0; r < nr; ++r) {
        // Element offsets of this row for every operand.
        int64_t idx[kMaxDims];
        int64_t rem = b0 + r;
        for (int d = g.shape.rank - 1; d >= 0; --d) {
          idx[d] = rem % g.shape.v[d];
          rem /= g.shape.v[d];
        }
        for (size_t k = 0; k < nin; ++k) {
          int64_t off = 0;
          for (int d = 0; d < g.shape.rank; ++d) off += idx[d] * g.inputs[k].strides.v[d];
          in_base[k * block + r] = at(g.inputs[k].data, off, part.inputs[k].dtype);
        }
        for (size_t k = 0; k < nout; ++k) {
          int64_t off = 0;
          for (int d = 0; d < g.shape.rank; ++d) off += idx[d] * g.outputs[k].strides.v[d];
          out_base[k * block + r] = at(g.outputs[k].data, off, part.outputs[k].dtype);
        }
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      std::fill(mx.begin(), mx.end(), -std::numeric_limits<float>::infinity());
      for (int s = 0; s <= sched.nloops; ++s) {
        // Between the column loops: row values, one call over the block's rows each.
        for (int i : sched.section[s]) {
          const Instr& in = part.instrs[i];
          switch (in.kind) {
            case InstrKind::Load:
              for (int64_t r = 0; r < nr; ++r) load_run(in_base[in.io * block + r], 0, in.dtype, 1, rowv(i, r));
              break;
            case InstrKind::Const: eval_const(in.s[0], in.dtype, nr, rowv(i, 0)); break;
            case InstrKind::ColCount: eval_const(static_cast<double>(cols), DType::f32, nr, rowv(i, 0)); break;
            case InstrKind::ReduceSum:
            case InstrKind::ReduceMax: {
              auto* out = static_cast<float*>(rowv(i, 0));
              for (int64_t r = 0; r < nr; ++r) {
                const size_t a = static_cast<size_t>(i * block + r);
                const float v = in.kind == InstrKind::ReduceSum ? static_cast<float>(acc[a]) : mx[a];
                out[r] = naturalize_float(v, in.dtype);
              }
              break;
            }
            case InstrKind::Op:
            case InstrKind::Custom: {
              TileVal args[3];
              for (int a = 0; a < std::min<int>(in.nargs, 3); ++a) {
                LF_ASSERT(!is_full(in.arg[a]), "row interpreter: a row value reads a full one");
                args[a] = TileVal{rowv(in.arg[a], 0), nat(in.arg[a]), false};
              }
              eval_op(in, args, nr, rowv(i, 0), sc);
              break;
            }
            case InstrKind::Store:
              for (int64_t r = 0; r < nr; ++r)
                store_run(out_base[in.io * block + r], 0, in.dtype, 1, rowv(in.arg[0], r));
              break;
          }
        }
        if (s == sched.nloops) break;
        for (int64_t c0 = 0; c0 < cols; c0 += tile) {
          const int64_t len = std::min(tile, cols - c0);
          // Rows of the block lie back to back in a value's buffer only when a tile is a row.
          const bool dense = len == tile;
          for (int i : sched.loop_eval[s]) {
            const Instr& in = part.instrs[i];
            if (in.kind == InstrKind::Load) {
              const int64_t cs = g.inputs[in.io].col_stride;
              for (int64_t r = 0; r < nr; ++r)
                load_run(at(in_base[in.io * block + r], c0 * cs, in.dtype), cs, in.dtype, len, full(i, r));
              continue;
            }
            if (in.kind == InstrKind::Const) {
              if (dense) eval_const(in.s[0], in.dtype, nr * tile, full(i, 0));
              else eval_const(in.s[0], in.dtype, len, full(i, 0));
              continue;
            }
            const int na = std::min<int>(in.nargs, 3);  // (an op takes at most 3)
            bool all_full = true;
            for (int a = 0; a < na; ++a) all_full = all_full && is_full(in.arg[a]);
            TileVal args[3];
            if (all_full && dense) {
              for (int a = 0; a < na; ++a) args[a] = TileVal{full(in.arg[a], 0), nat(in.arg[a]), false};
              eval_op(in, args, nr * tile, full(i, 0), sc);
              continue;
            }
            for (int64_t r = 0; r < nr; ++r) {  // a row value broadcast along its row
              for (int a = 0; a < na; ++a) {
                const int x = in.arg[a];
                args[a] = is_full(x) ? TileVal{full(x, r), nat(x), false} : TileVal{rowv(x, r), nat(x), true};
              }
              eval_op(in, args, len, full(i, r), sc);
            }
          }
          for (int i : sched.loop_reduce[s]) {
            const int x = part.instrs[i].arg[0];
            for (int64_t r = 0; r < nr; ++r) {
              const TileVal v = is_full(x) ? TileVal{full(x, r), nat(x), false} : TileVal{rowv(x, r), nat(x), true};
              const size_t a = static_cast<size_t>(i * block + r);
              if (part.instrs[i].kind == InstrKind::ReduceSum) acc[a] += sum_tile(v, len);
              else mx[a] = max_tile(v, len, mx[a]);
            }
          }
          for (int i : sched.loop_store[s]) {
            const Instr& in = part.instrs[i];
            const int64_t cs = g.outputs[in.io].col_stride;
            for (int64_t r = 0; r < nr; ++r)
              store_run(at(out_base[in.io * block + r], c0 * cs, in.dtype), cs, in.dtype, len, full(in.arg[0], r));
          }
        }
      }
    }
  };
  // Rows per task: about 32k element operations (each instruction over each column is one), so a
  // row group of 128 x 256 with a dozen instructions -- a layer's add + layer_norm -- spreads over
  // the threads instead of running on one of them.
  const int64_t per_row = std::max<int64_t>(1, cols) * std::max(1, n);
  const int64_t grain = std::max<int64_t>(1, 32768 / per_row);
  if (rows <= grain) {
    body(0, rows);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, grain),
                    [&](const tbb::blocked_range<int64_t>& rr) { body(rr.begin(), rr.end()); });
}

}  // namespace livefuse::jit::cpu_interp
