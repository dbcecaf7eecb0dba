#pragma once
// How a row part runs: the column loops ("phases") and what happens between them. Shared by
// the CUDA renderer and the CPU interpreter, so both execute one schedule.
//
// A reduction splits a row program: its result exists only after a full pass over the
// columns. Phase of an instruction: loads/consts 0; ops the max of their operands; a reduction
// one more than its operand. Loop p evaluates the Full values of phase p (and accumulates the
// reductions of phase p+1); section s, before loop s (or after the last loop), finalises the
// reductions of phase s and computes the row values of phase s (and stores them).
//
// A Full value is evaluated first in its home loop, the first loop that needs it (a load only
// the epilogue uses is read there, not carried from loop 0). One that a later loop needs too is
// either recomputed (its loads are read again) or kept from its home loop in a per-row cache
// (registers or shared memory on the GPU, the tile buffer on the CPU). Which one is the mode.
#include <vector>

#include "kernels/jit/kernel_spec.hpp"

namespace livefuse::jit {

enum class RowCacheMode : uint8_t {
  Recompute,   // no cache: earlier-phase values are recomputed
  CacheFloat,  // values of float dtype are cached (GPU shared memory holds floats); arithmetic
               // on cached values is recomputed instead, to keep the cache small
  CacheAll,    // every value is cached (rows held in registers on the GPU; the CPU interpreter
               // with a whole row in one tile)
};

struct RowSchedule {
  std::vector<int> phase;  // per instruction
  int nloops = 0;
  std::vector<std::vector<int>> loop_eval;         // Full instrs computed in loop p (program order)
  std::vector<std::vector<int>> loop_cache_read;   // Full instrs read back from the cache in loop p
  std::vector<std::vector<int>> loop_cache_write;  // Full instrs written to the cache in loop p
  std::vector<std::vector<int>> loop_reduce;       // reductions accumulated in loop p
  std::vector<std::vector<int>> loop_store;        // Full stores in loop p
  std::vector<std::vector<int>> section;           // row instrs before loop s; s == nloops: after
  std::vector<int> home;                           // per Full instr: first loop that needs it (-1: none)
  std::vector<int> cache_slot;                     // per instr, -1 when not cached
  int ncache = 0;
  int live = 0;  // most cached values held across one loop boundary (i64 counts twice)
  // Register rows: the array a cached value lives in. Values whose lifetimes (written in their
  // home loop, last read in a later one) do not overlap share an array of one natural type --
  // a column reads its cached values before it writes any, so a value may take the array of
  // one last read in its own home loop. ptxas does not find this itself in the pipelined
  // bodies (a loop over rows): softmax f16 took 60 registers with an array per value and 40
  // with one shared; layer_norm bf16 at 32 columns a thread 113 and 64.
  std::vector<int> reg_array;  // per instr, -1 when not cached
  int narrays = 0;
};

RowSchedule schedule_row(const KernelPart& part, RowCacheMode mode);

}  // namespace livefuse::jit
