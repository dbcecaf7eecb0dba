#pragma once
// Few-row batched products share their cuBLASLt algorithm across lengths.
//
// [ Note -- one algorithm for a decode step's eager attention products ]
// Before a decode step is served by a plan, its attention runs eagerly: q·kᵀ and p·v per head,
// batched GEMMs of one query row against a KV cache one key longer every step. Each length is
// a new cuBLASLt shape, and a new shape cost descriptors plus the heuristic (~0.5 ms on the
// H200 host) and, when the heuristic picked another kernel, that kernel's module load (10-19 ms
// seen): GPT-2's warm-up token took 67 ms where an eager token takes 1.3 (`gemm/new_shape` 260
// times in 512 steps). Such a product (batched, at most kFamilyRows rows on one side) now takes
// the algorithm the heuristic gives its family's representative -- the same product with m, n
// and k rounded up to powers of two, leading dims and batch strides to canonical values past
// them with the same alignment -- when cublasLtMatmulAlgoCheck accepts it for
// the actual shape (else the heuristic runs for the shape, as before). One heuristic a power of
// two of the length, one kernel; and the choice is a function of the shape alone, not of which
// shapes ran before, so an eager run and a plan's replay of the same shape agree bit for bit.
#include "kernels/cuda/gemm_lt.hpp"

namespace livefuse::cuda {

inline constexpr int64_t kFamilyRows = 8;

// Whether `c` takes its family's algorithm: batched, min(m, n) <= kFamilyRows, plain D (no C,
// no f32 partial products).
bool in_few_row_family(const LtCall& c);

// The family's representative of `c` (see the note): what the heuristic is asked about.
// Pointers are `c`'s; every operand's alignment (gemm_lt_operands.hpp) is `c`'s.
LtCall family_representative(const LtCall& c);

}  // namespace livefuse::cuda
