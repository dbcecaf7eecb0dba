#pragma once
// KernelSpec: the fused IR. One spec is one kernel launch; the CUDA renderer and the CPU tiled
// interpreter both execute exactly this, so a fused group means the same thing on every device.
//
// A spec has one or more parts (several only for horizontal fusion: independent pointwise
// groups that share one launch). A part is a straight-line SSA program over instructions:
//   Load       reads input `io` at the current element (or row)
//   Op         an Elementwise row of LF_OP_TABLE (its `expr` is the math, never re-typed)
//   Custom     a registered custom elementwise op (registry.hpp: cuda_expr / cpu_fn)
//   Const      the scalar s[0]
//   ColCount   the number of columns of a row kernel, as f32 (mean = sum / cols)
//   ReduceSum / ReduceMax   over the columns of a row (Full operand -> Row result)
//   Store      writes its operand to output `io`
// Every value is held in the *natural* form of its dtype (see lf_fused.cuh), so intermediates
// round exactly as if eager execution had stored and reloaded them.
//
// Spaces. A Pointwise part iterates over its shape F element by element; everything is Full.
// A Row part iterates over F = R x [cols]: Full values exist per element, Row values once per
// row (reductions, and ops on reduction results). Inputs and outputs of row space have the
// tensor shape R + [1] (RowKeep) or R (RowFlat).
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "livefuse/detail/op_table.hpp"
#include "livefuse/dtype.hpp"

namespace livefuse::jit {

enum class SpecKind : uint8_t { Pointwise, Row };
enum class Space : uint8_t { Full, RowKeep, RowFlat };
inline bool is_row_space(Space s) { return s != Space::Full; }

enum class InstrKind : uint8_t { Load, Op, Custom, Const, ColCount, ReduceSum, ReduceMax, Store };

struct Instr {
  InstrKind kind = InstrKind::Op;
  OpId op = OpId::kCount;
  uint32_t custom_id = 0;
  std::array<int32_t, 3> arg{-1, -1, -1};  // operand instructions (earlier in the part)
  int8_t nargs = 0;
  std::array<double, 2> s{0.0, 0.0};  // s0, s1 of the op's expr; Const: the value
  bool scalar_operand = false;        // binary op whose b is s0
  DType dtype = DType::f32;           // result dtype (Store: the output's dtype)
  DType compute = DType::f32;         // Op: compute type (f32, i32 or i64)
  Space space = Space::Full;          // Full, or a row form (RowKeep for row values)
  int32_t io = -1;                    // Load: input index; Store: output index

  bool has_value() const { return kind != InstrKind::Store; }
  bool operator==(const Instr&) const = default;
  bool is_reduction() const { return kind == InstrKind::ReduceSum || kind == InstrKind::ReduceMax; }
};

struct IoDesc {
  DType dtype = DType::f32;
  Space space = Space::Full;
  bool operator==(const IoDesc&) const = default;
};

struct KernelPart {
  std::vector<Instr> instrs;
  std::vector<IoDesc> inputs;
  std::vector<IoDesc> outputs;
};

struct KernelSpec {
  SpecKind kind = SpecKind::Pointwise;
  std::vector<KernelPart> parts;
  std::string name;  // readable, for logs; not part of the structure
  // Which entry points to generate: a bitmask over jit::Variant (render.hpp), 0 = all. Every
  // variant costs NVRTC time, so the planner asks for the one its shapes need; a launch that
  // needs another reports it missing and the caller compiles a sibling with that bit added.
  uint32_t variants = 0;

  int num_inputs() const;
  int num_outputs() const;
};

// Compute type of an elementwise op, as the eager backends choose it: f32 when the op is
// float-only or any value operand or the result is floating; else i64 if any is i64; else i32.
// where's condition (operand 0) does not take part.
DType compute_type(OpId op, std::span<const DType> operands, DType result);
// Compute type for a registered custom op (always f32).
inline DType custom_compute_type() { return DType::f32; }

// Structural hash of everything that changes the generated code (not `name`).
uint64_t structure_hash(const KernelSpec& spec);
// Multi-line listing of the program, one instruction a line.
std::string to_string(const KernelSpec& spec);
// Internal consistency (operands precede users, spaces agree); LF_ASSERT on failure.
void validate(const KernelSpec& spec);

// Builds one part; ops get their compute type from compute_type().
class PartBuilder {
 public:
  int load(DType dtype, Space space = Space::Full);
  int op(OpId op, std::span<const int> args, DType result, std::array<double, 2> s = {0, 0},
         bool scalar_operand = false);
  int op(OpId op, std::initializer_list<int> args, DType result,
         std::array<double, 2> s = {0, 0}, bool scalar_operand = false) {
    return this->op(op, std::span<const int>(args.begin(), args.size()), result, s, scalar_operand);
  }
  int custom(uint32_t id, std::span<const int> args, DType result);
  int constant(double v, DType dtype = DType::f32);
  int col_count();
  int reduce_sum(int arg, DType result);
  int reduce_max(int arg, DType result);
  void store(int value, DType dtype, Space space = Space::Full);

  const Instr& instr(int i) const { return part_.instrs[i]; }
  KernelPart take() { return std::move(part_); }
  KernelPart& part() { return part_; }

 private:
  Space result_space(std::span<const int> args) const;
  KernelPart part_;
};

std::string_view space_name(Space s);
std::string_view instr_kind_name(InstrKind k);

}  // namespace livefuse::jit
