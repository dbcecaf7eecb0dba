// The op library of LTO-linked kernels (lto_render.hpp has the why): one extern "C" wrapper
// per (op, compute type), conversion, natural form and storage access, whose bodies are the op
// table's expressions and value_stmt's conversions; and one module per registered custom op.
#include <algorithm>
#include <sstream>

#include "kernels/jit/lto_detail.hpp"
#include "kernels/jit/lto_render.hpp"
#include "kernels/jit/render_detail.hpp"
#include "runtime/registry.hpp"

namespace livefuse::jit {
using namespace lto_detail;
using namespace render_detail;

std::string op_library_source(bool fast_exp) {
  std::ostringstream os;
  os << program_head({fast_exp, false, false});
  os << "\n// ---- the op library of LTO-linked kernels (lto_render.hpp) ----\n";
  os << "extern \"C\" __device__ void " << fn_pdl_wait() << "() { lf_pdl_wait(); }\n";
  for (int i = 0; i < static_cast<int>(OpId::kCount); ++i) {
    const OpId op = static_cast<OpId>(i);
    for (Cls c : kCls) {
      if (!op_has(op, c)) continue;
      const std::string t = c_type(c);
      os << "extern \"C\" __device__ " << t << " " << fn_op(op, c) << "(" << t << " a, " << t << " b, " << t << " c, " << t
         << " s0, " << t << " s1) { return (" << t << ")(" << op_info(op).expr << "); }\n";
    }
  }
  for (Cls c : kCls)
    for (Cls n : kCls) {
      os << "extern \"C\" __device__ " << c_type(c) << " " << fn_cv(c, n) << "(" << c_type(n) << " x) { return "
         << to_compute_fn(cls_dtype(c)) << "(x); }\n";
      os << "extern \"C\" __device__ " << c_type(c) << " " << fn_truth(c, n) << "(" << c_type(n) << " x) { return ("
         << c_type(c) << ")lf_truth(x); }\n";
    }
  for (DType d : kDTypes) {
    const std::string nt = nat_type(d), st = storage_type(d);
    for (Cls c : kCls) {
      os << "extern \"C\" __device__ " << nt << " " << fn_nat(d, c) << "(" << c_type(c) << " r) { return "
         << naturalize(d, "r") << "; }\n";
      if (d == DType::f16 || d == DType::bf16)
        os << "extern \"C\" __device__ lf_u16 " << fn_bits(d, c) << "(" << c_type(c) << " r) { return "
           << (d == DType::f16 ? "lf_f2h" : "lf_f2bf") << "(lf_to_f(r)); }\n";
    }
    os << "extern \"C\" __device__ " << nt << " " << fn_ld(d) << "(" << st << " x) { return " << from_storage(d, "x") << "; }\n";
    os << "extern \"C\" __device__ " << st << " " << fn_st(d) << "(" << nt << " x) { return " << to_storage(d, "x") << "; }\n";
  }
  return os.str();
}

std::string custom_op_source(uint32_t custom_id, bool fast_exp) {
  const CustomElementwiseDef& def = custom_op(custom_id);
  return program_head({fast_exp, false, false}) + "\nextern \"C\" __device__ float " + fn_custom(custom_id) +
         "(float a, float b, float c, float s0, float s1) { return (float)(" + def.cuda_expr + "); }\n";
}

std::vector<uint32_t> custom_ops_of(const KernelSpec& spec) {
  std::vector<uint32_t> ids;
  for (const KernelPart& part : spec.parts)
    for (const Instr& in : part.instrs)
      if (in.kind == InstrKind::Custom && std::find(ids.begin(), ids.end(), in.custom_id) == ids.end()) ids.push_back(in.custom_id);
  return ids;
}

}  // namespace livefuse::jit
