#pragma once
// livefuse-bench-gemm-tune's layer experiment: asks the GPU's L2 for byte ranges of device memory
// (a layer's weights) without anyone waiting for them -- one launch of small blocks, each issuing
// one TMA bulk prefetch of a chunk (sm_90+; elsewhere the launch does nothing) -- in a branch of
// the CUDA graph beside the GEMMs that read them later. The question: do latency-bound GEMMs
// over few rows (BERT at batch 1) run as from a hot L2 then? Measured on an H100 (session 45):
// no -- a layer's four GEMMs took 23.0 us cold, 23.1 with the branch (1 MiB chunks), 24.9 with
// 64 KiB chunks, 19.9 hot. So plans do not prefetch.
#include <cstdint>
#include <span>

namespace lfbench {

struct L2Range {
  const void* p = nullptr;
  int64_t bytes = 0;
};
// At most this many ranges a launch; more are ignored.
inline constexpr int kMaxL2Ranges = 16;

// `chunk`: bytes a block asks for (one TMA bulk prefetch each); fewer, larger chunks take fewer
// of the SMs' block slots from the kernels beside them.
void prefetch_to_l2(std::span<const L2Range> ranges, void* stream,
                    int64_t chunk = int64_t{64} << 10);

// The same ranges asked for line by line: `blocks` blocks of 256 threads, each thread issuing a
// `prefetch.global.L2` for every 128-byte line it owns (no register waits on them). Fewer SMs
// than the chunked form at small chunks; more requests in flight than one TMA bulk prefetch
// a block at large ones.
void prefetch_lines_to_l2(std::span<const L2Range> ranges, void* stream, int blocks = 16);

// The same ranges read for real (16-byte loads cached in L2 only, eight in flight a thread, the
// values discarded): what a prefetch hint may skip, a load cannot.
void load_to_l2(std::span<const L2Range> ranges, void* stream, int blocks = 32);
// Allocates what load_to_l2 needs; call it before a stream capture that calls load_to_l2.
void prepare_load_to_l2();

}  // namespace lfbench
