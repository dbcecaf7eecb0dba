#pragma once
// Pieces shared by the pointwise and row renderers (internal to kernels/jit).
#include <string>

#include "kernels/jit/render.hpp"

namespace livefuse::jit::render_detail {

std::string nat_type(DType d);      // register type of a value: float, int or lf_i64
std::string compute_ctype(DType c); // f32 -> float, i32 -> int, i64 -> lf_i64
// Natural value of dtype d at element `off` of the pointer stored in parameter word `word`.
std::string load_expr(DType d, int word, const std::string& off);
// Conversions of value_stmt: a natural value to compute type c (lf_to_f, lf_to_i32, lf_to_i64),
// and an expression to the natural form of dtype d.
std::string to_compute_fn(DType c);
std::string naturalize(DType d, const std::string& x);
// A scalar attribute as a literal of compute type c (converted like the eager backend does).
std::string literal(double v, DType c);
// Its value for an integer compute type c (i32 or i64): truncated toward zero, saturated, NaN 0.
long long integer_literal(double v, DType c);
// "const T vI = ...;" for Op, Custom, Const and ColCount instructions; operands are vK.
std::string value_stmt(const Instr& in, int i, const std::string& cols_expr);
// Expensive scalar functions that set_outline_heavy_ops calls out of line, and the name of the
// out-of-line copy value_stmt calls ("lf_ool_gelu"); outlined_op: the knob is on and op is one.
inline constexpr OpId kOutlinedOps[] = {OpId::gelu, OpId::gelu_tanh, OpId::erf, OpId::silu, OpId::sigmoid, OpId::tanh};
std::string outlined_fn(OpId op);
bool outlined_op(OpId op);
// f16/bf16 op results also keep their storage bits (vN_b): one conversion, not three, when
// the value is stored (the natural float is dead code then).
bool has_bits(const Instr& in);
// The storage value that Store `st` writes (its operand's bits, or a conversion of it).
std::string stored(const KernelPart& part, const Instr& st);
std::string store_storage(DType d, int word, const std::string& off, const std::string& bits);
// Storage element type and conversions for packed (16-byte) accesses.
std::string storage_type(DType d);
std::string from_storage(DType d, const std::string& x);
std::string to_storage(DType d, const std::string& x);
// The helpers a program starts with (its head): the embedded sources, then 16-byte pack accesses
// and row reductions only for programs that use them.
std::string preamble(bool packs, bool rows);
// Offsets of every io from a linear index (over the runtime rank, outermost dim without a
// division). `off` names one I variable per io; `shape_word` the part's shape[0]. Unrolled
// for per-element use; a loop (one division in the code, not seven: NVRTC time) once per row.
std::string decompose(const std::string& index, int rank_word, int shape_word,
                      const std::vector<std::pair<std::string, int>>& offsets_and_stride_words, bool unroll);

}  // namespace livefuse::jit::render_detail
