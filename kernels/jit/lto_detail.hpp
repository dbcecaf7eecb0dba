#pragma once
// Names and types shared by the op library (lto_library.cpp) and the IR renderer
// (lto_render.cpp): a wrapper is called by the name the library defines it under.
#include <cstdint>
#include <string>

#include "kernels/jit/kernel_spec.hpp"

namespace livefuse::jit::lto_detail {

// Value classes: a natural value or a compute value is a float, an int or a 64-bit int.
enum class Cls : char { F = 'f', I = 'i', L = 'l' };
inline Cls nat_cls(DType d) { return d == DType::i64 ? Cls::L : (d == DType::i32 || d == DType::boolean) ? Cls::I : Cls::F; }
inline Cls compute_cls(DType c) { return c == DType::i64 ? Cls::L : c == DType::i32 ? Cls::I : Cls::F; }
inline DType cls_dtype(Cls c) { return c == Cls::L ? DType::i64 : c == Cls::I ? DType::i32 : DType::f32; }
inline std::string c_type(Cls c) { return c == Cls::L ? "lf_i64" : c == Cls::I ? "int" : "float"; }
inline std::string ir_type(Cls c) { return c == Cls::L ? "i64" : c == Cls::I ? "i32" : "float"; }
inline std::string sfx(Cls c) { return std::string(1, static_cast<char>(c)); }

inline std::string storage_ir(DType d) {
  switch (d) {
    case DType::f16:
    case DType::bf16: return "i16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::boolean: return "i8";
    default: return "float";
  }
}
inline std::string dname(DType d) { return std::string(dtype_name(d)); }

// Library function names: the IR renderer and the library source agree through these.
inline std::string fn_op(OpId op, Cls c) { return "lf_w_op_" + std::string(op_name(op)) + "_" + sfx(c); }
inline std::string fn_cv(Cls c, Cls n) { return "lf_w_cv_" + sfx(c) + "_" + sfx(n); }
inline std::string fn_truth(Cls c, Cls n) { return "lf_w_tr_" + sfx(c) + "_" + sfx(n); }
inline std::string fn_nat(DType d, Cls c) { return "lf_w_nat_" + dname(d) + "_" + sfx(c); }
inline std::string fn_bits(DType d, Cls c) { return "lf_w_bits_" + dname(d) + "_" + sfx(c); }
inline std::string fn_ld(DType d) { return "lf_w_ld_" + dname(d); }
inline std::string fn_st(DType d) { return "lf_w_st_" + dname(d); }
inline std::string fn_custom(uint32_t id) { return "lf_w_custom_" + std::to_string(id); }
inline std::string fn_pdl_wait() { return "lf_w_pdl_wait"; }  // the preamble's lf_pdl_wait

inline constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::boolean};
inline constexpr Cls kCls[] = {Cls::F, Cls::I, Cls::L};

inline bool elementwise_builtin(OpId op) {
  return op_info(op).category == OpCategory::Elementwise && op != OpId::custom && !op_info(op).expr.empty();
}
inline bool op_has(OpId op, Cls c) { return elementwise_builtin(op) && (c == Cls::F || op_info(op).int_ok); }

}  // namespace livefuse::jit::lto_detail
