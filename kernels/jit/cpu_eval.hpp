#pragma once
// Tile primitives of the CPU interpreter: load a tile of an operand into its natural form,
// run one instruction over a tile, store a tile. Values live in small buffers of up to
// kTile elements, in the natural type of their dtype (float, int32 or int64; lf_fused.cuh).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/jit/geometry.hpp"
#include "kernels/jit/kernel_spec.hpp"

namespace livefuse::jit::cpu_eval {

enum class Nat : uint8_t { F32, I32, I64 };
constexpr Nat nat_of(DType d) {
  switch (d) {
    case DType::i32:
    case DType::boolean: return Nat::I32;
    case DType::i64: return Nat::I64;
    default: return Nat::F32;
  }
}

// A value of a tile: `n` elements at `p` (or one element repeated when `uniform`).
struct TileVal {
  const void* p = nullptr;
  Nat nat = Nat::F32;
  bool uniform = false;
};

// Per-thread scratch memory (slot `which`), grown on demand and never cleared: allocating and
// zeroing buffers per task costs more than the small tiles they hold.
int64_t* thread_buffer(int which, size_t elems);

// Scratch for operand conversions of one instruction (3 operands + result), `tile` each.
struct Scratch {
  explicit Scratch(int64_t tile) : base(thread_buffer(0, static_cast<size_t>(tile) * 4)), tile_(tile) {}
  void* slot(int k) { return base + static_cast<size_t>(k) * static_cast<size_t>(tile_); }
  int64_t* base;
  int64_t tile_;
};

// n elements of io at linear positions [lo, lo+n) of the coalesced shape.
void load_tile(const IoGeometry& io, DType dt, const Shape& shape, int64_t lo, int64_t n, void* dst);
void store_tile(const IoGeometry& io, DType dt, const Shape& shape, int64_t lo, int64_t n, const void* src);
// n elements at base + j*stride (a stretch of one row; stride 0 broadcasts one element).
void load_run(const void* base, int64_t stride, DType dt, int64_t n, void* dst);
void store_run(void* base, int64_t stride, DType dt, int64_t n, const void* src);

// Evaluates an Op or Custom instruction over n elements into dst (natural form of in.dtype).
void eval_op(const Instr& in, const TileVal* args, int64_t n, void* dst, Scratch& scratch);
// Fills dst with n copies of the Const instruction's value (natural form).
void eval_const(double v, DType dt, int64_t n, void* dst);

// Row reductions of a tile of natural floats, accumulated in double like the eager backend.
double sum_tile(const TileVal& v, int64_t n);
float max_tile(const TileVal& v, int64_t n, float init);
// Natural form of a float result of dtype dt (rounded to its storage precision).
float naturalize_float(float v, DType dt);

}  // namespace livefuse::jit::cpu_eval
