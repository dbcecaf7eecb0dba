// Pointwise kernels: one thread per element (strided) or per VEC elements (vec). A horizontal
// spec has several parts; each owns a contiguous range of blocks (block_begin in its words).
#include <algorithm>
#include <sstream>

#include "kernels/jit/render_detail.hpp"
#include "livefuse/error.hpp"

namespace livefuse::jit {
namespace {
using namespace render_detail;

// The op statements of a part, given how loads read and stores write.
template <class LoadFn, class StoreFn>
void body(std::ostringstream& os, const KernelPart& part, LoadFn load, StoreFn store, const char* indent) {
  for (size_t i = 0; i < part.instrs.size(); ++i) {
    const Instr& in = part.instrs[i];
    const int ii = static_cast<int>(i);
    switch (in.kind) {
      case InstrKind::Load:
        os << indent << "const " << nat_type(in.dtype) << " v" << i << " = " << load(in) << ";\n";
        break;
      case InstrKind::Store: os << indent << store(in, std::string("v").append(std::to_string(in.arg[0]))) << "\n"; break;
      default: os << indent << value_stmt(in, ii, "1") << "\n";
    }
  }
}

// Only the functions the rendered variants call: NVRTC parses every one it is given.
void render_part(std::ostringstream& os, const KernelPart& part, const ArgLayout::Part& lp, int p, int vec,
                 bool vec_variant, bool at_variant, bool strided_variant) {
  const size_t nin = part.inputs.size(), nout = part.outputs.size();
  auto off_name = [](size_t k) { return std::string("o").append(std::to_string(k)); };
  if (at_variant) {
    // _at: the program at given element offsets of every io.
    os << "template <typename I>\n__device__ __forceinline__ void lf_p" << p << "_at(const LfArgs& A";
    for (size_t k = 0; k < nin + nout; ++k) os << ", I " << off_name(k);
    os << ") {\n";
    body(
        os, part, [&](const Instr& in) { return load_expr(in.dtype, lp.in[in.io], off_name(in.io)); },
        [&](const Instr& in, const std::string&) { return store_storage(in.dtype, lp.out[in.io], off_name(nin + in.io), stored(part, in)); },
        "  ");
    os << "}\n\n";
  }
  if (strided_variant) {
    // _strided: offsets from the linear index through every io's strides.
    os << "template <typename I>\n__device__ __forceinline__ void lf_p" << p << "_strided(const LfArgs& A, I i) {\n";
    std::vector<std::pair<std::string, int>> offs;
    for (size_t k = 0; k < nin + nout; ++k) {
      os << "  I " << off_name(k) << " = 0;\n";
      offs.push_back({off_name(k), (k < nin ? lp.in[k] : lp.out[k - nin]) + 1});
    }
    os << decompose("i", lp.base + 1, lp.base + 2, offs, true);
    os << "  lf_p" << p << "_at<I>(A";
    for (size_t k = 0; k < nin + nout; ++k) os << ", " << off_name(k);
    os << ");\n}\n\n";
  }

  // _vec: VEC consecutive elements of dense operands with packed loads and stores.
  if (vec_variant) {
    os << "template <typename I>\n__device__ __forceinline__ void lf_p" << p << "_vec(const LfArgs& A, I vi) {\n";
    os << "  const I lf_base = vi * (I)" << vec << ";\n";
    for (size_t i = 0; i < part.instrs.size(); ++i) {
      const Instr& in = part.instrs[i];
      if (in.kind != InstrKind::Load) continue;
      const std::string st = storage_type(in.dtype);
      os << "  " << st << " lf_s" << i << "[" << vec << "]; lf_ldpack<" << vec << ">(lf_s" << i << ", ((const " << st
         << "*)A.w[" << lp.in[in.io] << "]) + lf_base);\n";
    }
    for (size_t k = 0; k < nout; ++k) os << "  " << storage_type(part.outputs[k].dtype) << " lf_so" << k << "[" << vec << "];\n";
    os << "#pragma unroll\n  for (int e = 0; e < " << vec << "; ++e) {\n";
    body(
        os, part,
        [&](const Instr& in) {
          const int i = static_cast<int>(&in - part.instrs.data());
          return from_storage(in.dtype, "lf_s" + std::to_string(i) + "[e]");
        },
        [&](const Instr& in, const std::string&) { return "lf_so" + std::to_string(in.io) + "[e] = " + stored(part, in) + ";"; },
        "    ");
    os << "  }\n";
    for (size_t k = 0; k < nout; ++k)
      os << "  lf_stpack<" << vec << ">(((" << storage_type(part.outputs[k].dtype) << "*)A.w[" << lp.out[k]
         << "]) + lf_base, lf_so" << k << ");\n";
    os << "}\n\n";
  }
}

void render_entry(std::ostringstream& os, const KernelSpec& spec, const RenderedKernel& rk, Variant v) {
  const bool vec = is_vec_pointwise(v), exact = v == Variant::VecExactI32 || v == Variant::VecExactI64;
  os << "extern \"C\" __global__ void __launch_bounds__(" << kPointwiseBlock << ") " << rk.entry(v)
     << "(const LfArgs A) {\n  lf_pdl_wait();\n  typedef " << (is_i64(v) ? "long long" : "int") << " I;\n  const long long lf_b = blockIdx.x;\n";
  const size_t np = spec.parts.size();
  for (size_t p = 0; p < np; ++p) {
    const ArgLayout::Part& lp = rk.layout.parts[p];
    if (p + 1 < np) os << "  " << (p ? "else " : "") << "if (lf_b < A.w[" << rk.layout.parts[p + 1].base + 10 << "]) {\n";
    else os << "  " << (p ? "else " : "") << "{\n";
    os << "    const I t = (I)(lf_b - A.w[" << lp.base + 10 << "]) * (I)" << kPointwiseBlock << " + (I)threadIdx.x;\n";
    const size_t nio = spec.parts[p].inputs.size() + spec.parts[p].outputs.size();
    if (vec) {
      os << "    const I nvec = (I)A.w[" << lp.base + 11 << "];\n";
      os << "    if (t < nvec) lf_p" << p << "_vec<I>(A, t);\n";
      if (!exact) {  // numel % VEC elements after the packs, one a thread
        os << "    if (t < (I)A.w[" << lp.base << "] - nvec * (I)" << rk.vec << ") {\n";
        os << "      const I i = nvec * (I)" << rk.vec << " + t;\n      lf_p" << p << "_at<I>(A";
        for (size_t k = 0; k < nio; ++k) os << ", i";
        os << ");\n    }\n";
      }
    } else {
      os << "    if (t < (I)A.w[" << lp.base << "]) lf_p" << p << "_strided<I>(A, t);\n";
    }
    os << "  }\n";
  }
  os << "}\n\n";
}

}  // namespace

int pointwise_vec_width(const KernelSpec& spec) {
  size_t min_size = 16;
  for (const KernelPart& p : spec.parts) {
    for (const auto& d : p.inputs) min_size = std::min(min_size, dtype_size(d.dtype));
    for (const auto& d : p.outputs) min_size = std::min(min_size, dtype_size(d.dtype));
  }
  return static_cast<int>(std::clamp<size_t>(16 / min_size, 1, 8));
}

void render_pointwise(const KernelSpec& spec, RenderedKernel& rk) {
  rk.vec = pointwise_vec_width(spec);
  constexpr Variant kOrder[] = {Variant::VecI32,     Variant::VecI64,     Variant::StridedI32,
                                Variant::StridedI64, Variant::VecExactI32, Variant::VecExactI64};
  bool any_vec = false, any_at = false, any_strided = false;
  for (Variant v : kOrder) {
    if (!wants_variant(spec, v)) continue;
    any_vec = any_vec || is_vec_pointwise(v);
    any_at = any_at || v == Variant::VecI32 || v == Variant::VecI64 || !is_vec_pointwise(v);  // tails use _at
    any_strided = any_strided || !is_vec_pointwise(v);
  }
  std::ostringstream os;
  for (size_t p = 0; p < spec.parts.size(); ++p)
    render_part(os, spec.parts[p], rk.layout.parts[p], static_cast<int>(p), rk.vec, any_vec, any_at, any_strided);
  rk.variants.clear();
  for (Variant v : kOrder) {
    if (!wants_variant(spec, v)) continue;
    render_entry(os, spec, rk, v);
    rk.variants.push_back(v);
  }
  rk.body += os.str();
}

}  // namespace livefuse::jit
