// Row parts on the CPU. TBB splits the rows; a row runs the schedule of row_schedule.hpp.
// Rows of up to kRowTile columns are one tile whose buffers survive across the column loops
// (the values of an earlier phase are simply still there); longer rows are cut into tiles and
// every loop recomputes what it needs from the inputs, so memory stays bounded.
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

constexpr int64_t kRowTile = 4096;

std::byte* at(void* base, int64_t elems, DType dt) {
  return static_cast<std::byte*>(base) + elems * static_cast<int64_t>(dtype_size(dt));
}

// The schedule of a part, kept per thread for the parts it ran last: computing it allocates a
// dozen vectors, 3% of a CPU decode step whose rows are one 64-column row each. An entry is
// found by the part's address and taken only when the instructions are still the same (a
// freed part's address can be reused by another). Shared, not referenced: while TBB's workers
// read one, this thread may run another part and replace its entry.
std::shared_ptr<const RowSchedule> cached_schedule(const KernelPart& part, RowCacheMode mode) {
  struct Entry {
    const KernelPart* part = nullptr;
    RowCacheMode mode = RowCacheMode::Recompute;
    std::vector<Instr> instrs;
    std::shared_ptr<const RowSchedule> sched;
  };
  constexpr size_t kEntries = 32;
  thread_local std::vector<Entry> cache;
  thread_local size_t next = 0;
  for (const Entry& e : cache)
    if (e.part == &part && e.mode == mode && e.instrs == part.instrs) return e.sched;
  Entry fresh{&part, mode, part.instrs,
              std::make_shared<const RowSchedule>(schedule_row(part, mode))};
  if (cache.size() < kEntries) {
    cache.push_back(std::move(fresh));
    return cache.back().sched;
  }
  Entry& e = cache[next];
  next = (next + 1) % kEntries;
  e = std::move(fresh);
  return e.sched;
}

}  // namespace

void run_row_part(const KernelPart& part, const PartGeometry& g) {
  using namespace cpu_eval;
  if (g.numel == 0) return;
  const int64_t rows = g.numel, cols = g.cols;
  const bool single = cols <= kRowTile;
  const int64_t tile = single ? std::max<int64_t>(cols, 1) : kRowTile;
  const std::shared_ptr<const RowSchedule> held =
      cached_schedule(part, single ? RowCacheMode::CacheAll : RowCacheMode::Recompute);
  const RowSchedule& sched = *held;
  const int n = static_cast<int>(part.instrs.size());

  auto body = [&](int64_t r0, int64_t r1) {
    Scratch sc(tile);
    int64_t* mem = thread_buffer(1, static_cast<size_t>(n) * tile);
    std::vector<int64_t> rowval(n);
    std::vector<double> acc(n);
    std::vector<float> mx(n);
    std::vector<std::byte*> in_base(part.inputs.size()), out_base(part.outputs.size());
    auto buf = [&](int i) { return static_cast<void*>(mem + static_cast<size_t>(i) * tile); };
    auto val = [&](int i) -> TileVal {
      const Instr& x = part.instrs[i];
      if (x.space == Space::Full) return TileVal{buf(i), nat_of(x.dtype), false};
      return TileVal{&rowval[i], nat_of(x.dtype), true};
    };
    for (int64_t r = r0; r < r1; ++r) {
      // Element offsets of this row for every operand.
      int64_t idx[kMaxDims];
      int64_t rem = r;
      for (int d = g.shape.rank - 1; d >= 0; --d) {
        idx[d] = rem % g.shape.v[d];
        rem /= g.shape.v[d];
      }
      for (size_t k = 0; k < part.inputs.size(); ++k) {
        int64_t off = 0;
        for (int d = 0; d < g.shape.rank; ++d) off += idx[d] * g.inputs[k].strides.v[d];
        in_base[k] = at(g.inputs[k].data, off, part.inputs[k].dtype);
      }
      for (size_t k = 0; k < part.outputs.size(); ++k) {
        int64_t off = 0;
        for (int d = 0; d < g.shape.rank; ++d) off += idx[d] * g.outputs[k].strides.v[d];
        out_base[k] = at(g.outputs[k].data, off, part.outputs[k].dtype);
      }
      for (int i = 0; i < n; ++i) {
        acc[i] = 0.0;
        mx[i] = -std::numeric_limits<float>::infinity();
      }
      for (int s = 0; s <= sched.nloops; ++s) {
        for (int i : sched.section[s]) {
          const Instr& in = part.instrs[i];
          switch (in.kind) {
            case InstrKind::Load: load_run(in_base[in.io], 0, in.dtype, 1, &rowval[i]); break;
            case InstrKind::Const: eval_const(in.s[0], in.dtype, 1, &rowval[i]); break;
            case InstrKind::ColCount: eval_const(static_cast<double>(cols), DType::f32, 1, &rowval[i]); break;
            case InstrKind::ReduceSum: {
              const float v = naturalize_float(static_cast<float>(acc[i]), in.dtype);
              eval_const(v, DType::f32, 1, &rowval[i]);
              break;
            }
            case InstrKind::ReduceMax: {
              const float v = naturalize_float(mx[i], in.dtype);
              eval_const(v, DType::f32, 1, &rowval[i]);
              break;
            }
            case InstrKind::Op:
            case InstrKind::Custom: {
              TileVal args[3];
              for (int a = 0; a < in.nargs; ++a) args[a] = val(in.arg[a]);
              for (int a = 0; a < in.nargs; ++a) args[a].uniform = false;
              eval_op(in, args, 1, &rowval[i], sc);
              break;
            }
            case InstrKind::Store:
              store_run(out_base[in.io], 0, in.dtype, 1, &rowval[in.arg[0]]);
              break;
          }
        }
        if (s == sched.nloops) break;
        for (int64_t c0 = 0; c0 < cols; c0 += tile) {
          const int64_t len = std::min(tile, cols - c0);
          for (int i : sched.loop_eval[s]) {
            const Instr& in = part.instrs[i];
            if (in.kind == InstrKind::Load) {
              const int64_t cs = g.inputs[in.io].col_stride;
              load_run(at(in_base[in.io], c0 * cs, in.dtype), cs, in.dtype, len, buf(i));
            } else if (in.kind == InstrKind::Const) {
              eval_const(in.s[0], in.dtype, len, buf(i));
            } else {
              TileVal args[3];
              for (int a = 0; a < in.nargs; ++a) args[a] = val(in.arg[a]);
              eval_op(in, args, len, buf(i), sc);
            }
          }
          for (int i : sched.loop_reduce[s]) {
            const TileVal v = val(part.instrs[i].arg[0]);
            if (part.instrs[i].kind == InstrKind::ReduceSum) acc[i] += sum_tile(v, len);
            else mx[i] = max_tile(v, len, mx[i]);
          }
          for (int i : sched.loop_store[s]) {
            const Instr& in = part.instrs[i];
            const int64_t cs = g.outputs[in.io].col_stride;
            store_run(at(out_base[in.io], c0 * cs, in.dtype), cs, in.dtype, len, buf(in.arg[0]));
          }
        }
      }
    }
  };
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(cols, 1));
  if (rows <= grain) {
    body(0, rows);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, grain),
                    [&](const tbb::blocked_range<int64_t>& rr) { body(rr.begin(), rr.end()); });
}

}  // namespace livefuse::jit::cpu_interp
