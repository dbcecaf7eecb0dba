// Row kernels: blockDim.x threads per row (a multiple of 32), blockDim.y rows per block. The
// schedule (row_schedule.hpp) gives the column loops; between loops the row's reductions are
// finished with warp shuffles (and shared memory across warps) and row values computed.
//
// Where a cache variant keeps the values later loops need:
//   registers (row_regs > 0): each thread owns at most row_regs columns of its row -- packs
//     (lf_p * threads + thread) -- and every loop is unrolled over them, so a cached value is an
//     array of registers: the row is read from global memory once and written once, and nothing
//     goes through shared memory. Rows longer than row_regs * kRowMaxThreads cannot run it.
//   shared memory (row_regs == 0, too many values to hold): ncache floats per column.
#include <algorithm>
#include <atomic>
#include <sstream>

#include "kernels/jit/render_detail.hpp"
#include "kernels/jit/row_schedule.hpp"
#include "livefuse/config.hpp"
#include "livefuse/error.hpp"

namespace livefuse::jit {
namespace {
using namespace render_detail;

enum class Store : uint8_t { None, Regs, Smem };

// Registers a thread spends on cached values: 16 floats hold one value at 16 columns a thread
// (8192 columns with 512 threads, 1024 with 64); more held values get fewer columns each, down
// to one pack. Every column a thread owns is another unrolled copy of the
// loop bodies, so this also bounds NVRTC time (32 cost about 1.5x the compile time of 16).
constexpr int kRegBudget = 16;
// ... except for 2-byte rows with two reductions and global reads after them (layer_norm: mean,
// variance, then weight and bias), which get twice that. Each reduction of a multi-warp row is a
// block barrier with nothing of this row in flight, and the weights' loads wait behind both: on
// an H200, layer_norm bf16 65536x1024 ran 84 us at 16 columns a thread (two warps a row) and
// 78-80 at 32 (one warp, no barriers), while rows with one reduction (rms_norm bf16: 73.6 ->
// 78) or no late loads (softmax f16: 74 -> 77) and 4-byte rows (layer_norm f32: 134 -> 136,
// whose 16 columns are already four 16-byte packs in flight) lose with 32.
constexpr int kRegBudgetTwoExchanges = 32;
constexpr int kRegMax = 64;  // beyond this, the cache variants use shared memory
// Registers a pipelined body may spend staging the next row in registers (4-byte first-loop
// loads: f32 rows, or a split GEMM's f32 partial products): past this it spills -- four f32
// partials at 32 columns a thread are 128 -- and only the plain body is rendered.
constexpr int kStageRegWords = 48;
std::atomic<int> g_reg_budget{0};  // 0: kRegBudget
std::atomic<int> g_pipeline{-1};   // -1: both register bodies; 0 / 1: only one of them
std::atomic<int> g_early_loads{-1};  // -1: LIVEFUSE_ROW_EARLY_LOADS; 0 / 1: forced
// Register rows issue the loads of their later loops -- a norm's weight and bias, read after
// the row's mean and variance -- at the row's start, into registers held across the reductions:
// else each is one more memory round trip after the reductions, on the chain of every row (and
// a BERT layer's add + layer_norm, 128 rows of 768, is that chain and little else). Only while a
// thread's words for the held row, the first loop's loads (all in flight at once: the loop is
// unrolled) and the early loads stay within this many: the add + layer_norm over four f32
// partial products of a split GEMM (planner/split_k_rows.hpp), 208 words with its bf16 weights
// early, spilled in every variant; with two partials (144) or none (96) it does not.
constexpr int kEarlyPressureWords = 160;
// 32-bit words a thread of a register row of `regs` columns holds for the loads of loops
// [first, last).
int load_words(const KernelPart& part, const RowSchedule& s, int regs, size_t first, size_t last) {
  int words = 0;
  for (size_t sec = first; sec < std::min(last, s.loop_eval.size()); ++sec)
    for (int i : s.loop_eval[sec])
      if (part.instrs[i].kind == InstrKind::Load)
        words += regs * static_cast<int>(dtype_size(part.instrs[i].dtype)) / 4;
  return words;
}
// Whether a register row's later loads may be issued at its start (kEarlyPressureWords).
bool early_fits(const KernelPart& part, const RowSchedule& s, int regs) {
  const int held = std::max(s.live, 1) * regs;
  return held + load_words(part, s, regs, 0, 1) + load_words(part, s, regs, 1, s.loop_eval.size()) <=
         kEarlyPressureWords;
}
// Register rows come in two bodies, and each launch shape runs the one its first launches
// measured faster (row_tuner.hpp). The pipelined body (VecPipe) loops over rows and
// reads the next row's first-loop inputs while this row reduces and writes: one row at a time
// per thread leaves DRAM idle between rows (a short row is one load latency, then barriers and
// arithmetic with nothing in flight). The loop costs registers, so occupancy, and which body wins differs by kernel.
// 4-byte rows stage the next row in registers (storage form), 2-byte ones in shared memory
// (cp.async), which measured faster for them.
struct RowBodies {
  bool plain, pipelined;
};
RowBodies row_bodies() {
  const int knob = g_pipeline.load(std::memory_order_relaxed);
  return {knob != 1, knob != 0};
}
// Staged through shared memory: rows of 8-column packs whose first-loop loads are all 2-byte
// values -- one 16-byte cp.async a pack each. A 4-byte load among them (the f32 partial products a
// split GEMM leaves for its row kernel: planner/split_k_rows.hpp) is 32 bytes a pack: such rows
// stage in registers.
bool smem_staged_rows(const KernelPart& part, const RowSchedule& s, int row_vec) {
  if (row_vec < 8) return false;
  for (int i : s.loop_eval[0])
    if (part.instrs[i].kind == InstrKind::Load && dtype_size(part.instrs[i].dtype) * row_vec != 16) return false;
  return true;
}

std::string nat_float(DType d, const std::string& x) {
  if (d == DType::f16) return "lf_nat_f16(" + x + ")";
  if (d == DType::bf16) return "lf_nat_bf16(" + x + ")";
  return x;
}

struct Body {
  const KernelPart& part;
  const ArgLayout::Part& lp;
  const RowSchedule& s;
  Store store;
  int vec;  // columns per access: > 1 reads and writes 16-byte packs
  int np;   // Regs: column groups (packs, or single columns) a thread owns
  bool pipelined;  // Regs + vec: grid-stride over rows, next row's first loads in flight
  bool smem_stage;  // pipelined: the next row is staged in shared memory (cp.async), not registers
  bool early;       // Regs + vec: later loops' loads issued at the row's start (early_loads)

  size_t nin() const { return part.inputs.size(); }
  // Appended, not "r" + to_string(k): GCC 12 warns falsely (-Wrestrict) on the inlined operator+.
  std::string rname(size_t k) const { return std::string("r").append(std::to_string(k)); }
  std::string cname(size_t k) const { return std::string("c").append(std::to_string(k)); }
  int word(size_t k) const { return k < nin() ? lp.in[k] : lp.out[k - nin()]; }
  std::string name() const {
    return std::string("lf_row_") + (store == Store::None ? "recompute" : "cache") + (vec > 1 ? "_v" : "") +
           (pipelined ? "p" : "");
  }
  // Cached value i at element `e` of the current group (in its register array).
  std::string reg(int i, const std::string& e) const {
    return "lf_k" + std::to_string(s.reg_array[i]) + "[lf_p * " + std::to_string(vec) + " + " + e + "]";
  }

  // Offsets of every io for row `row` into variables prefix0.. (declared here).
  void row_offsets(std::ostringstream& os, const std::string& prefix, const std::string& row,
                   const std::string& valid) const {
    const size_t nio = nin() + part.outputs.size();
    std::vector<std::pair<std::string, int>> offs;
    for (size_t k = 0; k < nio; ++k) {
      os << "  I " << prefix << k << " = 0;";
      if (vec == 1 && prefix == "r") os << " const I " << cname(k) << " = (I)A.w[" << word(k) + 9 << "];";
      os << "\n";
      offs.push_back({prefix + std::to_string(k), word(k) + 1});
    }
    os << decompose("(" + valid + " ? " + row + " : (I)0)", 1, 2, offs, false);
  }

  // Loads of the later loops (after a reduction): with `early`, issued at the row's start.
  std::vector<int> late() const {
    std::vector<int> v;
    for (size_t sec = 1; sec < s.loop_eval.size(); ++sec)
      for (int i : s.loop_eval[sec])
        if (part.instrs[i].kind == InstrKind::Load) v.push_back(i);
    return v;
  }
  // Every pack this thread owns, in an unrolled loop: body() within the bounds check on `valid`,
  // lf_c0 the pack's first column.
  template <class Body>
  void over_packs(std::ostringstream& os, const std::string& valid, Body body) const {
    os << "#pragma unroll\n  for (int lf_p = 0; lf_p < " << np << "; ++lf_p) {\n";
    os << "    const I lf_c0 = ((I)lf_p * (I)lf_tpr + (I)lf_tid) * (I)" << vec << ";\n";
    os << "    if (" << valid << " && lf_c0 < lf_cols) {\n";
    body();
    os << "    }\n  }\n";
  }
  // The row's late loads into registers (lf_e<i>, storage form), before its first loop: they are
  // in flight while the row is read and reduced, and the loop that needs them finds them there.
  void early_loads(std::ostringstream& os) const {
    const std::vector<int> loads = late();
    if (!early || loads.empty()) return;
    os << "  // ---- the later loops' loads, issued now\n";
    for (int i : loads) os << "  " << storage_type(part.instrs[i].dtype) << " lf_e" << i << "[" << np * vec << "];\n";
    over_packs(os, "lf_valid", [&] {
      for (int i : loads) {
        const Instr& in = part.instrs[i];
        os << "      lf_ldpack<" << vec << ">(lf_e" << i << " + lf_p * " << vec << ", ((const " << storage_type(in.dtype)
           << "*)A.w[" << lp.in[in.io] << "]) + " << rname(in.io) << " + lf_c0);\n";
      }
    });
  }

  // Loads of the first loop: what a pipelined kernel stages for the next row.
  std::vector<int> staged() const {
    std::vector<int> v;
    for (int i : s.loop_eval[0])
      if (part.instrs[i].kind == InstrKind::Load) v.push_back(i);
    return v;
  }
  // Shared-memory staging: the 16-byte slot of staged load j, pack lf_p, this thread
  // (consecutive threads, consecutive slots: no bank conflicts).
  std::string stage_slot(size_t j) const {
    return "(lf_stage + (((I)" + std::to_string(j * np) + " + (I)lf_p) * (I)lf_nthr + (I)lf_tflat) * (I)16)";
  }
  // Pipelined: the first loop's loads of the row at offsets prefix0.. into the staging arrays
  // (registers), or copied asynchronously into shared memory.
  void stage_loads(std::ostringstream& os, const std::string& prefix, const std::string& valid) const {
    const std::vector<int> loads = staged();
    over_packs(os, valid, [&] {
      for (size_t j = 0; j < loads.size(); ++j) {
        const Instr& in = part.instrs[loads[j]];
        const std::string src = "((const " + storage_type(in.dtype) + "*)A.w[" + std::to_string(lp.in[in.io]) +
                                "]) + " + prefix + std::to_string(in.io) + " + lf_c0";
        if (smem_stage) os << "      lf_cp_async16(" << stage_slot(j) << ", " << src << ");\n";
        else os << "      lf_ldpack<" << vec << ">(lf_n" << loads[j] << " + lf_p * " << vec << ", " << src << ");\n";
      }
    });
    if (smem_stage) os << "  lf_cp_async_commit();\n";
  }

  void prologue(std::ostringstream& os) const {
    os << "template <typename I>\n__device__ __forceinline__ void " << name()
       << "(const LfArgs& A, float* lf_smem, float* lf_red) {\n";
    os << "  const int lf_tid = threadIdx.x, lf_tpr = blockDim.x;\n";
    os << "  const I lf_rows = (I)A.w[0], lf_cols = (I)A.w[10];\n";
    if (!pipelined) {
      os << "  const I lf_row = (I)blockIdx.x * (I)blockDim.y + (I)threadIdx.y;\n";
      os << "  const bool lf_valid = lf_row < lf_rows;\n";
      row_offsets(os, "r", "lf_row", "lf_valid");
    } else {
      // Reductions alternate halves of lf_red (see lf_row_sum), counted across rows too.
      os << "  int lf_rk = 0;\n";
      os << "  const I lf_step = (I)gridDim.x * (I)blockDim.y;\n";
      os << "  I lf_row = (I)blockIdx.x * (I)blockDim.y + (I)threadIdx.y;\n";
      os << "  bool lf_valid = lf_row < lf_rows;\n";
      row_offsets(os, "r", "lf_row", "lf_valid");
      if (smem_stage) {
        os << "  unsigned char* const lf_stage = reinterpret_cast<unsigned char*>(lf_smem);\n";
        os << "  const int lf_nthr = blockDim.x * blockDim.y, lf_tflat = threadIdx.y * blockDim.x + threadIdx.x;\n";
      } else {
        for (int i : staged()) os << "  " << storage_type(part.instrs[i].dtype) << " lf_n" << i << "[" << np * vec << "];\n";
      }
      stage_loads(os, "r", "lf_valid");
      // The bound is the same for every thread of a block, which multi-warp rows' barriers need.
      os << "  for (I lf_base = (I)blockIdx.x * (I)blockDim.y; lf_base < lf_rows; lf_base += lf_step) {\n";
    }
    if (store == Store::Smem && s.ncache > 0)
      os << "  float* lf_cache = lf_smem + (I)threadIdx.y * (I)" << s.ncache << " * lf_cols;\n";
    else if (!smem_stage)
      os << "  (void)lf_smem;\n";
    if (store == Store::Regs)
      for (int a = 0; a < s.narrays; ++a)
        for (int i = 0; i < static_cast<int>(part.instrs.size()); ++i)
          if (s.reg_array[i] == a) {
            os << "  " << nat_type(part.instrs[i].dtype) << " lf_k" << a << "[" << np * vec << "];\n";
            break;
          }
  }

  // The half of lf_red reduction instruction i uses: consecutive reductions, in the order they
  // are emitted (section by section), alternate halves (see lf_row_sum); across rows too when
  // pipelined (a counter: the number of reductions a row may be odd).
  std::string red_half(int i) const {
    if (pipelined) return "lf_red + 32 * (lf_rk++ & 1)";
    int k = 0;
    for (const auto& sec : s.section)
      for (int j : sec) {
        if (j == i) return k % 2 ? "lf_red + 32" : "lf_red";
        if (part.instrs[j].is_reduction()) ++k;
      }
    LF_ASSERT(false, "reduction ", i, " is in no section");
    return "";
  }

  void section(std::ostringstream& os, int sec) const {
    os << "  // ---- section " << sec << "\n";
    const size_t nin = this->nin();
    for (int i : s.section[sec]) {
      const Instr& in = part.instrs[i];
      const std::string v = std::string("v").append(std::to_string(i));
      switch (in.kind) {
        case InstrKind::Load:
          os << "  const " << nat_type(in.dtype) << " " << v << " = lf_valid ? "
             << load_expr(in.dtype, lp.in[in.io], rname(in.io)) << " : (" << nat_type(in.dtype) << ")0;\n";
          break;
        case InstrKind::ReduceSum:
          os << "  const float " << v << " = " << nat_float(in.dtype, "lf_row_sum(lf_acc" + std::to_string(i) + ", " + red_half(i) + ")") << ";\n";
          break;
        case InstrKind::ReduceMax:
          os << "  const float " << v << " = " << nat_float(in.dtype, "lf_row_max(lf_acc" + std::to_string(i) + ", " + red_half(i) + ")") << ";\n";
          break;
        case InstrKind::Store:
          os << "  if (lf_valid && lf_tid == 0) { "
             << store_storage(in.dtype, lp.out[in.io], rname(nin + in.io), stored(part, in)) << " }\n";
          break;
        default: os << "  " << value_stmt(in, i, "lf_cols") << "\n";
      }
    }
  }

  // The per-column work of loop `sec` for one column (element `e` of a pack when vec > 1).
  void columns(std::ostringstream& os, int sec, const std::string& ind) const {
    const size_t nin = this->nin();
    for (int i : s.loop_cache_read[sec]) {
      const std::string t = nat_type(part.instrs[i].dtype);
      if (store == Store::Regs) os << ind << "const " << t << " v" << i << " = " << reg(i, vec > 1 ? "e" : "0") << ";\n";
      else if (vec > 1) os << ind << "const float v" << i << " = lf_cr" << i << "[e];\n";
      else os << ind << "const float v" << i << " = lf_cache[(I)" << s.cache_slot[i] << " * lf_cols + lf_c];\n";
    }
    for (int i : s.loop_eval[sec]) {
      const Instr& in = part.instrs[i];
      if (in.kind == InstrKind::Load) {
        os << ind << "const " << nat_type(in.dtype) << " v" << i << " = "
           << (vec > 1 ? from_storage(in.dtype, "lf_s" + std::to_string(i) + "[e]")
                       : load_expr(in.dtype, lp.in[in.io], rname(in.io) + " + lf_c * " + cname(in.io)))
           << ";\n";
      } else {
        os << ind << value_stmt(in, i, "lf_cols") << "\n";
      }
    }
    for (int i : s.loop_cache_write[sec]) {
      if (store == Store::Regs) os << ind << reg(i, vec > 1 ? "e" : "0") << " = v" << i << ";\n";
      else if (vec > 1) os << ind << "lf_cw" << i << "[e] = v" << i << ";\n";
      else os << ind << "lf_cache[(I)" << s.cache_slot[i] << " * lf_cols + lf_c] = v" << i << ";\n";
    }
    for (int i : s.loop_reduce[sec]) {
      const int a = part.instrs[i].arg[0];
      if (part.instrs[i].kind == InstrKind::ReduceSum) os << ind << "lf_acc" << i << " += v" << a << ";\n";
      else os << ind << "lf_acc" << i << " = lf_max(lf_acc" << i << ", v" << a << ");\n";
    }
    for (int i : s.loop_store[sec]) {
      const Instr& in = part.instrs[i];
      const size_t k = nin + in.io;
      if (vec > 1) os << ind << "lf_so" << i << "[e] = " << stored(part, in) << ";\n";
      else os << ind << store_storage(in.dtype, lp.out[in.io], rname(k) + " + lf_c * " + cname(k), stored(part, in)) << "\n";
    }
  }

  // One pack of `vec` columns starting at lf_c0: 16-byte loads, the columns, 16-byte stores.
  void pack(std::ostringstream& os, int sec, const std::string& ind) const {
    for (int i : s.loop_eval[sec]) {
      const Instr& in = part.instrs[i];
      if (in.kind != InstrKind::Load) continue;
      const std::string st = storage_type(in.dtype);
      if (early && sec > 0) {  // every load of a later loop was issued at the row's start
        os << ind << "const " << st << "* lf_s" << i << " = lf_e" << i << " + lf_p * " << vec << ";\n";
        continue;
      }
      if (pipelined && sec == 0) {
        if (!smem_stage) {
          os << ind << "const " << st << "* lf_s" << i << " = lf_n" << i << " + lf_p * " << vec << ";\n";
          continue;
        }
        const std::vector<int> loads = staged();
        const size_t j = static_cast<size_t>(std::find(loads.begin(), loads.end(), i) - loads.begin());
        os << ind << st << " lf_s" << i << "[" << vec << "]; lf_ldpack<" << vec << ">(lf_s" << i << ", reinterpret_cast<const "
           << st << "*>" << stage_slot(j) << ");\n";
        continue;
      }
      os << ind << st << " lf_s" << i << "[" << vec << "]; lf_ldpack<" << vec << ">(lf_s" << i << ", ((const " << st
         << "*)A.w[" << lp.in[in.io] << "]) + " << rname(in.io) << " + lf_c0);\n";
    }
    for (int i : s.loop_store[sec]) os << ind << storage_type(part.instrs[i].dtype) << " lf_so" << i << "[" << vec << "];\n";
    if (store == Store::Smem) {
      // Packs go to shared memory as 16-byte accesses too (one float per column would make
      // `vec` threads hit one bank).
      for (int i : s.loop_cache_read[sec])
        os << ind << "float lf_cr" << i << "[" << vec << "]; lf_ldpack<" << vec << ">(lf_cr" << i << ", lf_cache + (I)"
           << s.cache_slot[i] << " * lf_cols + lf_c0);\n";
      for (int i : s.loop_cache_write[sec]) os << ind << "float lf_cw" << i << "[" << vec << "];\n";
    }
    os << "#pragma unroll\n" << ind << "for (int e = 0; e < " << vec << "; ++e) {\n";
    columns(os, sec, ind + "  ");
    os << ind << "}\n";
    if (store == Store::Smem)
      for (int i : s.loop_cache_write[sec])
        os << ind << "lf_stpack<" << vec << ">(lf_cache + (I)" << s.cache_slot[i] << " * lf_cols + lf_c0, lf_cw" << i << ");\n";
    for (int i : s.loop_store[sec]) {
      const Instr& in = part.instrs[i];
      os << ind << "lf_stpack<" << vec << ">(((" << storage_type(in.dtype) << "*)A.w[" << lp.out[in.io] << "]) + "
         << rname(nin() + in.io) << " + lf_c0, lf_so" << i << ");\n";
    }
  }

  void loop(std::ostringstream& os, int sec) const {
    os << "  // ---- loop " << sec << "\n";
    for (int i : s.loop_reduce[sec]) {
      const bool sum = part.instrs[i].kind == InstrKind::ReduceSum;
      os << "  float lf_acc" << i << " = " << (sum ? "0.0f" : "__int_as_float(0xff800000)") << ";\n";
    }
    if (store == Store::Regs) {
      // This thread's copies of the row must have landed before loop 0 reads them.
      if (pipelined && smem_stage && sec == 0) os << "  lf_cp_async_wait_all();\n";
      if (vec > 1) {
        over_packs(os, "lf_valid", [&] { pack(os, sec, "      "); });
        return;
      }
      os << "#pragma unroll\n  for (int lf_p = 0; lf_p < " << np << "; ++lf_p) {\n";
      os << "    const I lf_c = (I)lf_p * (I)lf_tpr + (I)lf_tid;\n";
      os << "    if (lf_valid && lf_c < lf_cols) {\n";
      columns(os, sec, "      ");
      os << "    }\n  }\n";
      return;
    }
    if (vec > 1) {
      os << "  for (I lf_c0 = (I)lf_tid * (I)" << vec << "; lf_valid && lf_c0 < lf_cols; lf_c0 += (I)lf_tpr * (I)" << vec
         << ") {\n";
      pack(os, sec, "    ");
    } else {
      os << "#pragma unroll 4\n  for (I lf_c = lf_tid; lf_valid && lf_c < lf_cols; lf_c += lf_tpr) {\n";
      columns(os, sec, "    ");
    }
    os << "  }\n";
  }

  void render(std::ostringstream& os) const {
    prologue(os);
    early_loads(os);
    for (int sec = 0; sec <= s.nloops; ++sec) {
      section(os, sec);
      if (sec < s.nloops) loop(os, sec);
      if (pipelined && sec == 0) {
        // The staging arrays are consumed: read the next row while this one reduces and writes.
        os << "  const I lf_nrow = lf_row + lf_step;\n  const bool lf_nvalid = lf_nrow < lf_rows;\n";
        row_offsets(os, "n", "lf_nrow", "lf_nvalid");
        stage_loads(os, "n", "lf_nvalid");
      }
    }
    if (pipelined) {
      os << "  lf_row = lf_nrow;\n  lf_valid = lf_nvalid;\n";
      for (size_t k = 0; k < nin() + part.outputs.size(); ++k) os << "  r" << k << " = n" << k << ";\n";
      os << "  }\n";
    }
    os << "}\n\n";
  }
};

}  // namespace

int row_vec_width(const KernelPart& part) {
  size_t min_size = 16;
  for (const auto* ios : {&part.inputs, &part.outputs})
    for (const IoDesc& d : *ios)
      if (d.space == Space::Full) min_size = std::min(min_size, dtype_size(d.dtype));
  return static_cast<int>(std::clamp<size_t>(16 / min_size, 1, 8));
}

void set_row_reg_budget(int floats) { g_reg_budget.store(std::max(0, floats)); }
void set_row_pipeline(int on) { g_pipeline.store(on); }
void set_row_early_loads(int on) { g_early_loads.store(on); }
bool row_early_loads() {
  const int knob = g_early_loads.load(std::memory_order_relaxed);
  return knob < 0 ? config().row_early_loads : knob == 1;
}

void render_row(const KernelSpec& spec, RenderedKernel& rk) {
  LF_ASSERT(spec.parts.size() == 1, "row spec with ", spec.parts.size(), " parts");
  const KernelPart& part = spec.parts[0];
  for (const Instr& in : part.instrs)
    if (in.is_reduction())
      LF_ASSERT(is_floating(part.instrs[in.arg[0]].dtype), "row reduction of a non-float value");
  std::ostringstream os;
  const RowSchedule smem = schedule_row(part, RowCacheMode::CacheFloat);
  const RowSchedule regs = schedule_row(part, RowCacheMode::CacheAll);
  const RowSchedule recomputed = schedule_row(part, RowCacheMode::Recompute);
  rk.ncache = smem.ncache;
  rk.row_vec = row_vec_width(part);
  // Columns a thread holds in registers: a multiple of the pack width within the budget.
  const int held = std::max(regs.live, 1);
  for (size_t sec = 1; sec < regs.loop_eval.size(); ++sec)
    for (int i : regs.loop_eval[sec]) rk.row_late_loads = rk.row_late_loads || part.instrs[i].kind == InstrKind::Load;
  const auto reductions = std::count_if(part.instrs.begin(), part.instrs.end(), [](const Instr& in) { return in.is_reduction(); });
  const int knob = g_reg_budget.load(std::memory_order_relaxed);
  const int budget = knob > 0 ? knob
                     : rk.row_vec >= 8 && reductions >= 2 && rk.row_late_loads ? kRegBudgetTwoExchanges
                                                                                : kRegBudget;
  const int packs = std::max(1, budget / (held * rk.row_vec));
  rk.row_regs = held * packs * rk.row_vec <= kRegMax ? packs * rk.row_vec : 0;
  rk.variants.clear();
  // Families of entry points, each one body (a template over the index type) with an i32 and an
  // i64 entry: {one column a step, 16-byte packs} x {cache, recompute}, and for register rows
  // with packs the pipelined body beside the plain one. A spec asks for the vec cache family;
  // the register bodies it gets follow row_bodies().
  struct Family {
    bool vec, cache, pipe;
    Variant v32, v64;
  };
  const bool reg_rows = rk.row_regs > 0 && rk.row_vec > 1;
  const int stage_words = reg_rows && !smem_staged_rows(part, regs, rk.row_vec) ? load_words(part, regs, rk.row_regs, 0, 1) : 0;
  const RowBodies bodies = !reg_rows || stage_words > kStageRegWords ? RowBodies{true, false} : row_bodies();
  const Family families[] = {
      {false, true, false, Variant::CacheI32, Variant::CacheI64},
      {false, false, false, Variant::RecomputeI32, Variant::RecomputeI64},
      {true, true, false, Variant::VecCacheI32, Variant::VecCacheI64},
      {true, true, true, Variant::VecPipeI32, Variant::VecPipeI64},
      {true, false, false, Variant::VecRecomputeI32, Variant::VecRecomputeI64},
  };
  for (const Family& f : families) {
    if (f.vec && f.cache && !(f.pipe ? bodies.pipelined : bodies.plain)) continue;
    bool body = false;
    for (bool i64 : {false, true}) {
      const Variant v = i64 ? f.v64 : f.v32;
      // The pipelined family is asked for through the vec cache bit.
      const Variant asked = f.pipe ? plain_row_variant(v) : v;
      if (!wants_variant(spec, asked)) continue;
      const int w = f.vec ? rk.row_vec : 1;
      const Store st = !f.cache ? Store::None : rk.row_regs > 0 ? Store::Regs : Store::Smem;
      const RowSchedule& s = !f.cache ? recomputed : st == Store::Regs ? regs : smem;
      const Body b{part, rk.layout.parts[0], s, st, w, rk.row_regs / w, f.pipe,
                   f.pipe && smem_staged_rows(part, s, rk.row_vec),
                   st == Store::Regs && f.vec && early_fits(part, s, rk.row_regs) && row_early_loads()};
      if (!body) {
        if (b.smem_stage) rk.row_stage_bytes = static_cast<int>(b.staged().size()) * b.np * 16;
        b.render(os);
        body = true;
      }
      rk.variants.push_back(v);
      os << "extern \"C\" __global__ void __launch_bounds__(" << kRowMaxThreads << ") " << rk.entry(v) << "(const LfArgs A) {\n"
         << "  extern __shared__ float lf_smem[];\n  __shared__ float lf_red[64];\n  lf_pdl_wait();\n"
         << "  " << b.name() << "<" << (i64 ? "long long" : "int") << ">(A, lf_smem, lf_red);\n}\n\n";
    }
  }
  rk.body += os.str();
}

}  // namespace livefuse::jit
