// Pointwise parts on the CPU: the iteration space is cut into tiles of kTile elements; each
// tile runs the whole program with its intermediates in buffers that are recycled as soon as
// their last user has run (so a long chain needs only a handful of live tiles).
#include <algorithm>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "kernels/jit/cpu_eval.hpp"
#include "kernels/jit/cpu_interp.hpp"
#include "livefuse/error.hpp"

namespace livefuse::jit {
namespace cpu_interp {
namespace {

constexpr int64_t kTile = 2048;

struct SlotPlan {
  std::vector<int> slot;  // per instr, -1 for stores
  int nslots = 0;
};

SlotPlan assign_slots(const KernelPart& part) {
  const int n = static_cast<int>(part.instrs.size());
  std::vector<int> last_use(n, -1);
  for (int i = 0; i < n; ++i)
    for (int a = 0; a < part.instrs[i].nargs; ++a) last_use[part.instrs[i].arg[a]] = i;
  SlotPlan sp;
  sp.slot.assign(n, -1);
  std::vector<int> free_slots;
  for (int i = 0; i < n; ++i) {
    const Instr& in = part.instrs[i];
    if (in.has_value()) {
      if (free_slots.empty()) {
        sp.slot[i] = sp.nslots++;
      } else {
        sp.slot[i] = free_slots.back();
        free_slots.pop_back();
      }
    }
    // Operands whose last user is i, and values nobody uses, give their buffer back.
    for (int a = 0; a < in.nargs; ++a) {
      const int x = in.arg[a];
      if (last_use[x] == i && sp.slot[x] >= 0 &&
          std::find(free_slots.begin(), free_slots.end(), sp.slot[x]) == free_slots.end())
        free_slots.push_back(sp.slot[x]);
    }
    if (in.has_value() && last_use[i] < 0) free_slots.push_back(sp.slot[i]);
  }
  return sp;
}

}  // namespace

void run_pointwise_part(const KernelPart& part, const PartGeometry& g) {
  if (g.numel == 0) return;
  using namespace cpu_eval;
  const SlotPlan sp = assign_slots(part);
  const int n = static_cast<int>(part.instrs.size());
  const int64_t ntiles = (g.numel + kTile - 1) / kTile;
  std::vector<bool> in_place(part.inputs.size());
  const Strides dense = contiguous_strides(g.shape);
  for (size_t k = 0; k < part.inputs.size(); ++k) {
    const DType d = part.inputs[k].dtype;
    in_place[k] = g.inputs[k].strides == dense && (d == DType::f32 || d == DType::i32 || d == DType::i64);
  }
  // A value whose only use is a Store to a dense output of its own natural type is computed
  // straight into the output (no tile copy).
  std::vector<int> direct_out(n, -1);
  {
    std::vector<int> uses(n, 0);
    for (const Instr& in : part.instrs)
      for (int a = 0; a < in.nargs; ++a) ++uses[in.arg[a]];
    for (const Instr& in : part.instrs) {
      if (in.kind != InstrKind::Store) continue;
      const int v = in.arg[0];
      const Instr& src = part.instrs[v];
      const DType d = in.dtype;
      const bool natural = d == DType::f32 || d == DType::i32 || d == DType::i64;
      if (uses[v] == 1 && natural && g.outputs[in.io].strides == dense &&
          (src.kind == InstrKind::Op || src.kind == InstrKind::Custom))
        direct_out[v] = in.io;
    }
  }
  auto body = [&](int64_t t0, int64_t t1) {
    Scratch sc(kTile);
    int64_t* mem = thread_buffer(1, static_cast<size_t>(std::max(sp.nslots, 1)) * kTile);
    std::vector<TileVal> vals(n);
    auto slot_ptr = [&](int i) { return static_cast<void*>(mem + static_cast<size_t>(sp.slot[i]) * kTile); };
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t lo = t * kTile, len = std::min(kTile, g.numel - lo);
      for (int i = 0; i < n; ++i) {
        const Instr& in = part.instrs[i];
        switch (in.kind) {
          case InstrKind::Load:
            if (in_place[in.io]) {  // dense and stored as its natural type: read where it lies
              vals[i] = TileVal{static_cast<const char*>(g.inputs[in.io].data) + lo * static_cast<int64_t>(dtype_size(in.dtype)),
                                nat_of(in.dtype), false};
              continue;
            }
            load_tile(g.inputs[in.io], in.dtype, g.shape, lo, len, slot_ptr(i));
            break;
          case InstrKind::Const:
            eval_const(in.s[0], in.dtype, len, slot_ptr(i));
            break;
          case InstrKind::Op:
          case InstrKind::Custom: {
            TileVal args[3];
            for (int a = 0; a < in.nargs && a < 3; ++a) args[a] = vals[in.arg[a]];
            void* dst = slot_ptr(i);
            if (direct_out[i] >= 0)
              dst = static_cast<char*>(g.outputs[direct_out[i]].data) + lo * static_cast<int64_t>(dtype_size(in.dtype));
            eval_op(in, args, len, dst, sc);
            vals[i] = TileVal{dst, nat_of(in.dtype), false};
            continue;
          }
          case InstrKind::Store:
            if (direct_out[in.arg[0]] != in.io)
              store_tile(g.outputs[in.io], in.dtype, g.shape, lo, len, vals[in.arg[0]].p);
            break;
          default:
            LF_ASSERT(false, instr_kind_name(in.kind), " in a pointwise part");
        }
        if (in.has_value()) vals[i] = TileVal{slot_ptr(i), nat_of(in.dtype), false};
      }
    }
  };
  if (ntiles <= 2) {
    body(0, ntiles);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, ntiles, 4),
                    [&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); });
}

}  // namespace cpu_interp

void run_spec_cpu(const KernelSpec& spec, std::span<const PartBinding> parts) {
  LF_ASSERT(parts.size() == spec.parts.size(), "spec ", spec.name, " has ", spec.parts.size(),
            " parts, ", parts.size(), " bindings given");
  for (size_t p = 0; p < parts.size(); ++p) {
    const PartGeometry g = make_geometry(spec.parts[p], spec.kind, parts[p]);
    if (spec.kind == SpecKind::Pointwise) cpu_interp::run_pointwise_part(spec.parts[p], g);
    else cpu_interp::run_row_part(spec.parts[p], g);
  }
}

}  // namespace livefuse::jit
