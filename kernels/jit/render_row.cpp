// Row kernels: blockDim.x threads per row (a multiple of 32), blockDim.y rows per block. The
// schedule (row_schedule.hpp) gives the column loops; between loops the row's reductions are
// finished with warp shuffles (and shared memory across warps) and row values computed.
#include <algorithm>
#include <sstream>

#include "kernels/jit/render_detail.hpp"
#include "kernels/jit/row_schedule.hpp"
#include "livefuse/error.hpp"

namespace livefuse::jit {
namespace {
using namespace render_detail;

std::string nat_float(DType d, const std::string& x) {
  if (d == DType::f16) return "lf_nat_f16(" + x + ")";
  if (d == DType::bf16) return "lf_nat_bf16(" + x + ")";
  return x;
}

// vec > 1: every Full io is read and written as packs of `vec` consecutive columns (16 bytes
// for the narrowest dtype); the launch checks unit column strides, alignment and cols % vec.
void render_body(std::ostringstream& os, const KernelPart& part, const ArgLayout::Part& lp, bool cache,
                 const RowSchedule& s, int vec) {
  const size_t nin = part.inputs.size(), nout = part.outputs.size();
  auto rname = [](size_t k) { return "r" + std::to_string(k); };
  auto cname = [](size_t k) { return "c" + std::to_string(k); };
  auto word = [&](size_t k) { return k < nin ? lp.in[k] : lp.out[k - nin]; };
  os << "template <typename I>\n__device__ __forceinline__ void lf_row_" << (cache ? "cache" : "recompute")
     << (vec > 1 ? "_v" : "") << "(const LfArgs& A, float* lf_smem, float* lf_red) {\n";
  os << "  const int lf_tid = threadIdx.x, lf_tpr = blockDim.x;\n";
  os << "  const I lf_rows = (I)A.w[0], lf_cols = (I)A.w[10];\n";
  os << "  const I lf_row = (I)blockIdx.x * (I)blockDim.y + (I)threadIdx.y;\n";
  os << "  const bool lf_valid = lf_row < lf_rows;\n";
  std::vector<std::pair<std::string, int>> offs;
  for (size_t k = 0; k < nin + nout; ++k) {
    os << "  I " << rname(k) << " = 0; const I " << cname(k) << " = (I)A.w[" << word(k) + 9 << "];\n";
    offs.push_back({rname(k), word(k) + 1});
  }
  os << decompose("(lf_valid ? lf_row : (I)0)", 1, 2, offs);
  if (cache && s.ncache > 0)
    os << "  float* lf_cache = lf_smem + (I)threadIdx.y * (I)" << s.ncache << " * lf_cols;\n";
  else
    os << "  (void)lf_smem;\n";

  for (int sec = 0; sec <= s.nloops; ++sec) {
    os << "  // ---- section " << sec << "\n";
    for (int i : s.section[sec]) {
      const Instr& in = part.instrs[i];
      const std::string v = "v" + std::to_string(i);
      switch (in.kind) {
        case InstrKind::Load:
          os << "  const " << nat_type(in.dtype) << " " << v << " = lf_valid ? "
             << load_expr(in.dtype, lp.in[in.io], rname(in.io)) << " : (" << nat_type(in.dtype) << ")0;\n";
          break;
        case InstrKind::ReduceSum:
          os << "  const float " << v << " = " << nat_float(in.dtype, "lf_row_sum(lf_acc" + std::to_string(i) + ", lf_red)") << ";\n";
          break;
        case InstrKind::ReduceMax:
          os << "  const float " << v << " = " << nat_float(in.dtype, "lf_row_max(lf_acc" + std::to_string(i) + ", lf_red)") << ";\n";
          break;
        case InstrKind::Store:
          os << "  if (lf_valid && lf_tid == 0) { "
             << store_stmt(in.dtype, lp.out[in.io], rname(nin + in.io), "v" + std::to_string(in.arg[0])) << " }\n";
          break;
        default: os << "  " << value_stmt(in, i, "lf_cols") << "\n";
      }
    }
    if (sec == s.nloops) break;
    os << "  // ---- loop " << sec << "\n";
    for (int i : s.loop_reduce[sec]) {
      const bool sum = part.instrs[i].kind == InstrKind::ReduceSum;
      os << "  float lf_acc" << i << " = " << (sum ? "0.0f" : "__int_as_float(0xff800000)") << ";\n";
    }
    const std::string ind = vec > 1 ? "      " : "    ";
    if (vec > 1) {
      os << "  for (I lf_c0 = (I)lf_tid * (I)" << vec << "; lf_valid && lf_c0 < lf_cols; lf_c0 += (I)lf_tpr * (I)" << vec << ") {\n";
      for (int i : s.loop_eval[sec]) {
        const Instr& in = part.instrs[i];
        if (in.kind != InstrKind::Load) continue;
        const std::string st = storage_type(in.dtype);
        os << "    " << st << " lf_s" << i << "[" << vec << "]; lf_ldpack<" << vec << ">(lf_s" << i << ", ((const " << st
           << "*)A.w[" << lp.in[in.io] << "]) + " << rname(in.io) << " + lf_c0);\n";
      }
      for (int i : s.loop_store[sec])
        os << "    " << storage_type(part.instrs[i].dtype) << " lf_so" << i << "[" << vec << "];\n";
      if (cache) {
        for (int i : s.loop_cache_read[sec])
          os << "    float lf_cr" << i << "[" << vec << "]; lf_ldpack<" << vec << ">(lf_cr" << i << ", lf_cache + (I)"
             << s.cache_slot[i] << " * lf_cols + lf_c0);\n";
        for (int i : s.loop_cache_write[sec]) os << "    float lf_cw" << i << "[" << vec << "];\n";
      }
      os << "#pragma unroll\n    for (int e = 0; e < " << vec << "; ++e) {\n      const I lf_c = lf_c0 + e;\n";
    } else {
      os << "#pragma unroll 4\n  for (I lf_c = lf_tid; lf_valid && lf_c < lf_cols; lf_c += lf_tpr) {\n";
    }
    // Packs go to shared memory as 16-byte accesses too (one float per column would make
    // `vec` threads hit one bank).
    for (int i : s.loop_cache_read[sec]) {
      if (vec > 1) os << ind << "const float v" << i << " = lf_cr" << i << "[e];\n";
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
    if (cache)
      for (int i : s.loop_cache_write[sec]) {
        if (vec > 1) os << ind << "lf_cw" << i << "[e] = v" << i << ";\n";
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
      const std::string v = "v" + std::to_string(in.arg[0]);
      if (vec > 1) os << ind << "lf_so" << i << "[e] = " << to_storage(in.dtype, v) << ";\n";
      else os << ind << store_stmt(in.dtype, lp.out[in.io], rname(k) + " + lf_c * " + cname(k), v) << "\n";
    }
    if (vec > 1) {
      os << "    }\n";
      if (cache)
        for (int i : s.loop_cache_write[sec])
          os << "    lf_stpack<" << vec << ">(lf_cache + (I)" << s.cache_slot[i] << " * lf_cols + lf_c0, lf_cw" << i << ");\n";
      for (int i : s.loop_store[sec]) {
        const Instr& in = part.instrs[i];
        os << "    lf_stpack<" << vec << ">(((" << storage_type(in.dtype) << "*)A.w[" << lp.out[in.io] << "]) + "
           << rname(nin + in.io) << " + lf_c0, lf_so" << i << ");\n";
      }
    }
    os << "  }\n";
  }
  os << "}\n\n";
}

}  // namespace

void render_row(const KernelSpec& spec, RenderedKernel& rk) {
  LF_ASSERT(spec.parts.size() == 1, "row spec with ", spec.parts.size(), " parts");
  const KernelPart& part = spec.parts[0];
  for (const Instr& in : part.instrs)
    if (in.kind == InstrKind::ReduceSum || in.kind == InstrKind::ReduceMax)
      LF_ASSERT(is_floating(part.instrs[in.arg[0]].dtype), "row reduction of a non-float value");
  std::ostringstream os;
  const RowSchedule cached = schedule_row(part, RowCacheMode::CacheFloat);
  const RowSchedule recomputed = schedule_row(part, RowCacheMode::Recompute);
  rk.ncache = cached.ncache;
  size_t min_size = 16;
  for (const auto* ios : {&part.inputs, &part.outputs})
    for (const IoDesc& d : *ios)
      if (d.space == Space::Full) min_size = std::min(min_size, dtype_size(d.dtype));
  rk.row_vec = static_cast<int>(std::clamp<size_t>(16 / min_size, 1, 8));
  rk.variants.clear();
  for (bool vec : {false, true}) {
    for (bool cache : {true, false}) {
      bool body = false;
      for (bool i64 : {false, true}) {
        const Variant v = vec ? (cache ? (i64 ? Variant::VecCacheI64 : Variant::VecCacheI32)
                                       : (i64 ? Variant::VecRecomputeI64 : Variant::VecRecomputeI32))
                              : (cache ? (i64 ? Variant::CacheI64 : Variant::CacheI32)
                                       : (i64 ? Variant::RecomputeI64 : Variant::RecomputeI32));
        if (!wants_variant(spec, v)) continue;
        if (!body) {
          render_body(os, part, rk.layout.parts[0], cache, cache ? cached : recomputed, vec ? rk.row_vec : 1);
          body = true;
        }
        rk.variants.push_back(v);
        os << "extern \"C\" __global__ void __launch_bounds__(" << kRowMaxThreads << ") " << rk.entry(v) << "(const LfArgs A) {\n"
           << "  extern __shared__ float lf_smem[];\n  __shared__ float lf_red[32];\n"
           << "  lf_row_" << (cache ? "cache" : "recompute") << (vec ? "_v" : "") << "<" << (i64 ? "long long" : "int")
           << ">(A, lf_smem, lf_red);\n}\n\n";
      }
    }
  }
  rk.source += os.str();
}

}  // namespace livefuse::jit
