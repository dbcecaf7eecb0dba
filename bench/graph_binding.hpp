#pragma once
// graph_binding records for livefuse-bench-replacement (bench/graph_binding.cpp says what each
// variant measures). CUDA builds only.
#include <cstdint>
#include <vector>

#include "bench/bench_record.hpp"

namespace lfbench {
#if LIVEFUSE_HAS_CUDA
// n: elements of the chain case's tensors (the replacement bench's size).
void bench_graph_binding(std::vector<Record>& out, int64_t n);
#endif
}  // namespace lfbench
