#pragma once
// The lab tools' one way of timing (tools/gpu/lab/): what a callback enqueues on a stream,
// captured as one CUDA graph, replayed `reps` times after 3 warm-up replays; the median in us.
// Standalone (no livefuse headers): the lab builds with nvcc alone.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define LAB_CK(x)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
      std::exit(2);                                                                               \
    }                                                                                             \
  } while (0)

template <class F>
double lab_time_graph_us(cudaStream_t st, int reps, F capture) {
  cudaGraph_t g;
  LAB_CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  capture();
  LAB_CK(cudaStreamEndCapture(st, &g));
  cudaGraphExec_t e;
  LAB_CK(cudaGraphInstantiate(&e, g, 0));
  for (int i = 0; i < 3; ++i) LAB_CK(cudaGraphLaunch(e, st));
  cudaEvent_t a, b;
  LAB_CK(cudaEventCreate(&a));
  LAB_CK(cudaEventCreate(&b));
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    LAB_CK(cudaEventRecord(a, st));
    LAB_CK(cudaGraphLaunch(e, st));
    LAB_CK(cudaEventRecord(b, st));
    LAB_CK(cudaEventSynchronize(b));
    float ms;
    LAB_CK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(ms * 1000.0);
  }
  std::sort(us.begin(), us.end());
  LAB_CK(cudaEventDestroy(a));
  LAB_CK(cudaEventDestroy(b));
  LAB_CK(cudaGraphExecDestroy(e));
  LAB_CK(cudaGraphDestroy(g));
  return us[us.size() / 2];
}

// The labs' arguments: [reps] [--json PATH] (each left as it is when not given).
inline void lab_args(int argc, char** argv, int* reps, const char** json) {
  for (int a = 1; a < argc; ++a) {
    if (!std::strcmp(argv[a], "--json") && a + 1 < argc)
      *json = argv[++a];
    else
      *reps = std::atoi(argv[a]);
  }
}
