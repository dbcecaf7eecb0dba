#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "kernels/jit/render_detail.hpp"
#include "livefuse/error.hpp"
#include "runtime/registry.hpp"

namespace livefuse::jit {

std::string_view variant_suffix(Variant v) {
  switch (v) {
    case Variant::VecI32: return "vec_i32";
    case Variant::VecI64: return "vec_i64";
    case Variant::StridedI32: return "strided_i32";
    case Variant::StridedI64: return "strided_i64";
    case Variant::CacheI32: return "cache_i32";
    case Variant::CacheI64: return "cache_i64";
    case Variant::RecomputeI32: return "recompute_i32";
    case Variant::RecomputeI64: return "recompute_i64";
    case Variant::VecCacheI32: return "vcache_i32";
    case Variant::VecCacheI64: return "vcache_i64";
    case Variant::VecRecomputeI32: return "vrecompute_i32";
    case Variant::VecRecomputeI64: return "vrecompute_i64";
    case Variant::VecExactI32: return "vec_exact_i32";
    case Variant::VecExactI64: return "vec_exact_i64";
    case Variant::VecPipeI32: return "vpipe_i32";
    case Variant::VecPipeI64: return "vpipe_i64";
  }
  return "?";
}

ArgLayout arg_layout(const KernelSpec& spec) {
  ArgLayout l;
  int w = 0;
  for (const KernelPart& p : spec.parts) {
    ArgLayout::Part lp;
    lp.base = w;
    w += 12;
    const int per_io = spec.kind == SpecKind::Pointwise ? 9 : 10;
    for (size_t k = 0; k < p.inputs.size(); ++k, w += per_io) lp.in.push_back(w);
    for (size_t k = 0; k < p.outputs.size(); ++k, w += per_io) lp.out.push_back(w);
    l.parts.push_back(std::move(lp));
  }
  l.words = w;
  return l;
}

namespace render_detail {

std::string nat_type(DType d) {
  switch (d) {
    case DType::i32:
    case DType::boolean: return "int";
    case DType::i64: return "lf_i64";
    default: return "float";
  }
}

std::string compute_ctype(DType c) {
  switch (c) {
    case DType::i32: return "int";
    case DType::i64: return "lf_i64";
    default: return "float";
  }
}

namespace {
std::string ptr(const char* type, int word) {
  return std::string("((") + type + "*)A.w[" + std::to_string(word) + "])";
}
bool mentions(std::string_view expr, std::string_view name) {
  for (size_t p = expr.find(name); p != std::string_view::npos; p = expr.find(name, p + 1)) {
    const bool left = p == 0 || !(std::isalnum(static_cast<unsigned char>(expr[p - 1])) || expr[p - 1] == '_');
    const size_t e = p + name.size();
    const bool right = e >= expr.size() || !(std::isalnum(static_cast<unsigned char>(expr[e])) || expr[e] == '_');
    if (left && right) return true;
  }
  return false;
}
}  // namespace

std::string to_compute_fn(DType c) {
  switch (c) {
    case DType::i32: return "lf_to_i32";
    case DType::i64: return "lf_to_i64";
    default: return "lf_to_f";
  }
}
std::string naturalize(DType d, const std::string& x) {
  switch (d) {
    case DType::f16: return "lf_nat_f16(lf_to_f(" + x + "))";
    case DType::bf16: return "lf_nat_bf16(lf_to_f(" + x + "))";
    case DType::i32: return "lf_to_i32(" + x + ")";
    case DType::i64: return "lf_to_i64(" + x + ")";
    case DType::boolean: return "lf_nat_bool(" + x + ")";
    default: return "lf_to_f(" + x + ")";
  }
}
std::string load_expr(DType d, int word, const std::string& off) {
  const std::string o = "[" + off + "]";
  switch (d) {
    case DType::f32: return ptr("const float", word) + o;
    case DType::f16: return "lf_h2f(" + ptr("const lf_u16", word) + o + ")";
    case DType::bf16: return "lf_bf2f(" + ptr("const lf_u16", word) + o + ")";
    case DType::i32: return ptr("const int", word) + o;
    case DType::i64: return ptr("const lf_i64", word) + o;
    case DType::boolean: return detail::concat("(", ptr("const unsigned char", word), o, " != 0 ? 1 : 0)");
  }
  return "0";
}

std::string literal(double v, DType c) {
  if (c == DType::f32) {
    const float f = static_cast<float>(v);
    if (std::isnan(f)) return "__int_as_float(0x7fc00000)";
    if (std::isinf(f)) return f > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%af", static_cast<double>(f));
    return buf;
  }
  const long long x = integer_literal(v, c);
  if (c == DType::i32) return x == -2147483648LL ? "(-2147483647 - 1)" : detail::concat("(", x, ")");
  if (x == std::numeric_limits<long long>::min()) return "((lf_i64)(-9223372036854775807LL - 1))";
  return detail::concat("((lf_i64)", x, "LL)");
}

long long integer_literal(double v, DType c) {
  // Truncation toward zero with saturation, like the eager backend's to_compute.
  if (c == DType::i32)
    return v != v ? 0 : v >= 2147483647.0 ? 2147483647LL : v <= -2147483648.0 ? -2147483648LL : static_cast<long long>(v);
  constexpr long long kMax = std::numeric_limits<long long>::max();
  constexpr long long kMin = std::numeric_limits<long long>::min();
  return v != v ? 0 : v >= static_cast<double>(kMax) ? kMax : v <= static_cast<double>(kMin) ? kMin : static_cast<long long>(v);
}

std::atomic<bool> g_outline{false};  // set_outline_heavy_ops

std::string outlined_fn(OpId op) { return "lf_ool_" + std::string(op_name(op)); }

bool outlined_op(OpId op) {
  return g_outline.load() && std::find(std::begin(kOutlinedOps), std::end(kOutlinedOps), op) != std::end(kOutlinedOps);
}

std::string value_stmt(const Instr& in, int i, const std::string& cols_expr) {
  const std::string v = detail::concat("v", i);
  const std::string nt = nat_type(in.dtype);
  std::ostringstream os;
  switch (in.kind) {
    case InstrKind::Const:
      if (in.dtype == DType::f32 || in.dtype == DType::f16 || in.dtype == DType::bf16)
        os << "const float " << v << " = " << naturalize(in.dtype, literal(in.s[0], DType::f32)) << ";";
      else if (in.dtype == DType::boolean)
        os << "const int " << v << " = " << (in.s[0] != 0 ? 1 : 0) << ";";
      else
        os << "const " << nt << " " << v << " = " << literal(in.s[0], in.dtype) << ";";
      return os.str();
    case InstrKind::ColCount:
      os << "const float " << v << " = (float)(" << cols_expr << ");";
      return os.str();
    case InstrKind::Op:
    case InstrKind::Custom: break;
    default: LF_ASSERT(false, "value_stmt of ", instr_kind_name(in.kind));
  }
  const bool custom = in.kind == InstrKind::Custom;
  const std::string ct = custom ? "float" : compute_ctype(in.compute);
  const std::string conv = custom ? "lf_to_f" : to_compute_fn(in.compute);
  std::string expr;
  if (custom) expr = custom_op(in.custom_id).cuda_expr;
  else if (outlined_op(in.op)) expr = outlined_fn(in.op) + "(a)";
  else expr = std::string(op_info(in.op).expr);
  os << nt << " " << v << ";";
  if (has_bits(in)) os << " lf_u16 " << v << "_b;";
  os << "\n    { ";
  const char* names[3] = {"a", "b", "c"};
  for (int k = 0; k < in.nargs; ++k) {
    const std::string src = detail::concat("v", in.arg[k]);
    if (!custom && in.op == OpId::where && k == 0)
      os << "const " << ct << " a = (" << ct << ")lf_truth(" << src << "); ";
    else
      os << "const " << ct << " " << names[k] << " = " << conv << "(" << src << "); ";
  }
  if (in.scalar_operand) os << "const " << ct << " b = " << literal(in.s[0], custom ? DType::f32 : in.compute) << "; ";
  for (int k = in.nargs + (in.scalar_operand ? 1 : 0); k < 3; ++k)
    if (mentions(expr, names[k])) os << "const " << ct << " " << names[k] << " = (" << ct << ")0; ";
  if (mentions(expr, "s0")) os << "const " << ct << " s0 = " << literal(in.s[0], custom ? DType::f32 : in.compute) << "; ";
  if (mentions(expr, "s1")) os << "const " << ct << " s1 = " << literal(in.s[1], custom ? DType::f32 : in.compute) << "; ";
  if (has_bits(in)) {  // the storage bits too: a store of this value converts nothing again
    const bool h = in.dtype == DType::f16;
    os << v << "_b = " << (h ? "lf_f2h" : "lf_f2bf") << "(lf_to_f((" << ct << ")(" << expr << "))); " << v << " = "
       << (h ? "lf_h2f(" : "lf_bf2f(") << v << "_b); }";
    return os.str();
  }
  os << v << " = " << naturalize(in.dtype, "(" + ct + ")(" + expr + ")") << "; }";
  return os.str();
}

bool has_bits(const Instr& in) {
  return (in.kind == InstrKind::Op || in.kind == InstrKind::Custom) && (in.dtype == DType::f16 || in.dtype == DType::bf16);
}

std::string stored(const KernelPart& part, const Instr& st) {
  const int k = st.arg[0];
  const std::string v = detail::concat("v", k);
  const Instr& x = part.instrs[k];
  if (has_bits(x) && x.dtype == st.dtype) return v + "_b";
  return to_storage(st.dtype, v);
}

std::string store_storage(DType d, int word, const std::string& off, const std::string& bits) {
  return "((" + storage_type(d) + "*)A.w[" + std::to_string(word) + "])[" + off + "] = " + bits + ";";
}

std::string storage_type(DType d) {
  switch (d) {
    case DType::f16:
    case DType::bf16: return "lf_u16";
    case DType::i32: return "int";
    case DType::i64: return "lf_i64";
    case DType::boolean: return "unsigned char";
    default: return "float";
  }
}
std::string from_storage(DType d, const std::string& x) {
  switch (d) {
    case DType::f16: return "lf_h2f(" + x + ")";
    case DType::bf16: return "lf_bf2f(" + x + ")";
    case DType::boolean: return "(" + x + " != 0 ? 1 : 0)";
    default: return x;
  }
}
std::string to_storage(DType d, const std::string& x) {
  switch (d) {
    case DType::f16: return "lf_f2h(" + x + ")";
    case DType::bf16: return "lf_f2bf(" + x + ")";
    case DType::boolean: return "(unsigned char)(" + x + " != 0)";
    default: return x;
  }
}

std::string decompose(const std::string& index, int rank_word, int shape_word,
                      const std::vector<std::pair<std::string, int>>& offs, bool unroll) {
  std::ostringstream os;
  os << "  {\n    I lf_r = " << index << ";\n    const int lf_rank = (int)A.w[" << rank_word << "];\n";
  os << "#pragma unroll" << (unroll ? "" : " 1") << "\n    for (int d = " << (kMaxDims - 1) << "; d >= 0; --d) {\n";
  os << "      if (d < lf_rank) {\n";
  os << "        I lf_c;\n        if (d == 0) { lf_c = lf_r; } else {\n";
  os << "          const I lf_n = (I)A.w[" << shape_word << " + d];\n";
  os << "          const I lf_q = lf_r / lf_n; lf_c = lf_r - lf_q * lf_n; lf_r = lf_q; }\n";
  for (const auto& [name, sw] : offs) os << "        " << name << " += lf_c * (I)A.w[" << sw << " + d];\n";
  os << "      }\n    }\n  }\n";
  return os.str();
}

std::string preamble(bool packs, bool rows) {
  std::string s;
  s += "// livefuse generated kernel\n";
  s += kLfMathSource;
  s += "\n";
  s += kLfFusedSource;
  // Every generated kernel's first call (render_pointwise's and render_row's entries; the LTO
  // kernels through the op library's lf_w_pdl_wait): launched with PDL (cuda_driver.cpp's
  // launch_function, kernels/cuda/pdl.cuh's note) it may be resident while the kernel before it
  // still runs, so it touches no memory before this wait; then it lets the next PDL kernel on
  // the stream launch. A no-op before sm_90 and for a kernel launched without PDL.
  s += R"LF(
__device__ __forceinline__ void lf_pdl_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
)LF";
  if (packs) s += R"LF(
// Loads/stores of N consecutive elements as one (or a few) 16-byte accesses.
template <int N, typename S> struct alignas(sizeof(S) * N >= 16 ? 16 : sizeof(S) * N) LfPack { S v[N]; };
template <int N, typename S> __device__ __forceinline__ void lf_ldpack(S* dst, const S* src) {
  const LfPack<N, S> p = *reinterpret_cast<const LfPack<N, S>*>(src);
#pragma unroll
  for (int e = 0; e < N; ++e) dst[e] = p.v[e];
}
template <int N, typename S> __device__ __forceinline__ void lf_stpack(S* dst, const S* src) {
  LfPack<N, S> p;
#pragma unroll
  for (int e = 0; e < N; ++e) p.v[e] = src[e];
  *reinterpret_cast<LfPack<N, S>*>(dst) = p;
}
)LF";
  if (rows) s += R"LF(
// Asynchronous 16-byte copies global -> shared (sm_80+), for pipelined rows that stage the next
// row in shared memory. The issuing thread alone reads what it copied, after the wait: no barrier.
__device__ __forceinline__ void lf_cp_async16(void* smem, const void* gmem) {
  unsigned s;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(s) : "l"(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void lf_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void lf_cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }
// Row reductions: the threads of one row are threadIdx.x of one threadIdx.y (a multiple of 32).
__device__ __forceinline__ float lf_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float lf_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = lf_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Across warps: warp partials through shared memory, then one more shuffle tree (no loop over
// the warps: at most 16 a row). One barrier, not two: consecutive reductions of a kernel use
// alternate halves of lf_red (the renderer passes them), and every read of one reduction's
// half happens before the next reduction's barrier, so a half is never written while read.
__device__ __forceinline__ float lf_row_sum(float v, float* red) {
  v = lf_warp_sum(v);
  if (blockDim.x <= 32) return v;
  const int wpr = blockDim.x >> 5, base = threadIdx.y * wpr, lane = threadIdx.x & 31;
  if (lane == 0) red[base + (threadIdx.x >> 5)] = v;
  __syncthreads();
  return lf_warp_sum(lane < wpr ? red[base + lane] : 0.0f);
}
__device__ __forceinline__ float lf_row_max(float v, float* red) {
  v = lf_warp_max(v);
  if (blockDim.x <= 32) return v;
  const int wpr = blockDim.x >> 5, base = threadIdx.y * wpr, lane = threadIdx.x & 31;
  if (lane == 0) red[base + (threadIdx.x >> 5)] = v;
  __syncthreads();
  return lf_warp_max(lane < wpr ? red[base + lane] : __int_as_float(0xff800000));
}
)LF";
  return s;
}

}  // namespace render_detail

void set_outline_heavy_ops(bool on) { render_detail::g_outline.store(on); }

}  // namespace livefuse::jit
